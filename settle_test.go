package rink

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// Issue 23, "Settled means settled": a rink that looks settled (every role
// held by its owner, every member on the newest map and acknowledging it,
// nothing announced or waiting) must stay at rest. With the default
// options it does not: the leader balances the counts of awaited roles
// (the default WithImbalanceTolerance), in load rounds that start a load
// interval after its election, and those rounds move roles in a rink that
// had looked settled for seconds.
//
// The rinks here are the (three members awaiting the same 60
// roles, every option at its default but the TTL and the rebalance
// delay), scaled down in time: a shorter TTL, rebalance delay and load
// interval (WithLoadInterval), in the proportions (the rink looks
// settled well before the first load round). The imbalance tolerance is
// the default.

const (
	settleTTL      = 4 * time.Second
	settleDelay    = 2 * time.Second
	settleLoad     = 4 * time.Second // the load interval: rounds run on it
	settleRoles    = 60
	quietIntervals = 3 // how many load intervals a rink at rest is watched
)

// settleOpts are the options of every member of these tests: the defaults,
// the tolerance among them, but for a shorter TTL, delay and load interval.
func settleOpts() []Option {
	return []Option{WithSessionTTL(settleTTL), WithRebalanceDelay(settleDelay), WithLoadInterval(settleLoad)}
}

// roleLoops runs, on every member given to start, a holdLoop per role, as
// a service does; the loops end when the test does, before the members
// shut down.
type roleLoops struct {
	roles  []string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRoleLoops(t testing.TB, roles []string) *roleLoops {
	l := &roleLoops{roles: roles}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { l.cancel(); l.wg.Wait() })
	return l
}

func (l *roleLoops) start(m *Rink) {
	for _, role := range l.roles {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			holdLoop(l.ctx, m, role)
		}()
	}
}

// settledRink starts n members (m0 first, so that it leads), each
// awaiting every role of loops from the moment it joins.
func settledRink(t testing.TB, h *history, loops *roleLoops, n int) []*Rink {
	t.Helper()
	name := rinkName(t)
	var ms []*Rink
	for i := 0; i < n; i++ {
		m := join(t, newClient(t), name, append(settleOpts(), WithMemberName(fmt.Sprintf("m%d", i)), h.hook())...)
		loops.start(m)
		if i == 0 {
			eventually(t, 10*time.Second, "m0 ranked", func() bool { return m.Rank().Index == 0 })
		}
		ms = append(ms, m)
	}
	return ms
}

// waitRest waits until every member of ms says that the rink is at rest
// (Rank.Settled, on the same map version), and an Observer says so too,
// and returns the map and the instant it was so. It checks the signal
// against what can be seen from outside (looksSettled): the members are
// ranked, the map announces nothing and lists nobody waiting or leaving,
// every slot is held by exactly its owner, and every member acknowledged
// the map.
func waitRest(t testing.TB, h *history, ms ...*Rink) (*wire.Map, time.Time) {
	t.Helper()
	ob, err := NewObserver(newClient(t), ms[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	const within = 30 * time.Second
	deadline := time.Now().Add(within)
	for {
		why := ""
		v := ms[0].Rank().Version
		for _, r := range ms {
			if rk := r.Rank(); !rk.Settled || rk.Version != v {
				why = fmt.Sprintf("%s: settled %v at version %d", r.Member(), rk.Settled, rk.Version)
			}
		}
		if s := ob.State(); why == "" && (!s.Settled || s.Version != v) {
			why = fmt.Sprintf("observer: settled %v at version %d", s.Settled, s.Version)
		}
		var m *wire.Map
		if why == "" {
			m, why = looksSettled(h, ob, ms)
		}
		if why == "" && m.Version == v {
			return m, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rink did not settle within %v: %s", within, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// looksSettled returns the map of a rink that looks settled, or why it
// does not.
func looksSettled(h *history, ob *Observer, ms []*Rink) (*wire.Map, string) {
	m := ms[0].ownersNow()
	switch {
	case m == nil || m.Version == 0:
		return nil, "no map"
	case len(m.Incoming) > 0 || len(m.Waiting) > 0 || len(m.Leave) > 0:
		return nil, fmt.Sprintf("map %d announces %d heirs, lists %d waiting and %d leaving", m.Version, len(m.Incoming), len(m.Waiting), len(m.Leave))
	case len(m.Members) != len(ms):
		return nil, fmt.Sprintf("map %d ranks %v", m.Version, m.Members)
	}
	for _, r := range ms {
		if rk := r.Rank(); rk.Version != m.Version || rk.Index < 0 || m.Index(r.Member()) < 0 {
			return nil, fmt.Sprintf("%s is at version %d, index %d; the map at %d", r.Member(), rk.Version, rk.Index, m.Version)
		}
	}
	if !h.heldAsMapped(m) {
		return nil, fmt.Sprintf("slots not held as map %d gives them", m.Version)
	}
	s := ob.State()
	if s.Version != m.Version || len(s.Waiting) > 0 || len(s.Joining) > 0 {
		return nil, fmt.Sprintf("observer: version %d, %d waiting, %d joining", s.Version, len(s.Waiting), len(s.Joining))
	}
	for _, st := range s.Members {
		if !st.Live || st.Ack != s.Version {
			return nil, fmt.Sprintf("observer: %s live %v, acknowledged %d of %d", st.Name, st.Live, st.Ack, s.Version)
		}
	}
	m = ms[0].ownersNow()
	if m.Version != s.Version {
		return nil, "the map changed meanwhile"
	}
	return m, ""
}

// roleShares says how many of roles each member of m owns.
func roleShares(m *wire.Map, roles []string) string {
	n := map[string]int{}
	for _, role := range roles {
		n[m.Owner(wire.SlotOf(role, m.Slots))]++
	}
	var parts []string
	for _, name := range m.Members {
		parts = append(parts, fmt.Sprintf("%s:%d", name, n[name]))
	}
	return strings.Join(parts, " ")
}

// watchQuiet watches the history from mark until until, and fails the test
// on acquisitions after mark that allowed refuses: as soon as one
// appears it goes on watching for another second, to report the whole
// move, and returns.
func watchQuiet(t *testing.T, h *history, mark, until time.Time, allowed func(Event) bool) {
	t.Helper()
	var first time.Time
	for {
		now := time.Now()
		bad := moves(h, mark, allowed)
		if len(bad) > 0 && first.IsZero() {
			first = now
		}
		if !first.IsZero() && now.Sub(first) >= time.Second || now.After(until) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	bad := moves(h, mark, allowed)
	if len(bad) == 0 {
		return
	}
	per := map[string][]int{}
	var earliest time.Time
	for _, e := range bad {
		per[e.Member] = append(per[e.Member], e.Slot)
		if earliest.IsZero() || e.Time.Before(earliest) {
			earliest = e.Time
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(per)) {
		sort.Ints(per[name])
		parts = append(parts, fmt.Sprintf("%s acquired slots %v", name, per[name]))
	}
	t.Errorf("the rink looked settled, yet %d slots moved, the first %v after it did: %s", len(bad), earliest.Sub(mark).Round(time.Millisecond), strings.Join(parts, "; "))
	logLoad(t, h, mark)
}

// logLoad logs the load summaries and load rounds since mark: what the
// leader balanced by.
func logLoad(t *testing.T, h *history, mark time.Time) {
	t.Helper()
	for _, e := range h.snapshot() {
		if !e.Time.After(mark) {
			continue
		}
		switch e.Kind {
		case EventLoadReported:
			t.Logf("  %v after: %s reported %d awaited roles in the slots it holds", e.Time.Sub(mark).Round(time.Millisecond), e.Member, e.Roles)
		case EventLoadBalanced:
			t.Logf("  %v after: %s, leading, ran a load round moving %d slots (imbalance after %.3f)", e.Time.Sub(mark).Round(time.Millisecond), e.Member, e.Moved, e.Imbalance)
		}
	}
}

// moves returns the acquisitions after mark that allowed refuses (nil:
// every acquisition).
func moves(h *history, mark time.Time, allowed func(Event) bool) []Event {
	var out []Event
	for _, e := range h.snapshot() {
		if (e.Kind == EventAcquired || e.Kind == EventSecondaryAcquired) && e.Time.After(mark) && (allowed == nil || !allowed(e)) {
			out = append(out, e)
		}
	}
	return out
}

// TestSettledQuietRinkMovesNothing: the rink, left alone once it
// looks settled, makes no acquisition for three load intervals.
func TestSettledQuietRinkMovesNothing(t *testing.T) {
	t.Parallel()
	h := &history{}
	roles := partitions(settleRoles)
	loops := newRoleLoops(t, roles)
	ms := settledRink(t, h, loops, 3)
	m, mark := waitRest(t, h, ms...)
	t.Logf("looked settled at version %d; roles per member %s", m.Version, roleShares(m, roles))
	watchQuiet(t, h, mark, mark.Add(quietIntervals*settleLoad), nil)
	h.check(t)
}

// TestSettledFenceAndReturnMovesNothing: in the rink, once it
// looks settled, one member is cut off etcd until it fences, and reaches
// etcd again before its lease ends (its member key lives: it keeps its rank
// and slots). No role changes owner: the fenced member may take its own
// slots again, and no member acquires a slot it did not hold when the rink
// looked settled, then or in the three load intervals after the return.
func TestSettledFenceAndReturnMovesNothing(t *testing.T) {
	h := &history{}
	p := newProxy(t)
	roles := partitions(settleRoles)
	loops := newRoleLoops(t, roles)
	var ms []*Rink
	name := rinkName(t)
	for i, member := range []string{"a", "b", "c"} {
		cli := newClient(t)
		if member == "b" {
			cli = proxiedClient(t, p) // b is the one cut off
		}
		m := join(t, cli, name, append(settleOpts(), WithMemberName(member), h.hook())...)
		loops.start(m)
		if i == 0 {
			eventually(t, 10*time.Second, "a ranked", func() bool { return m.Rank().Index == 0 })
		}
		ms = append(ms, m)
	}
	b := ms[1]
	m, mark := waitRest(t, h, ms...)
	t.Logf("looked settled at version %d; roles per member %s", m.Version, roleShares(m, roles))
	owner := make([]string, m.Slots)
	for s := range owner {
		owner[s] = m.Owner(s)
	}

	p.PauseTx()
	p.PauseRx()
	paused := true
	unpause := func() {
		if paused {
			paused = false
			p.UnpauseTx()
			p.UnpauseRx()
		}
	}
	defer unpause()
	eventually(t, 2*settleTTL, "b fenced", func() bool { return fencedSince(h, b.Member(), mark) })
	t.Logf("b fenced %v after the rink looked settled", time.Since(mark).Round(time.Millisecond))
	unpause()
	eventually(t, 2*settleTTL, "b back", func() bool { return rejoinedSince(h, b.Member(), mark) })
	_, back := waitRest(t, h, ms...)
	t.Logf("b back, the rink looked settled again %v after the first time", back.Sub(mark).Round(time.Millisecond))

	watchQuiet(t, h, mark, back.Add(quietIntervals*settleLoad), func(e Event) bool {
		return owner[e.Slot] == e.Member // taking one's own slot again moves nothing
	})
	h.check(t)
}

// TestSettledRollingDeployAfterFirstSettle: a rolling deploy of the
// issue's rink, started as soon as it first looks settled (each member
// replaced by a newcomer that joins, is listed as waiting, and takes its
// predecessor's index and slots when it leaves), moves each awaited role
// exactly once: through the deploy, and in the three load intervals after
// the rink looks settled at its end.
func TestSettledRollingDeployAfterFirstSettle(t *testing.T) {
	t.Parallel()
	h := &history{}
	roles := partitions(settleRoles)
	loops := newRoleLoops(t, roles)
	old := settledRink(t, h, loops, 3)
	name := old[0].Name()
	m, mark := waitRest(t, h, old...)
	t.Logf("looked settled at version %d; roles per member %s", m.Version, roleShares(m, roles))

	all := slices.Clone(old)
	for i, o := range old {
		n := join(t, newClient(t), name, append(settleOpts(), WithMemberName(fmt.Sprintf("new%d", i)), h.hook())...)
		loops.start(n)
		all = append(all, n)
		// The readiness check of a rolling deploy: the old member may go
		// once the leader lists the newcomer as waiting.
		eventually(t, 10*time.Second, n.Member()+" listed as waiting", func() bool { return n.Rank().Waiting })
		idx := o.Rank().Index
		want := ownedBy(o.ownersNow(), o.Member())
		if err := o.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		all = slices.DeleteFunc(all, func(r *Rink) bool { return r == o })
		eventually(t, 10*time.Second, n.Member()+" ranked in its predecessor's place", func() bool { return n.Rank().Index == idx })
		got, _ := waitRest(t, h, all...)
		t.Logf("%v after the first settle: %s replaced %s, inheriting %d of its %d slots", time.Since(mark).Round(time.Millisecond), n.Member(), o.Member(), len(ownedBy(got, n.Member())), len(want))
	}
	end, at := waitRest(t, h, all...)
	t.Logf("deployed in %v; roles per member %s", at.Sub(mark).Round(time.Millisecond), roleShares(end, roles))
	// Watch the rink at rest after the deploy for three load intervals (an
	// observation window, not a synchronisation), then count.
	time.Sleep(time.Until(at.Add(quietIntervals * settleLoad)))
	h.check(t)
	count, _ := roleMoves(h, roles, mark)
	var wrong []string
	for _, role := range roles {
		if count[role] != 1 {
			wrong = append(wrong, fmt.Sprintf("%s (slot %d) %d times", role, wire.SlotOf(role, DefaultSlots), count[role]))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d roles were not acquired exactly once since the rink first looked settled: %s", len(wrong), len(roles), strings.Join(wrong, ", "))
		logLoad(t, h, mark)
	}
	for _, role := range roles {
		if hs := holding(role, all...); len(hs) != 1 {
			t.Errorf("%s held by %v at the end", role, names(hs))
		}
	}
}

// indexCur keeps unlisted (the ranked members without a key) from the
// positions where two maps' members differ; it must agree with a scan of
// the whole map after any sequence of maps and member keys.
func FuzzIndexCur(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 200, 4, 5, 130, 1, 2, 7, 250, 0})
	f.Add([]byte{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 200, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		b := newBare(t, "m0", 2, 5)
		st := &b.r.st
		var members []string
		for _, op := range ops {
			name := fmt.Sprint("m", op%32)
			switch {
			case op >= 192: // a map: the members so far, rotated
				prev := st.cur.Members
				next := slices.Clone(members)
				if len(next) > 0 {
					k := int(op) % len(next)
					next = append(next[k:], next[:k]...)
				}
				st.cur.Members = next
				b.r.indexCur(prev, nil)
			case op >= 96: // a key deleted
				if _, ok := st.members[name]; ok {
					delete(st.members, name)
					if b.r.rankedIndex(name) >= 0 {
						st.unlisted[name] = true
					}
				}
			default: // a key put; the next map ranks it
				if _, ok := st.members[name]; !ok {
					st.members[name] = memberInfo{}
					delete(st.unlisted, name)
				}
				if !slices.Contains(members, name) {
					members = append(members, name)
				}
				if op%7 == 0 && len(members) > 1 {
					members = members[1:] // and one leaves the next map
				}
			}
			want := map[string]bool{}
			for _, n := range st.cur.Members {
				if _, ok := st.members[n]; !ok {
					want[n] = true
				}
			}
			if !maps.Equal(st.unlisted, want) {
				t.Fatalf("after %d: unlisted %v, want %v (map %v)", op, st.unlisted, want, st.cur.Members)
			}
			if got := b.r.rankedIndex("m0"); got != slices.Index(st.cur.Members, "m0") {
				t.Fatalf("own index %d, want %d", got, slices.Index(st.cur.Members, "m0"))
			}
		}
	})
}
