package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// drivers are the clients every behaviour runs against.
var drivers = []Driver{libraryDriver{}, rinkdDriver{}}

const ttl = rink.MinSessionTTL

// loadInterval is the members' rink.WithLoadInterval: the rink's leader
// balances the roles awaited at most once per interval (10 s by default).
const loadInterval = 300 * time.Millisecond

// env is one behaviour run against one driver, in a rink of its own.
type env struct {
	t     *testing.T
	d     Driver
	rink  string
	hist  *History
	delay time.Duration // rebalance delay of the members joined
	repl  int
	ttl   time.Duration // the members' session TTL
}

// runs numbers the behaviours' runs, for the names of their rinks.
var runs atomic.Int64

// behaviour runs fn once per driver, each as a parallel subtest, and checks
// the history of the apps' holdings at the end.
func behaviour(t *testing.T, fn func(e *env)) {
	t.Parallel() // the behaviours wait; they hardly compute
	for _, d := range drivers {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			// A rink of its own each run: -count reruns must not meet the
			// last run's members.
			name := fmt.Sprintf("conf-%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(strings.TrimPrefix(t.Name(), "Test"))),
				runs.Add(1))
			e := &env{t: t, d: d, rink: name, hist: &History{}, delay: 200 * time.Millisecond, ttl: ttl}
			fn(e)
			lapsed := 0
			for _, ev := range e.hist.Events() {
				if ev.Why == "validity lapsed" {
					lapsed++
				}
			}
			if lapsed > 0 {
				t.Logf("%d holdings stopped when their grant's validity lapsed", lapsed)
			}
			if err := e.hist.Check(); err != nil {
				t.Errorf("history violates the promise:\n%v\nhistory:\n%s", err, e.dump())
			}
		})
	}
}

func (e *env) dump() string {
	var b strings.Builder
	for _, ev := range e.hist.Events() {
		fmt.Fprintln(&b, " ", ev)
	}
	return b.String()
}

func (e *env) config(member string, roles ...string) Config {
	return Config{Rink: e.rink, Member: member, Roles: roles, TTL: e.ttl, Replicas: e.repl, RebalanceDelay: e.delay, History: e.hist}
}

// join joins a member that awaits roles, or fails the test.
func (e *env) join(member string, roles ...string) Member {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := e.d.Join(ctx, e.t, e.config(member, roles...))
	if err != nil {
		e.t.Fatalf("join %s: %v", member, err)
	}
	return m
}

// waitFor polls cond until it returns "" or d passes; it fails the test
// with cond's last word then.
func (e *env) waitFor(d time.Duration, what string, cond func() string) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			if f := os.Getenv("CONFORMANCE_GOROUTINES"); f != "" { // a goroutine dump, to debug a stall
				buf := make([]byte, 64<<20)
				_ = os.WriteFile(f, buf[:runtime.Stack(buf, true)], 0o644)
			}
			e.t.Fatalf("%s: not within %v: %s\nthe rink: %s\nhistory:\n%s", what, d, why, e.observe(), e.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled says why the rink is not at rest with members as its live
// members, or "": every member reports Settled, every role has exactly
// one holder (app side), one of members, and every member's lookup names
// that holder as the role's owner.
func (e *env) settled(members []Member, roles []string) string {
	for _, m := range members {
		rk, err := m.Rank()
		if err != nil {
			return fmt.Sprintf("%s: rank: %v", m.Name(), err)
		}
		if !rk.Settled {
			return fmt.Sprintf("%s not settled: %+v", m.Name(), rk)
		}
	}
	for _, role := range roles {
		hs := e.hist.Holders(role)
		if len(hs) != 1 {
			return fmt.Sprintf("role %s has holders %v", role, hs)
		}
		if !slices.ContainsFunc(members, func(m Member) bool { return m.Name() == hs[0] }) {
			return fmt.Sprintf("role %s held by %s, not a live member", role, hs[0])
		}
		for _, m := range members {
			owners, ok, err := m.Owners(role)
			if err != nil || !ok || len(owners) == 0 {
				return fmt.Sprintf("%s's lookup of %s: %v %v %v", m.Name(), role, owners, ok, err)
			}
			if owners[0] != hs[0] {
				return fmt.Sprintf("%s's lookup of %s names %v, held by %s", m.Name(), role, owners, hs[0])
			}
		}
	}
	return ""
}

func (e *env) waitSettled(members []Member, roles []string) {
	e.t.Helper()
	e.waitFor(20*time.Second, "settled", func() string { return e.settled(members, roles) })
}

// observe describes the rink as an Observer on a client of its own reads
// it: for the messages of failures.
func (e *env) observe() string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testEndpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err.Error()
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obs, err := rink.NewObserverContext(ctx, cli, e.rink)
	if err != nil {
		return err.Error()
	}
	defer obs.Close()
	st := obs.State()
	var b strings.Builder
	fmt.Fprintf(&b, "version %d leader %s settled %v members:", st.Version, st.Leader, st.Settled)
	for _, m := range st.Members {
		fmt.Fprintf(&b, " %s(#%d, %d slots)", m.Name, m.Index, m.Slots)
	}
	fmt.Fprintf(&b, " waiting: %v joining: %v map error: %q", st.Waiting, st.Joining, st.MapError)
	return b.String()
}

func roleNames(n int) []string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf("role-%d", i))
	}
	return rs
}

func byName(ms []Member, name string) Member {
	for _, m := range ms {
		if m.Name() == name {
			return m
		}
	}
	return nil
}

func without(ms []Member, gone Member) []Member {
	return slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m == gone })
}

// heldElsewhere waits until role is held by a member other than not,
// and returns that acquisition.
func (e *env) heldElsewhere(role, not string, since time.Time, d time.Duration) Event {
	e.t.Helper()
	var got Event
	e.waitFor(d, role+" held by a member other than "+not, func() string {
		ev, ok := e.hist.FirstAcquire(role, not, since)
		if !ok {
			return fmt.Sprintf("holders %v", e.hist.Holders(role))
		}
		got = ev
		return ""
	})
	return got
}

// gracefulTTL is the session TTL of the behaviours that time graceful
// handovers, and gracefulBound how soon a graceful leave must hand a role
// over. A handover takes tens of milliseconds (a few etcd writes and watch
// deliveries, and the app's release), several hundred on a loaded machine,
// whatever the TTL. Waiting for a lease, or for a grant's validity (what
// the heir waits for when an app does not release a revoked role: at least
// 7/8 of the TTL less a renewal period, TTL/3, less rinkd's slack), takes
// about half the TTL or more: with a TTL of 6 s, at least 2.9 s. A longer
// TTL costs these behaviours nothing: nothing in them waits for a lease.
const (
	gracefulTTL   = 6 * time.Second
	gracefulBound = gracefulTTL / 4
)

// TestSingletonHandover: the holder of a singleton role leaves gracefully;
// the role moves to the other member at once (no lease to wait out), never
// held by two.
func TestSingletonHandover(t *testing.T) {
	behaviour(t, func(e *env) {
		e.ttl = gracefulTTL
		roles := []string{"leader"}
		m1 := e.join("m1", roles...)
		m2 := e.join("m2", roles...)
		ms := []Member{m1, m2}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder("leader")
		holder := byName(ms, h.Member)
		other := without(ms, holder)[0]
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := holder.Leave(ctx); err != nil {
			e.t.Fatalf("leave: %v", err)
		}
		ev := e.heldElsewhere("leader", holder.Name(), t0, e.ttl+3*time.Second)
		dt := ev.At.Sub(t0)
		e.t.Logf("handover: %s held by %s %v after %s began to leave", "leader", ev.Member, dt, holder.Name())
		if ev.Member != other.Name() {
			e.t.Errorf("leader went to %s, want %s", ev.Member, other.Name())
		}
		if dt >= gracefulBound {
			e.t.Errorf("a graceful handover took %v, want within %v: it waited for a lease or a grant's validity", dt, gracefulBound)
		}
		e.waitSettled([]Member{other}, roles)
	})
}

// TestCrashFailover: the holder crashes; its roles are held elsewhere once
// its lease has expired (the TTL and etcd's expiry check).
func TestCrashFailover(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder(roles[0])
		victim := byName(ms, h.Member)
		held := victim.Holding()
		t0 := time.Now()
		victim.Crash()
		for _, role := range held {
			ev := e.heldElsewhere(role, victim.Name(), t0, ttl+5*time.Second)
			e.t.Logf("failover: %s held by %s %v after %s crashed", role, ev.Member, ev.At.Sub(t0), victim.Name())
		}
		e.waitSettled(without(ms, victim), roles)
	})
}

// TestSilentPartition: the holder is cut off etcd, and its app hears
// nothing more from its client; the app stops by itself (for rinkd: when
// its grants' validity lapses) before the role is held elsewhere.
func TestSilentPartition(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder(roles[0])
		victim := byName(ms, h.Member)
		held := victim.Holding()
		t0 := time.Now()
		victim.Partition()
		for _, role := range held {
			ev := e.heldElsewhere(role, victim.Name(), t0, ttl+5*time.Second)
			e.t.Logf("partition: %s held by %s %v after %s was cut off", role, ev.Member, ev.At.Sub(t0), victim.Name())
		}
		for _, ev := range e.hist.Events() {
			if ev.Member == victim.Name() && ev.Kind == Release && ev.At.After(t0) {
				e.t.Logf("%s's app stopped %v after the cut: %v", victim.Name(), ev.At.Sub(t0), ev)
			}
		}
		if hs := victim.Holding(); len(hs) != 0 {
			e.t.Errorf("%s's app still acts on %v", victim.Name(), hs)
		}
		e.waitSettled(without(ms, victim), roles)
	})
}

// TestRollingReplacement: every member is replaced, one at a time, as a
// rolling deploy does (the new one ready before the old one leaves): every
// role keeps at most one holder, and is held nearly all the time.
func TestRollingReplacement(t *testing.T) {
	behaviour(t, func(e *env) {
		// Newcomers wait for a departure (as in a rolling deploy), longer
		// than a replacement takes.
		e.delay = 3 * time.Second
		e.ttl = gracefulTTL
		roles := roleNames(6)
		ms := []Member{e.join("old-1", roles...), e.join("old-2", roles...), e.join("old-3", roles...)}
		e.waitSettled(ms, roles)
		start := time.Now()
		for i, old := range slices.Clone(ms) {
			nu := e.join(fmt.Sprintf("new-%d", i+1), roles...)
			e.waitFor(10*time.Second, nu.Name()+" ready", func() string {
				if ok, err := nu.Ready(); !ok || err != nil {
					return fmt.Sprintf("ready %v %v", ok, err)
				}
				return ""
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t0 := time.Now()
			err := old.Leave(ctx)
			took := time.Since(t0)
			cancel()
			if err != nil {
				e.t.Fatalf("%s leaves: %v", old.Name(), err)
			}
			e.t.Logf("%s left in %v", old.Name(), took)
			if took >= gracefulBound {
				e.t.Errorf("%s took %v to leave, want within %v: it waited for a lease or a grant's validity", old.Name(), took, gracefulBound)
			}
			ms = append(without(ms, old), nu)
			e.waitSettled(ms, roles)
		}
		end := time.Now()
		window := end.Sub(start)
		// Each role moved at most three times, each a graceful handover
		// that waits for no lease: a second unheld in all is far more than
		// three such handovers take, and less than one lease's wait.
		for _, role := range roles {
			unheld := e.hist.Unheld(role, start, end)
			e.t.Logf("%s unheld %v of %v (%.1f%%)", role, unheld, window, 100*unheld.Seconds()/window.Seconds())
			if unheld > time.Second {
				e.t.Errorf("%s unheld %v of %v", role, unheld, window)
			}
		}
	})
}

// TestScaleOut: members are added; the roles spread over them, never held
// by two.
func TestScaleOut(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(6)
		ms := []Member{e.join("m1", roles...)}
		e.waitSettled(ms, roles)
		ms = append(ms, e.join("m2", roles...), e.join("m3", roles...))
		e.waitFor(20*time.Second, "roles spread", func() string {
			if why := e.settled(ms, roles); why != "" {
				return why
			}
			for _, m := range ms {
				if len(m.Holding()) == 0 {
					return m.Name() + " holds no role"
				}
			}
			return ""
		})
		for _, m := range ms {
			hs := m.Holding()
			sort.Strings(hs)
			e.t.Logf("%s holds %v", m.Name(), hs)
		}
	})
}

// TestOwnerAgreement: once the rink is at rest, every member's lookup of
// every role names one owner, the member whose app holds it; again after a
// member leaves.
func TestOwnerAgreement(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := append(roleNames(6), "BTC/ETH", "partition:42")
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles) // settled checks the agreement
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ms[0].Leave(ctx); err != nil {
			e.t.Fatal(err)
		}
		e.waitSettled(ms[1:], roles)
	})
}

// expect checks that err is (wraps) want; an ErrUnsupported is allowed
// where the client has no such call, and logged.
func (e *env) expect(what string, err, want error, unsupportedOK bool) {
	e.t.Helper()
	switch {
	case unsupportedOK && errors.Is(err, ErrUnsupported):
		e.t.Logf("%s: %v", what, err)
	case want == nil && err != nil:
		e.t.Errorf("%s: %v, want no error", what, err)
	case want != nil && !errors.Is(err, want):
		e.t.Errorf("%s: got %v, want %v", what, err, want)
	default:
		e.t.Logf("%s: %v", what, err)
	}
}

// TestBadInput: bad input gets the error the client's ecosystem expects:
// the library's exported errors, rinkd's HTTP 400, 404 and 409.
func TestBadInput(t *testing.T) {
	behaviour(t, func(e *env) {
		m := e.join("m1", "a")
		e.waitSettled([]Member{m}, []string{"a"})
		h, _ := e.hist.Holder("a")
		e.expect("await an empty role", m.Await(""), ErrInvalid, false)
		e.expect("await a good role", m.Await("b"), nil, false)
		// A lookup of an empty role: an error (ErrInvalid) where the client
		// has one, else no answer; never an owner.
		if owners, ok, err := m.Owners(""); err != nil {
			e.expect("look an empty role up", err, ErrInvalid, false)
		} else if ok {
			e.t.Errorf("look an empty role up: owners %v", owners)
		} else {
			e.t.Logf("look an empty role up: no answer")
		}
		e.expect("release an empty role", m.Release("", h.Token), ErrInvalid, true)
		e.expect("release token 0", m.Release("a", 0), ErrInvalid, true)
		e.expect("release token -5", m.Release("a", -5), ErrInvalid, true)
		e.expect("report load -1", m.ReportLoad("a", -1), ErrInvalid, true)
		e.expect("report load 0", m.ReportLoad("a", 0), ErrInvalid, true)
		e.expect("report load of an empty role", m.ReportLoad("", 1), ErrInvalid, true)
		e.expect("report load 1", m.ReportLoad("a", 1), nil, false)

		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		e.expect("a second session (member of the same name)", m.JoinAgain(ctx), ErrConflict, false)
		bad := e.config("m2")
		bad.Replicas = -1
		_, err := e.d.Join(ctx, e.t, bad)
		e.expect("join with replicas -1", err, ErrInvalid, false)
		bad = e.config("m3")
		bad.TTL = 1500 * time.Millisecond
		_, err = e.d.Join(ctx, e.t, bad)
		e.expect("join with TTL 1.5 s", err, ErrInvalid, false)
		bad = e.config("bad name!")
		_, err = e.d.Join(ctx, e.t, bad)
		e.expect("join with a bad member name", err, ErrInvalid, false)

		if err := m.Leave(ctx); err != nil {
			e.t.Fatal(err)
		}
		e.expect("await in a session that is over", m.Await("c"), ErrGone, false)
		e.expect("release in a session that is over", m.Release("a", h.Token), ErrGone, true)
		e.expect("report load in a session that is over", m.ReportLoad("a", 1), ErrGone, true)
	})
}

// TestShutdownSemantics: once a member has left, its app holds nothing,
// its session is over (calls about roles get ErrGone), and its lookups
// either answer no more or answer the rink's current truth, never its last
// map.
func TestShutdownSemantics(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...)}
		e.waitSettled(ms, roles)
		leaver, stays := ms[0], ms[1]
		if len(leaver.Holding()) == 0 {
			leaver, stays = stays, leaver
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := leaver.Leave(ctx); err != nil {
			e.t.Fatal(err)
		}
		if hs := leaver.Holding(); len(hs) != 0 {
			e.t.Errorf("%s's app still acts on %v after it left", leaver.Name(), hs)
		}
		for _, role := range roles {
			if slices.Contains(e.hist.Holders(role), leaver.Name()) {
				e.t.Errorf("%s's holding of %s is not over after it left", leaver.Name(), role)
			}
		}
		if !leaver.Ended() {
			e.t.Errorf("%s's session has not ended after it left", leaver.Name())
		}
		e.expect("await after leaving", leaver.Await("x"), ErrGone, false)
		if rk, err := leaver.Rank(); err == nil && (rk.Index != -1 || rk.Size != 0) {
			e.t.Errorf("rank after leaving: %+v", rk)
		} else if err != nil && !errors.Is(err, ErrGone) {
			e.t.Errorf("rank after leaving: %v, want ErrGone", err)
		}
		e.waitSettled([]Member{stays}, roles)
		for _, role := range roles {
			owners, ok, err := leaver.Owners(role)
			if err == nil && ok && (slices.Contains(owners, leaver.Name()) || owners[0] != stays.Name()) {
				e.t.Errorf("%s's lookup of %s after leaving: %v, want no answer or %s", leaver.Name(), role, owners, stays.Name())
			}
		}
	})
}

// TestReplicasPromotion: with two replicas per slot, a crashed primary's
// role goes to its secondary, with a greater token.
func TestReplicasPromotion(t *testing.T) {
	behaviour(t, func(e *env) {
		e.repl = 2
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder(roles[0])
		primary := byName(ms, h.Member)
		var secondary string
		e.waitFor(10*time.Second, "every lookup names the secondary", func() string {
			var seen []string
			for _, m := range ms {
				owners, ok, err := m.Owners(roles[0])
				if err != nil || !ok || len(owners) != 2 || owners[0] != primary.Name() {
					return fmt.Sprintf("%s's lookup: %v %v %v", m.Name(), owners, ok, err)
				}
				seen = append(seen, owners[1])
			}
			if len(slices.Compact(slices.Sorted(slices.Values(seen)))) != 1 {
				return fmt.Sprintf("secondaries disagree: %v", seen)
			}
			secondary = seen[0]
			return ""
		})
		sec := byName(ms, secondary)
		e.waitFor(10*time.Second, secondary+"'s app told it is "+roles[0]+"'s secondary", func() string {
			if !slices.Contains(sec.Secondaries(), roles[0]) {
				return fmt.Sprintf("%s's secondaries: %v", secondary, sec.Secondaries())
			}
			return ""
		})
		t0 := time.Now()
		primary.Crash()
		ev := e.heldElsewhere(roles[0], primary.Name(), t0, ttl+5*time.Second)
		e.t.Logf("promotion: %s held by %s %v after %s crashed (token %d, was %d)", roles[0], ev.Member, ev.At.Sub(t0),
			primary.Name(), ev.Token, h.Token)
		if ev.Member != secondary {
			e.t.Errorf("%s went to %s, not to its secondary %s", roles[0], ev.Member, secondary)
		}
		if ev.Token <= h.Token {
			e.t.Errorf("token %d after %d", ev.Token, h.Token)
		}
		e.waitSettled(without(ms, primary), roles)
		e.waitFor(10*time.Second, secondary+" no longer "+roles[0]+"'s secondary", func() string {
			if slices.Contains(sec.Secondaries(), roles[0]) {
				return fmt.Sprintf("%s's secondaries: %v", secondary, sec.Secondaries())
			}
			return ""
		})
	})
}

// appCrashBound is how soon an app's roles must be held elsewhere after the
// app dies beside a live sidecar.
const appCrashBound = time.Second

// TestAppCrashSidecarAlive: the app dies (its connections close) while its
// sidecar lives: the sidecar leaves at once, and the roles are held
// elsewhere within a second, not a TTL.
func TestAppCrashSidecarAlive(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		victim := ms[0] // the member whose app holds the most roles
		for _, m := range ms {
			if len(m.Holding()) > len(victim.Holding()) {
				victim = m
			}
		}
		held := victim.Holding()
		t0 := time.Now()
		if err := victim.CrashApp(); errors.Is(err, ErrUnsupported) {
			e.t.Skip(err)
		} else if err != nil {
			e.t.Fatal(err)
		}
		var worst time.Duration
		for _, role := range held {
			ev := e.heldElsewhere(role, victim.Name(), t0, ttl+5*time.Second)
			dt := ev.At.Sub(t0)
			worst = max(worst, dt)
			e.t.Logf("app crash: %s held by %s %v after the app's connections closed", role, ev.Member, dt)
		}
		e.t.Logf("app-crash failover: %d roles, slowest %v", len(held), worst)
		if worst > appCrashBound {
			e.t.Errorf("roles held elsewhere %v after the app died beside a live sidecar, want within %v", worst, appCrashBound)
		}
		e.waitSettled(without(ms, victim), roles)
	})
}

// TestAppRestartSidecarAlive: after its app died, a member's sidecar takes a
// new app: the restarted app opens a session and gets its share of the
// roles again.
func TestAppRestartSidecarAlive(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder(roles[0])
		victim := byName(ms, h.Member)
		if err := victim.CrashApp(); errors.Is(err, ErrUnsupported) {
			e.t.Skip(err)
		} else if err != nil {
			e.t.Fatal(err)
		}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := victim.RestartApp(ctx); err != nil {
			e.t.Fatalf("restart the app: %v", err)
		}
		e.t.Logf("the restarted app's session opened %v after the crash", time.Since(t0))
		e.waitFor(20*time.Second, "roles spread again", func() string {
			if why := e.settled(ms, roles); why != "" {
				return why
			}
			if len(victim.Holding()) == 0 {
				return victim.Name() + " holds no role"
			}
			return ""
		})
	})
}

// TestPartitionHeals: a holder is cut off etcd (its app still talks to its
// client), its roles fail over; once the partition heals it rejoins by
// itself and its app gets a share of the roles again, never overlapping.
func TestPartitionHeals(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		h, _ := e.hist.Holder(roles[0])
		victim := byName(ms, h.Member)
		t0 := time.Now()
		victim.Isolate()
		ev := e.heldElsewhere(roles[0], victim.Name(), t0, ttl+5*time.Second)
		e.t.Logf("isolated: %s held by %s %v after %s was cut off", roles[0], ev.Member, ev.At.Sub(t0), victim.Name())
		if hs := victim.Holding(); len(hs) != 0 {
			e.t.Errorf("%s's app still acts on %v", victim.Name(), hs)
		}
		t1 := time.Now()
		victim.Heal()
		e.waitFor(20*time.Second, "roles spread again", func() string {
			if why := e.settled(ms, roles); why != "" {
				return why
			}
			if len(victim.Holding()) == 0 {
				return victim.Name() + " holds no role"
			}
			return ""
		})
		e.t.Logf("healed: settled with %s holding %v %v after the heal", victim.Name(), victim.Holding(), time.Since(t1))
	})
}

// TestChurn: a random schedule of joins, graceful leaves, crashes, (where
// the client has them) app crashes, silent partitions, and isolations that
// heal later, paced by short random pauses, never
// leaving the rink without a live member: no role ever has two holders or a
// token that does not increase, and the rink comes to rest with every role
// held by a live member. The seed is logged: -churn.seed replays it.
func TestChurn(t *testing.T) {
	behaviour(t, func(e *env) {
		seed := *churnSeed
		if seed == 0 {
			seed = time.Now().UnixNano()
		}
		e.t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		roles := roleNames(6)
		next := 0
		join := func() Member {
			next++
			return e.join(fmt.Sprintf("c%d", next), roles...)
		}
		live := []Member{join(), join()}
		var isolated []Member
		appCrashes := true
		for step := range 12 {
			pick := live[rng.IntN(len(live))]
			switch op := rng.IntN(7); {
			case op == 4 && len(isolated) > 0:
				m := isolated[0]
				isolated = isolated[1:]
				m.Heal()
				live = append(live, m)
				e.t.Logf("step %d: %s is healed", step, m.Name())
			case op == 5 && len(live) > 1:
				pick.Isolate()
				live = without(live, pick)
				isolated = append(isolated, pick)
				e.t.Logf("step %d: %s is isolated", step, pick.Name())
			case op == 6:
				pick.Partition()
				live = without(live, pick)
				e.t.Logf("step %d: %s is partitioned, silently", step, pick.Name())
			case op == 0 && len(live) < 4 || len(live) < 2:
				m := join()
				live = append(live, m)
				e.t.Logf("step %d: %s joins", step, m.Name())
			case op == 1:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := pick.Leave(ctx)
				cancel()
				if err != nil {
					e.t.Fatalf("step %d: %s leaves: %v", step, pick.Name(), err)
				}
				live = without(live, pick)
				e.t.Logf("step %d: %s left", step, pick.Name())
			case op == 2 && appCrashes:
				if err := pick.CrashApp(); errors.Is(err, ErrUnsupported) {
					appCrashes = false
					pick.Crash()
					e.t.Logf("step %d: %s crashes (no app crash in this client)", step, pick.Name())
				} else if err != nil {
					e.t.Fatal(err)
				} else {
					e.t.Logf("step %d: %s's app crashes", step, pick.Name())
				}
				live = without(live, pick)
			default:
				pick.Crash()
				live = without(live, pick)
				e.t.Logf("step %d: %s crashes", step, pick.Name())
			}
			if len(live) == 0 {
				live = append(live, join())
			}
			// Pacing, not synchronisation: the next step comes at a
			// random moment of what this one set going.
			time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		}
		for _, m := range isolated {
			m.Heal()
			live = append(live, m)
			e.t.Logf("%s is healed", m.Name())
		}
		e.waitFor(30*time.Second, "settled after the churn", func() string { return e.settled(live, roles) })
	})
}

var churnSeed = flag.Int64("churn.seed", 0, "the seed of TestChurn's schedule (0: the time)")

// shortCuts are the cuts TestShortPartition makes: shorter than the fence
// (7/8 of the TTL after the last renewal), about it, and past the lease.
var shortCuts = []time.Duration{ttl / 2, ttl * 7 / 8, ttl * 5 / 4}

// TestShortPartition: a holder is cut off etcd for less than its TTL, about
// it, or longer, then healed: it rejoins by itself and the rink comes back
// to rest with every member ranked, never two holders.
func TestShortPartition(t *testing.T) {
	behaviour(t, func(e *env) {
		roles := roleNames(4)
		ms := []Member{e.join("m1", roles...), e.join("m2", roles...), e.join("m3", roles...)}
		e.waitSettled(ms, roles)
		for _, cut := range shortCuts {
			var victim Member
			e.waitFor(10*time.Second, "a holder of "+roles[0], func() string {
				h, ok := e.hist.Holder(roles[0])
				if !ok {
					return fmt.Sprintf("holders %v", e.hist.Holders(roles[0]))
				}
				victim = byName(ms, h.Member)
				return ""
			})
			victim.Isolate()
			// The length of the cut is what is tested: a pause, not a
			// synchronisation.
			time.Sleep(cut)
			victim.Heal()
			t0 := time.Now()
			e.waitFor(20*time.Second, fmt.Sprintf("settled after %s was cut off for %v", victim.Name(), cut), func() string {
				return e.settled(ms, roles)
			})
			e.t.Logf("%s cut off for %v: settled %v after the heal", victim.Name(), cut, time.Since(t0))
		}
	})
}
