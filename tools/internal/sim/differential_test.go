package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/simhook"
)

// The simulated member against the production one. The simulator's
// members run the library's core and its executors in virtual time; a
// production member runs the same core with the clientv3 executors, the
// goroutines and the clock. TestMembersAgainstProduction plays one script
// (joins one at a time, a graceful leave, a join, a crash, a crash and a
// restart under the same name, an operator deleting a member key) in both,
// on the model of etcd and on an embedded etcd, and requires the same
// settled rink after each step: every member's rank, every member's answer
// to Owner and Owners for every role, the leader, Rank.Settled, and the
// roles each member's role set was assigned or holds as a secondary. The
// timing differs between the two; what the rink settles on must not. Then
// it checks the rest of production's API against that state (see
// differential_api_test.go).

// diffWorld is one of the two places the script plays in.
type diffWorld interface {
	start(name string)
	leave(name string)
	crash(name string)
	// restart crashes member name and starts it again under its name at
	// once, as a restarted pod: it waits out its predecessor's lease.
	restart(name string)
	// deleteKey deletes member name's key, as an operator's etcdctl del.
	deleteKey(name string)
	// settled returns, for the live members names, the state they agree
	// on, once every member is ranked among them, every role has one
	// owner that all of them name and whose role set was assigned it
	// (and no other role), and the members' counts of roles are within one
	// of each other (rebalanced); every role's Owners agree too, name its
	// owner first and as many secondaries as the replicas allow, whose
	// role sets' Secondary calls hold it (and no other role); and every
	// member names the same leader and map, newer than version after,
	// and says the rink is settled (Rank.Settled). Until then, nil and the
	// first thing missing.
	settled(names []string, after int64) (*settledState, string)
}

// settledState is a rink settled (see diffWorld.settled): each member's
// rank, each role's owner and secondaries, and the rink's leader.
type settledState struct {
	rank    map[string]int      // each member's index
	owners  map[string]string   // by role
	secs    map[string][]string // by role: Owners after the primary
	leader  string
	version int64 // of the map every member applied
}

// shape renders what both worlds must agree on after a step, from the
// state before it (nil: none): the ranks (with ranks, which member has
// which), the leader, each member's count of roles and of roles it is a
// secondary of, and, with moves, how many roles moved. Which roles move
// where may differ with timing; after a join or a graceful leave, how many
// may not. After a crash it may: the orphans are placed, and a load round
// may even the members' reported loads out before or after, so 5 or 7
// roles moved in production where the crashed member held 5 (and 7 in the
// simulator). After a member's key is deleted, who ranks where may differ
// too: the member writes its key again at once, and whether the leader saw
// it gone first (and ranks it anew, last) is a race.
func (s *settledState) shape(before *settledState, moves, ranks bool) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(s.rank)) {
		if ranks {
			fmt.Fprintf(&b, "%s: rank %d of %d\n", name, s.rank[name], len(s.rank))
		} else {
			fmt.Fprintf(&b, "%s: ranked, of %d\n", name, len(s.rank))
		}
	}
	fmt.Fprintf(&b, "leader %s\n", s.leader)
	count, secs := map[string]int{}, map[string]int{}
	moved := 0
	for role, o := range s.owners {
		count[o]++
		if before != nil && before.owners[role] != o {
			moved++
		}
		for _, sec := range s.secs[role] {
			secs[sec]++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(count)) {
		fmt.Fprintf(&b, "%s holds %d roles\n", name, count[name])
	}
	for _, name := range slices.Sorted(maps.Keys(secs)) {
		fmt.Fprintf(&b, "%s is a secondary of %d roles\n", name, secs[name])
	}
	if moves {
		fmt.Fprintf(&b, "%d roles moved\n", moved)
	}
	return b.String()
}

// memberView is what agreed asks each member, by name.
type memberView struct {
	rank      func(name string) (int, int)
	owner     func(name, role string) (string, bool)
	owners    func(name, role string) ([]string, bool)
	view      func(name string) (leader string, version int64, settled bool)
	assigned  func(name string) []string // the roles its role set's Assigned holds, sorted
	secondary func(name string) []string // the roles its Secondary calls hold, sorted
}

// agreed returns the settled state of members named names (see
// diffWorld.settled), with replicas per slot, on a map newer than version
// after, or nil and the first thing that is not settled yet.
func agreed(names []string, roles []string, replicas int, after int64, v memberView) (*settledState, string) {
	st := &settledState{rank: map[string]int{}, owners: map[string]string{}, secs: map[string][]string{}}
	count := map[string]int{}
	for _, name := range names {
		i, n := v.rank(name)
		if i < 0 || n != len(names) {
			return nil, fmt.Sprintf("%s: rank %d of %d", name, i, n)
		}
		st.rank[name] = i
	}
	for k, name := range names {
		l, version, settled := v.view(name)
		if !settled || !slices.Contains(names, l) || version <= after || k > 0 && (l != st.leader || version != st.version) {
			return nil, fmt.Sprintf("%s: leader %q, map v%d (after v%d), settled %v", name, l, version, after, settled)
		}
		st.leader, st.version = l, version
	}
	want := min(replicas, len(names))
	for _, role := range roles {
		var first string
		var firsts []string
		for k, name := range names {
			o, ok := v.owner(name, role)
			os, oks := v.owners(name, role)
			if !ok || !oks || k > 0 && (o != first || !slices.Equal(os, firsts)) {
				return nil, fmt.Sprintf("%s: role %s owned by %q (%v), owners %v (%v)", name, role, o, ok, os, oks)
			}
			first, firsts = o, os
		}
		if !slices.Contains(names, first) || len(firsts) != want || firsts[0] != first {
			return nil, fmt.Sprintf("role %s: owner %q, owners %v", role, first, firsts)
		}
		for _, sec := range firsts[1:] {
			if !slices.Contains(names, sec) || sec == first {
				return nil, fmt.Sprintf("role %s: owners %v", role, firsts)
			}
		}
		count[first]++
		st.owners[role] = first
		st.secs[role] = firsts[1:]
	}
	lo, hi := len(roles), 0
	for _, name := range names {
		lo, hi = min(lo, count[name]), max(hi, count[name])
		var want, wantSecs []string
		for _, role := range roles {
			if st.owners[role] == name {
				want = append(want, role)
			}
			if slices.Contains(st.secs[role], name) {
				wantSecs = append(wantSecs, role)
			}
		}
		slices.Sort(want)
		slices.Sort(wantSecs)
		if got := v.assigned(name); !slices.Equal(got, want) {
			return nil, fmt.Sprintf("%s: assigned %v, owns %v", name, got, want)
		}
		if got := v.secondary(name); !slices.Equal(got, wantSecs) {
			return nil, fmt.Sprintf("%s: a secondary of %v by its handler, of %v by Owners", name, got, wantSecs)
		}
	}
	if hi-lo > 1 {
		return nil, fmt.Sprintf("unbalanced: %v", count)
	}
	return st, ""
}

// liveRoles returns the roles of ctxs whose contexts are live, sorted.
func liveRoles[M ~map[K]context.Context, K comparable](by map[string]M, key K) []string {
	var held []string
	for role, ms := range by {
		if ctx, ok := ms[key]; ok && ctx.Err() == nil {
			held = append(held, role)
		}
	}
	slices.Sort(held)
	return held
}

// simWorld plays the script on the simulator.
type simWorld struct {
	h      *history
	byName map[string]*simMember
}

func newSimWorld(cfg Config) *simWorld {
	return &simWorld{h: newHistory(1, cfg), byName: map[string]*simMember{}}
}

func (s *simWorld) start(name string) {
	var i int
	fmt.Sscanf(name, "m%d", &i)
	s.byName[name] = s.h.start(i, 0)
}

func (s *simWorld) leave(name string) {
	m := s.byName[name]
	m.alive = false
	s.h.leave(m)
	s.h.forget(m)
	delete(s.byName, name)
}

func (s *simWorld) crash(name string) {
	m := s.byName[name]
	m.alive = false
	m.m.Crash()
	s.h.forget(m)
	delete(s.byName, name)
}

func (s *simWorld) settled(names []string, after int64) (*settledState, string) {
	if s.h.res.Violation != "" {
		panic(s.h.res.Violation)
	}
	b := s.h.roleBook
	m := func(name string) simhook.Member { return s.byName[name].m }
	return agreed(names, b.roles, s.h.cfg.replicas(), after, memberView{
		rank:      func(name string) (int, int) { return m(name).Rank() },
		owner:     func(name, role string) (string, bool) { return m(name).Owner(role) },
		owners:    func(name, role string) ([]string, bool) { return m(name).Owners(role) },
		view:      func(name string) (string, int64, bool) { return m(name).View() },
		assigned:  func(name string) []string { return liveRoles(b.prim, s.byName[name]) },
		secondary: func(name string) []string { return liveRoles(b.sec, s.byName[name]) },
	})
}

func (s *simWorld) restart(name string) {
	s.crash(name)
	s.start(name)
}

func (s *simWorld) deleteKey(name string) {
	w := s.h.w
	if _, err := w.Etcd.DeleteRange(&etcdserverpb.DeleteRangeRequest{Key: []byte("rink/sim/members/" + name)}); err != nil {
		panic(err)
	}
	w.pump()
}

// await steps the simulator until settled says something, for at most a
// minute of virtual time.
func (s *simWorld) await(t *testing.T, names []string, after int64) *settledState {
	t.Helper()
	end := s.h.w.now + time.Minute
	why := "no step"
	for s.h.w.now < end && s.h.w.Step() {
		var got *settledState
		if got, why = s.settled(names, after); got != nil {
			return got
		}
	}
	t.Fatalf("simulator: %v not settled in a minute of virtual time: %s", names, why)
	return nil
}

// prodWorld plays the script on production members and an embedded etcd.
type prodWorld struct {
	t       *testing.T
	cfg     Config
	ep      []string
	ctl     *clientv3.Client // an operator's
	rink    string
	roles   []string // by slot, as the simulator's
	members map[string]*prodMember
	gone    []*prodMember // members stopped, their events kept

	mu      sync.Mutex
	running map[string][]*runCall // Run's functions running, by role
	faults  []string              // what the members' functions saw go wrong (see fault)
	tokens  map[string]holding    // each role's holding at the last check
}

type prodMember struct {
	name string
	cli  *clientv3.Client
	r    *rink.Rink
	set  *rink.RoleSet
	mu   sync.Mutex
	ctx  map[string]context.Context // roles assigned and not revoked
	sec  map[string]context.Context // roles held as a secondary (the last Secondary call's)
	ev   []rink.Event               // WithEvents's, in order
	runs sync.WaitGroup             // Run's calls, one per role
	ran  map[string]error           // what Run returned, by role
	rank rink.Rank                  // at the last check (see checkAPI)
	// ready: Ready was true at a check, and so must stay until the
	// member stops (see await).
	ready bool
}

// drainWork is how long Run's functions work on after their context ends,
// with a drain timeout: the heir must not start before they return.
const drainWork = 30 * time.Millisecond

func (p *prodWorld) start(name string) {
	t := p.t
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.ep, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	m := &prodMember{name: name, cli: cli, ctx: map[string]context.Context{}, sec: map[string]context.Context{}, ran: map[string]error{}}
	record := func(e rink.Event) { m.mu.Lock(); m.ev = append(m.ev, e); m.mu.Unlock() }
	r, err := rink.New(cli, p.rink, append(p.cfg.options(""), rink.WithMemberName(name), rink.WithLogger(zap.NewNop()), rink.WithEvents(record))...)
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	m.r = r
	m.set, err = r.Watch(rink.Handler{
		Assigned: func(ctx context.Context, role string) { m.mu.Lock(); m.ctx[role] = ctx; m.mu.Unlock() },
		Revoked:  func(role string) { m.mu.Lock(); delete(m.ctx, role); m.mu.Unlock() },
		Warm:     func(context.Context, string) {}, // (ready at once)
		Secondary: func(ctx context.Context, role string) { // (keeps a copy until it ends)
			m.mu.Lock()
			m.sec[role] = ctx
			m.mu.Unlock()
			<-ctx.Done()
		},
	}, p.roles...)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range p.roles {
		m.runs.Add(1)
		go func() {
			defer m.runs.Done()
			err := r.Run(context.Background(), role, func(ctx context.Context) error { return p.work(m, role, ctx) })
			m.mu.Lock()
			m.ran[role] = err
			m.mu.Unlock()
		}()
	}
	p.members[name] = m
}

func (p *prodWorld) stop(name string, crash bool) {
	m := p.members[name]
	delete(p.members, name)
	p.gone = append(p.gone, m)
	if crash {
		m.cli.Close() // (no revoke: its lease expires)
		<-m.r.Done()
		m.set.Close()
		_ = m.r.Shutdown(context.Background())
	} else {
		m.set.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.r.Shutdown(ctx); err != nil {
			p.t.Errorf("%s: Shutdown: %v", name, err)
		}
		m.cli.Close()
	}
	m.runs.Wait()
	p.checkStopped(m, crash)
}

func (p *prodWorld) leave(name string) { p.stop(name, false) }
func (p *prodWorld) crash(name string) { p.stop(name, true) }

func (p *prodWorld) restart(name string) {
	p.crash(name)
	p.start(name) // (New waits for the crashed one's key to go)
}

func (p *prodWorld) deleteKey(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := p.ctl.Delete(ctx, "rink/"+p.rink+"/members/"+name); err != nil || resp.Deleted != 1 {
		p.t.Fatalf("deleting %s's key: %v (%v)", name, err, resp)
	}
}

func (p *prodWorld) settled(names []string, after int64) (*settledState, string) {
	m := func(name string) *prodMember { return p.members[name] }
	return agreed(names, p.roles, p.cfg.replicas(), after, memberView{
		rank:   func(name string) (int, int) { rk := m(name).r.Rank(); return rk.Index, rk.Size },
		owner:  func(name, role string) (string, bool) { return m(name).r.Owner(role) },
		owners: func(name, role string) ([]string, bool) { return m(name).r.Owners(role) },
		view: func(name string) (string, int64, bool) {
			rk := m(name).r.Rank()
			return rk.Leader, rk.Version, rk.Settled
		},
		assigned:  func(name string) []string { return m(name).live(ctxs) },
		secondary: func(name string) []string { return m(name).live(secs) },
	})
}

// live returns the roles whose contexts in the map of m that of returns
// are live, sorted.
func (m *prodMember) live(of func(m *prodMember) map[string]context.Context) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var held []string
	for role, ctx := range of(m) {
		if ctx.Err() == nil {
			held = append(held, role)
		}
	}
	slices.Sort(held)
	return held
}

// await polls until settled says something, for at most 30 s. Meanwhile
// every member once Ready must stay so, whatever the step does to it (a
// fence and the rejoin that follows included).
func (p *prodWorld) await(t *testing.T, names []string, after int64) *settledState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		for _, name := range slices.Sorted(maps.Keys(p.members)) {
			if m := p.members[name]; m.ready && !m.r.Ready() {
				t.Errorf("%s: Ready went false (Rank %+v)", name, m.r.Rank())
				m.ready = false
			}
		}
		var got *settledState
		if got, why = p.settled(names, after); got != nil {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("production: %v not settled in 30 s: %s", names, why)
	return nil
}

func TestMembersAgainstProduction(t *testing.T) {
	if testing.Short() {
		t.Skip("plays a script on an embedded etcd")
	}
	cli := startEtcd(t)
	t.Run("refusals", func(t *testing.T) { checkRefusals(t, cli) })
	t.Run("default-name", func(t *testing.T) { checkDefaultName(t, cli) })
	// (Production members always run their load reporter: the simulated
	// ones, with Load.)
	plain := DefaultConfig()
	plain.Faults, plain.Load = 0, true
	replicas, warmup, drain := plain, plain, plain
	replicas.Replicas = 2
	warmup.Warmup = time.Second
	drain.Drain = 300 * time.Millisecond
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"plain", plain}, {"replicas", replicas}, {"warmup", warmup}, {"drain", drain}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // (a rink each)
			playScript(t, cli.Endpoints(), "diff-"+c.name, c.cfg)
		})
	}
}

// playScript plays the script in both worlds, with cfg, production's in
// rink name. After each step, it checks production's API against the
// settled state (see checkAPI).
func playScript(t *testing.T, ep []string, name string, cfg Config) {
	sim := newSimWorld(cfg)
	ctl, err := clientv3.New(clientv3.Config{Endpoints: ep, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	prod := &prodWorld{t: t, cfg: cfg, ep: ep, ctl: ctl, rink: name, roles: sim.h.roleBook.roles, members: map[string]*prodMember{},
		running: map[string][]*runCall{}, tokens: map[string]holding{}}
	t.Cleanup(func() {
		for _, name := range slices.Sorted(maps.Keys(prod.members)) {
			prod.leave(name)
		}
		prod.checkEvents(t)
	})
	live := []string{}
	var simWas, prodWas *settledState
	// step does what in both worlds, and compares what they settle on
	// (on a map newer than before: the settled state before a step is not
	// the settled state after it, even where the step changes no member).
	// With moves, how many roles moved: not after a crash, nor a member
	// key deleted (that member leaves the rink and joins it again); with
	// ranks, which member has which rank: not after a member key deleted
	// (see shape).
	step := func(what string, moves, ranks bool, do func(w diffWorld)) {
		t.Helper()
		do(sim)
		do(prod)
		var simAfter, prodAfter int64
		if simWas != nil {
			simAfter, prodAfter = simWas.version, prodWas.version
		}
		simIs, prodIs := sim.await(t, live, simAfter), prod.await(t, live, prodAfter)
		want, got := simIs.shape(simWas, moves, ranks), prodIs.shape(prodWas, moves, ranks)
		if want != got {
			t.Fatalf("after %s, the simulator settled on\n%s\nproduction on\n%s", what, want, got)
		}
		simWas, prodWas = simIs, prodIs
		t.Logf("after %s:\n%s", what, got)
		prod.checkAPI(t, what, live, prodIs)
	}
	for _, name := range []string{"m0", "m1", "m2"} {
		live = append(live, name)
		step(name+" joins", true, true, func(w diffWorld) { w.start(name) })
	}
	live = slices.DeleteFunc(live, func(n string) bool { return n == "m1" })
	step("m1 leaves", true, true, func(w diffWorld) { w.leave("m1") })
	live = append(live, "m3")
	step("m3 joins", true, true, func(w diffWorld) { w.start("m3") })
	live = slices.DeleteFunc(live, func(n string) bool { return n == "m0" })
	step("m0 crashes", false, true, func(w diffWorld) { w.crash("m0") })
	step("m2 crashes and restarts under its name", false, true, func(w diffWorld) { w.restart("m2") })
	step("an operator deletes m3's member key", false, false, func(w diffWorld) { w.deleteKey("m3") })
}
