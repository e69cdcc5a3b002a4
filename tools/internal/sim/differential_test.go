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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// The simulated member against the production one. The simulator's
// members run the library's core and its executors in virtual time; a
// production member runs the same core with the clientv3 executors, the
// goroutines and the clock. TestMembersAgainstProduction plays one script
// (joins one at a time, a graceful leave, a join, a crash) in both, on the
// model of etcd and on an embedded etcd, and requires the same settled
// rink after each step: every member's rank, every member's answer to
// Owner for every role, and the roles each member's role set was assigned.
// The timing differs between the two; what the rink settles on must not.

// diffWorld is one of the two places the script plays in.
type diffWorld interface {
	start(name string)
	leave(name string)
	crash(name string)
	// settled returns, for the live members names, the state they agree
	// on, once every member is ranked among them, every role has one
	// owner that all of them name and whose role set was assigned it
	// (and no other role), and the members' counts of roles are within one
	// of each other (rebalanced); nil until then.
	settled(names []string) *settledState
}

// settledState is a rink settled (see diffWorld.settled): each member's
// rank, and each role's owner.
type settledState struct {
	ranks  string            // "name: rank i of n" lines
	owners map[string]string // by role
}

// shape renders what both worlds must agree on after a step, from the
// state before it (nil: none): the ranks, each member's count of roles,
// and, with moves, how many roles moved. Which roles move where may differ
// with timing; after a join or a graceful leave, how many may not. After
// a crash it may: the orphans are placed, and a load round may even the
// members' reported loads out before or after, so 5 or 7 roles moved in
// production where the crashed member held 5 (and 7 in the simulator).
func (s *settledState) shape(before *settledState, moves bool) string {
	var b strings.Builder
	b.WriteString(s.ranks)
	count := map[string]int{}
	moved := 0
	for role, o := range s.owners {
		count[o]++
		if before != nil && before.owners[role] != o {
			moved++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(count)) {
		fmt.Fprintf(&b, "%s holds %d roles\n", name, count[name])
	}
	if moves {
		fmt.Fprintf(&b, "%d roles moved\n", moved)
	}
	return b.String()
}

// agreed returns the settled state of members named names (see
// diffWorld.settled), or nil when they have not settled. rank, owner and
// assigned ask each member.
func agreed(names []string, roles []string, rank func(name string) (int, int), owner func(name, role string) (string, bool), assigned func(name string) []string) *settledState {
	st := &settledState{owners: map[string]string{}}
	var b strings.Builder
	count := map[string]int{}
	for _, name := range names {
		i, n := rank(name)
		if i < 0 || n != len(names) {
			return nil
		}
		fmt.Fprintf(&b, "%s: rank %d of %d\n", name, i, n)
	}
	st.ranks = b.String()
	for _, role := range roles {
		var first string
		for k, name := range names {
			o, ok := owner(name, role)
			if !ok || k > 0 && o != first {
				return nil
			}
			first = o
		}
		if !slices.Contains(names, first) {
			return nil
		}
		count[first]++
		st.owners[role] = first
	}
	lo, hi := len(roles), 0
	for _, name := range names {
		lo, hi = min(lo, count[name]), max(hi, count[name])
		var want []string
		for _, role := range roles {
			if st.owners[role] == name {
				want = append(want, role)
			}
		}
		slices.Sort(want)
		if !slices.Equal(assigned(name), want) {
			return nil
		}
	}
	if hi-lo > 1 {
		return nil
	}
	return st
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

func (s *simWorld) settled(names []string) *settledState {
	if s.h.res.Violation != "" {
		panic(s.h.res.Violation)
	}
	b := s.h.roleBook
	return agreed(names, b.roles,
		func(name string) (int, int) { return s.byName[name].m.Rank() },
		func(name, role string) (string, bool) { return s.byName[name].m.Owner(role) },
		func(name string) []string {
			m := s.byName[name]
			var held []string
			for role, ms := range b.prim {
				if ctx, ok := ms[m]; ok && ctx.Err() == nil {
					held = append(held, role)
				}
			}
			slices.Sort(held)
			return held
		})
}

// await steps the simulator until settled says something, for at most a
// minute of virtual time.
func (s *simWorld) await(t *testing.T, names []string) *settledState {
	t.Helper()
	end := s.h.w.now + time.Minute
	for s.h.w.now < end && s.h.w.Step() {
		if got := s.settled(names); got != nil {
			return got
		}
	}
	t.Fatalf("simulator: %v not settled in a minute of virtual time", names)
	return nil
}

// prodWorld plays the script on production members and an embedded etcd.
type prodWorld struct {
	t       *testing.T
	cfg     Config
	ep      []string
	rink    string
	roles   []string
	members map[string]*prodMember
}

type prodMember struct {
	cli *clientv3.Client
	r   *rink.Rink
	set *rink.RoleSet
	mu  sync.Mutex
	ctx map[string]context.Context // roles assigned and not revoked
}

func (p *prodWorld) start(name string) {
	t := p.t
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.ep, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := rink.New(cli, p.rink, append(p.cfg.options(""), rink.WithMemberName(name), rink.WithLogger(zap.NewNop()))...)
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	m := &prodMember{cli: cli, r: r, ctx: map[string]context.Context{}}
	m.set, err = r.Watch(rink.Handler{
		Assigned:  func(ctx context.Context, role string) { m.mu.Lock(); m.ctx[role] = ctx; m.mu.Unlock() },
		Revoked:   func(role string) { m.mu.Lock(); delete(m.ctx, role); m.mu.Unlock() },
		Warm:      func(context.Context, string) {},                     // (ready at once)
		Secondary: func(ctx context.Context, _ string) { <-ctx.Done() }, // (keeps a copy until it ends)
	}, p.roles...)
	if err != nil {
		t.Fatal(err)
	}
	p.members[name] = m
}

func (p *prodWorld) stop(name string, crash bool) {
	m := p.members[name]
	delete(p.members, name)
	if crash {
		m.cli.Close() // (no revoke: its lease expires)
		<-m.r.Done()
		m.set.Close()
		_ = m.r.Shutdown(context.Background())
		return
	}
	m.set.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.r.Shutdown(ctx); err != nil {
		p.t.Errorf("%s: Shutdown: %v", name, err)
	}
	m.cli.Close()
}

func (p *prodWorld) leave(name string) { p.stop(name, false) }
func (p *prodWorld) crash(name string) { p.stop(name, true) }

func (p *prodWorld) settled(names []string) *settledState {
	return agreed(names, p.roles,
		func(name string) (int, int) { rk := p.members[name].r.Rank(); return rk.Index, rk.Size },
		func(name, role string) (string, bool) { return p.members[name].r.Owner(role) },
		func(name string) []string {
			m := p.members[name]
			m.mu.Lock()
			defer m.mu.Unlock()
			var held []string
			for role, ctx := range m.ctx {
				if ctx.Err() == nil {
					held = append(held, role)
				}
			}
			slices.Sort(held)
			return held
		})
}

// await polls until settled says something, for at most 30 s.
func (p *prodWorld) await(t *testing.T, names []string) *settledState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got := p.settled(names); got != nil {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("production: %v not settled in 30 s", names)
	return nil
}

func TestMembersAgainstProduction(t *testing.T) {
	if testing.Short() {
		t.Skip("plays a script on an embedded etcd")
	}
	cli := startEtcd(t)
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
			playScript(t, cli.Endpoints(), "diff-"+c.name, c.cfg)
		})
	}
}

// playScript plays the script in both worlds, with cfg, production's in
// rink name.
func playScript(t *testing.T, ep []string, name string, cfg Config) {
	sim := newSimWorld(cfg)
	prod := &prodWorld{t: t, cfg: cfg, ep: ep, rink: name, roles: sim.h.roleBook.roles, members: map[string]*prodMember{}}
	t.Cleanup(func() {
		for _, name := range slices.Sorted(maps.Keys(prod.members)) {
			prod.leave(name)
		}
	})
	live := []string{}
	var simWas, prodWas *settledState
	step := func(what string, do func(w diffWorld)) {
		t.Helper()
		do(sim)
		do(prod)
		simIs, prodIs := sim.await(t, live), prod.await(t, live)
		moves := !strings.Contains(what, "crash")
		want, got := simIs.shape(simWas, moves), prodIs.shape(prodWas, moves)
		if want != got {
			t.Fatalf("after %s, the simulator settled on\n%s\nproduction on\n%s", what, want, got)
		}
		simWas, prodWas = simIs, prodIs
		t.Logf("after %s:\n%s", what, got)
	}
	for _, name := range []string{"m0", "m1", "m2"} {
		live = append(live, name)
		step(name+" joins", func(w diffWorld) { w.start(name) })
	}
	live = slices.DeleteFunc(live, func(n string) bool { return n == "m1" })
	step("m1 leaves", func(w diffWorld) { w.leave("m1") })
	live = append(live, "m3")
	step("m3 joins", func(w diffWorld) { w.start("m3") })
	live = slices.DeleteFunc(live, func(n string) bool { return n == "m0" })
	step("m0 crashes", func(w diffWorld) { w.crash("m0") })
}
