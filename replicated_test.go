package rink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Replicas and zones on the real etcd (issue 26): every acquisition and
// release of primaries and secondaries is recorded, and the history checked
// for the promise with replicas: never two primaries of a slot, tokens
// rising, never more than k members holding a slot, never a member holding
// a slot twice.

// checkReplicaHistory checks events for the promise with k replicas per
// slot: checkHistory's for the primaries, and at every instant at most k
// members holding each slot, as primary or secondary, each at most once.
func checkReplicaHistory(events []Event, k int) error {
	events = slices.Clone(events)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	var primaries []Event
	type hold struct {
		slot   int
		member string
	}
	holds := map[hold]int{} // 1: primary, 2: secondary
	count := map[int]int{}
	take := func(e Event, kind int) error {
		h := hold{e.Slot, e.Member}
		if holds[h] != 0 {
			return fmt.Errorf("twice: %s acquired slot %d (kind %d) at %v holding it already (kind %d)", e.Member, e.Slot, kind, e.Time.Format(time.StampMicro), holds[h])
		}
		holds[h] = kind
		if count[e.Slot]++; count[e.Slot] > k {
			return fmt.Errorf("more than %d: %s acquired slot %d at %v beside %d holders", k, e.Member, e.Slot, e.Time.Format(time.StampMicro), count[e.Slot]-1)
		}
		return nil
	}
	drop := func(e Event, kind int) {
		h := hold{e.Slot, e.Member}
		if holds[h] == kind {
			delete(holds, h)
			count[e.Slot]--
		}
	}
	for _, e := range events {
		var err error
		switch e.Kind {
		case EventAcquired:
			primaries = append(primaries, e)
			err = take(e, 1)
		case EventSecondaryAcquired:
			err = take(e, 2)
		case EventReleased:
			primaries = append(primaries, e)
			drop(e, 1)
		case EventSecondaryReleased:
			drop(e, 2)
		case EventFenced:
			primaries = append(primaries, e)
			for h := range holds {
				if h.member == e.Member {
					delete(holds, h)
					count[h.slot]--
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return checkHistory(primaries)
}

// TestReplicaCheckerCatchesViolations shows the replica checker can fail.
func TestReplicaCheckerCatchesViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for name, c := range map[string]struct {
		events []Event
		k      int
	}{
		"three holders of two": {[]Event{
			{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(1)},
			{Kind: EventSecondaryAcquired, Member: "c", Slot: 1, Time: at(2)},
		}, 2},
		"a member twice": {[]Event{
			{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: EventSecondaryAcquired, Member: "a", Slot: 1, Time: at(1)},
		}, 3},
		"two primaries": {[]Event{
			{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: EventAcquired, Member: "b", Slot: 1, Token: 6, Time: at(1)},
		}, 3},
	} {
		if checkReplicaHistory(c.events, c.k) == nil {
			t.Errorf("%s: not caught", name)
		}
	}
	ok := []Event{
		{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
		{Kind: EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(1)},
		{Kind: EventSecondaryReleased, Member: "b", Slot: 1, Time: at(2)},
		{Kind: EventSecondaryAcquired, Member: "c", Slot: 1, Time: at(3)},
		{Kind: EventFenced, Member: "a", Time: at(4)},
		{Kind: EventSecondaryReleased, Member: "c", Slot: 1, Time: at(5)},
		{Kind: EventAcquired, Member: "c", Slot: 1, Token: 9, Time: at(5)},
	}
	if err := checkReplicaHistory(ok, 2); err != nil {
		t.Errorf("a valid history refused: %v", err)
	}
}

// replicaHolders returns, per slot, the members holding it at the end of
// the history as primary and as secondary.
func replicaHolders(events []Event) (primary, secondary map[int][]string) {
	type hold struct {
		slot   int
		member string
	}
	open := map[hold]int{}
	for _, e := range events {
		switch e.Kind {
		case EventAcquired:
			open[hold{e.Slot, e.Member}] = 1
		case EventSecondaryAcquired:
			open[hold{e.Slot, e.Member}] = 2
		case EventReleased:
			if open[hold{e.Slot, e.Member}] == 1 {
				delete(open, hold{e.Slot, e.Member})
			}
		case EventSecondaryReleased:
			if open[hold{e.Slot, e.Member}] == 2 {
				delete(open, hold{e.Slot, e.Member})
			}
		case EventFenced:
			for h := range open {
				if h.member == e.Member {
					delete(open, h)
				}
			}
		}
	}
	primary, secondary = map[int][]string{}, map[int][]string{}
	for h, kind := range open {
		if kind == 1 {
			primary[h.slot] = append(primary[h.slot], h.member)
		} else {
			secondary[h.slot] = append(secondary[h.slot], h.member)
		}
	}
	for _, m := range []map[int][]string{primary, secondary} {
		for s := range m {
			slices.Sort(m[s])
		}
	}
	return primary, secondary
}

// heldAsReplicated reports whether every slot of m is held as m says at
// the end of the history: its primary by its primary, its secondaries by
// its secondaries.
func heldAsReplicated(events []Event, m *wire.Map) bool {
	if m == nil || len(m.Members) == 0 {
		return false
	}
	primary, secondary := replicaHolders(events)
	for s := 0; s < m.Slots; s++ {
		names := m.ReplicaNames(s)
		if got := primary[s]; len(got) != 1 || got[0] != names[0] {
			return false
		}
		want := slices.Sorted(slices.Values(names[1:]))
		if !slices.Equal(secondary[s], want) {
			return false
		}
	}
	return true
}

// replicated starts n members with k replicas per slot, member i in
// zones[i%len(zones)] (none when zones is empty), and waits until every
// slot is held as the map says.
func replicated(t *testing.T, h *history, n, k int, zones []string, opts ...Option) (string, []*Rink) {
	t.Helper()
	name := rinkName(t)
	var ms []*Rink
	for i := range n {
		o := append([]Option{WithMemberName(fmt.Sprintf("m%d", i)), WithReplicas(k), WithSlots(64), h.hook()}, opts...)
		if len(zones) > 0 {
			o = append(o, WithZone(zones[i%len(zones)]))
		}
		ms = append(ms, join(t, newClient(t), name, o...))
	}
	settleReplicated(t, h, ms...)
	return name, ms
}

// settleReplicated waits until every member applied one map and every
// slot is held as it says.
func settleReplicated(t *testing.T, h *history, ms ...*Rink) {
	t.Helper()
	eventually(t, 20*time.Second, "every replica held as mapped", func() bool {
		m := ms[0].ownersNow()
		if m == nil || len(m.Members) != len(ms) {
			return false
		}
		for _, r := range ms[1:] {
			if r.Rank().Version != m.Version {
				return false
			}
		}
		return heldAsReplicated(h.snapshot(), m)
	})
}

// A rink of three members in three zones with two replicas per slot: every
// slot has a primary and a secondary held on distinct members in distinct
// zones, Owners names them, Handler.Secondary runs for the secondaries,
// and a crashed member's primaries go to their secondaries, which held them
// warm; never more than two holders of a slot.
func TestReplicasCrashPromotesSecondaries(t *testing.T) {
	t.Parallel()
	h := &history{}
	name := rinkName(t)
	zones := []string{"a", "b", "c"}
	var ms []*Rink
	cs := newClient(t) // (m0's, to crash)
	for i := range 3 {
		cli := cs
		if i > 0 {
			cli = newClient(t)
		}
		ms = append(ms, join(t, cli, name, WithMemberName(fmt.Sprintf("m%d", i)), WithReplicas(2), WithSlots(64), WithZone(zones[i]), h.hook()))
	}
	settleReplicated(t, h, ms...)
	m := ms[1].ownersNow()
	if m.Schema != wire.SchemaReplicas || m.Replicas != 2 {
		t.Fatalf("map of schema %d, %d replicas; want 4, 2", m.Schema, m.Replicas)
	}
	zoneOf := map[string]string{"m0": "a", "m1": "b", "m2": "c"}
	for s := range m.Slots {
		names := m.ReplicaNames(s)
		if len(names) != 2 || zoneOf[names[0]] == zoneOf[names[1]] {
			t.Fatalf("slot %d: replicas %v", s, names)
		}
	}
	// Owners and Handler.Secondary on the member that is a secondary of
	// a role.
	role := ""
	var secondary *Rink
	for j := 0; role == ""; j++ {
		r := fmt.Sprint("role-", j)
		if owners, _ := ms[1].Owners(r); owners[0] == "m0" {
			role = r
			secondary = ms[slices.Index([]string{"m0", "m1", "m2"}, owners[1])]
		}
	}
	warm := make(chan context.Context, 4)
	var mu sync.Mutex
	var assigned []string
	set, err := secondary.Watch(Handler{
		Assigned: func(ctx context.Context, r string) {
			mu.Lock()
			assigned = append(assigned, r)
			mu.Unlock()
		},
		Secondary: func(ctx context.Context, r string) {
			warm <- ctx
			<-ctx.Done()
		},
	}, role)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var secCtx context.Context
	select {
	case secCtx = <-warm:
	case <-time.After(10 * time.Second):
		t.Fatal("Handler.Secondary not called for a role held as a secondary")
	}
	before := *ms[1].ownersNow()
	mark := time.Now()
	cs.Close() // m0 crashes: its lease is left to expire
	settleReplicated(t, h, ms[1:]...)
	after := ms[1].ownersNow()
	// Every primary of m0 went to the member that was its secondary.
	for s := range before.Slots {
		if before.Owner(s) != "m0" {
			if after.Owner(s) != before.Owner(s) {
				t.Errorf("slot %d: primary moved from %s to %s", s, before.Owner(s), after.Owner(s))
			}
			continue
		}
		if want := before.ReplicaNames(s)[1]; after.Owner(s) != want {
			t.Errorf("slot %d: m0's primary went to %s, not to its secondary %s", s, after.Owner(s), want)
		}
	}
	select {
	case <-secCtx.Done():
		if !errors.Is(context.Cause(secCtx), ErrPromoted) {
			t.Errorf("the secondary's context ended with %v, want ErrPromoted", context.Cause(secCtx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the promoted secondary's context did not end")
	}
	eventually(t, 10*time.Second, "the promoted member assigned the role", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(assigned, role)
	})
	// Each primary of m0 was taken by a member that held it warm.
	warmSlots := map[string]map[int]bool{}
	for _, e := range h.snapshot() {
		if e.Kind == EventSecondaryAcquired {
			if warmSlots[e.Member] == nil {
				warmSlots[e.Member] = map[int]bool{}
			}
			warmSlots[e.Member][e.Slot] = true
		}
		if e.Kind == EventAcquired && e.Time.After(mark) && !warmSlots[e.Member][e.Slot] {
			t.Errorf("%s took slot %d cold", e.Member, e.Slot)
		}
	}
	if err := checkReplicaHistory(h.snapshot(), 2); err != nil {
		t.Fatal(err)
	}
}

// New refuses a rink of another number of replicas per slot.
func TestReplicaMismatch(t *testing.T) {
	h := &history{}
	name, _ := replicated(t, h, 1, 2, nil)
	for _, k := range []int{1, 3} {
		_, err := New(newClient(t), name, WithReplicas(k), WithSlots(64), WithSessionTTL(2*time.Second))
		if !errors.Is(err, ErrReplicaMismatch) || !errors.Is(err, ErrIncompatible) {
			t.Errorf("New with %d replicas in a rink of 2: %v, want ErrReplicaMismatch", k, err)
		}
	}
}

// A rolling deploy of a replicated rink: each member is replaced by a
// newcomer in its zone that waits, then the old member shuts down. Each
// slot's primary moves once (the newcomer takes the index with every
// replica), its secondaries likewise, and never more than k hold a slot.
func TestReplicasRollingDeploy(t *testing.T) {
	t.Parallel()
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprint("roles watched ", watched), func(t *testing.T) { replicasRollingDeploy(t, watched) })
	}
}

// replicasRollingDeploy is TestReplicasRollingDeploy, with every member
// watching 64 roles (a service's: balanced by load) when watched.
func replicasRollingDeploy(t *testing.T, watched bool) {
	h := &history{}
	const k = 2
	zones := []string{"a", "b", "c"}
	watch := func(m *Rink) {
		if !watched {
			return
		}
		set, err := m.Watch(Handler{Assigned: func(context.Context, string) {}, Secondary: func(ctx context.Context, _ string) { <-ctx.Done() }}, partitions(64)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
	}
	name, old := replicated(t, h, 3, k, zones, WithRebalanceDelay(2*time.Second))
	for _, m := range old {
		watch(m)
	}
	settleReplicated(t, h, old...)
	mark := time.Now()
	all := slices.Clone(old)
	for i, o := range old {
		n := join(t, newClient(t), name, WithMemberName(fmt.Sprintf("new%d", i)), WithReplicas(k), WithSlots(64),
			WithZone(zones[i]), WithRebalanceDelay(2*time.Second), h.hook())
		watch(n)
		all = append(all, n)
		eventually(t, 10*time.Second, "newcomer listed as waiting", func() bool { return n.Rank().Waiting })
		if err := o.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		all = slices.DeleteFunc(all, func(r *Rink) bool { return r == o })
		eventually(t, 10*time.Second, "newcomer ranked", func() bool { return n.Rank().Index == i })
		settleReplicated(t, h, all...)
	}
	primaries, secondaries := map[int]int{}, map[int]int{}
	for _, e := range h.snapshot() {
		if e.Time.After(mark) {
			switch e.Kind {
			case EventAcquired:
				primaries[e.Slot]++
			case EventSecondaryAcquired:
				secondaries[e.Slot]++
			}
		}
	}
	for s := range 64 {
		if primaries[s] != 1 || secondaries[s] != k-1 {
			t.Errorf("slot %d: primary acquired %d times, secondaries %d times during the deploy; want 1 and %d", s, primaries[s], secondaries[s], k-1)
		}
	}
	if err := checkReplicaHistory(h.snapshot(), k); err != nil {
		t.Fatal(err)
	}
}

// A graceful leave with nobody waiting promotes the leaver's secondaries,
// and hands its secondaries over without moving any other primary.
func TestReplicasGracefulLeavePromotes(t *testing.T) {
	h := &history{}
	_, ms := replicated(t, h, 4, 2, nil)
	before := *ms[0].ownersNow()
	if err := ms[3].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	settleReplicated(t, h, ms[:3]...)
	after := ms[0].ownersNow()
	for s := range before.Slots {
		was := before.Owner(s)
		switch {
		case was == "m3" && after.Owner(s) != before.ReplicaNames(s)[1]:
			t.Errorf("slot %d: the leaver's primary went to %s, not to its secondary %s", s, after.Owner(s), before.ReplicaNames(s)[1])
		case was != "m3" && after.Owner(s) != was && !slices.Contains(before.ReplicaNames(s), after.Owner(s)):
			t.Errorf("slot %d: primary moved cold from %s to %s", s, was, after.Owner(s))
		}
	}
	if err := checkReplicaHistory(h.snapshot(), 2); err != nil {
		t.Fatal(err)
	}
}

// A replicated rink at rest moves nothing, with the default options: no
// primary and no secondary is acquired for three load intervals once it
// says it is at rest, with roles in use on every member.
func TestReplicasAtRestMoveNothing(t *testing.T) {
	t.Parallel()
	h := &history{}
	roles := partitions(settleRoles)
	loops := newRoleLoops(t, roles)
	name := rinkName(t)
	var ms []*Rink
	for i := range 4 {
		m := join(t, newClient(t), name, append(settleOpts(), WithMemberName(fmt.Sprintf("m%d", i)), WithReplicas(3),
			WithZone([]string{"a", "b"}[i%2]), h.hook())...)
		loops.start(m)
		if i == 0 {
			eventually(t, 10*time.Second, "m0 ranked", func() bool { return m.Rank().Index == 0 })
		}
		ms = append(ms, m)
	}
	m, mark := waitRest(t, h, ms...)
	if !heldAsReplicated(h.snapshot(), m) {
		t.Fatal("at rest with replicas not held as mapped")
	}
	watchQuiet(t, h, mark, mark.Add(quietIntervals*settleLoad), nil)
	if err := checkReplicaHistory(h.snapshot(), 3); err != nil {
		t.Fatal(err)
	}
}

// A member cut off from etcd holds its primaries and secondaries until it
// fences; others take them only after, and never more than k hold a slot.
func TestReplicasPartition(t *testing.T) {
	t.Parallel()
	h := &history{}
	p := newProxy(t)
	name := rinkName(t)
	var ms []*Rink
	for i := range 3 {
		cli := newClient(t)
		if i == 2 {
			cli = proxyClient(t, p)
		}
		ms = append(ms, join(t, cli, name, WithMemberName(fmt.Sprintf("m%d", i)), WithReplicas(2), WithSlots(64), h.hook()))
	}
	settleReplicated(t, h, ms...)
	p.BlackholeTx()
	p.BlackholeRx()
	eventually(t, 15*time.Second, "the others took over", func() bool {
		m := ms[0].ownersNow()
		return m.Index("m2") < 0 && heldAsReplicated(h.snapshot(), m)
	})
	p.UnblackholeTx()
	p.UnblackholeRx()
	settleReplicated(t, h, ms...)
	if err := checkReplicaHistory(h.snapshot(), 2); err != nil {
		t.Fatal(err)
	}
}

// A leader elected in a rink balanced by load, before its members have
// reported their load over a whole interval (their first summaries, as they
// join, say no role yet), keeps the map balanced by load: the leader that
// left gracefully handed its index and slots to a waiting member, and no
// other slot moves. (A leader that took the empty first summaries for "no
// load" rebalanced by count, and moved slots a rolling deploy had just
// handed over: rinkbench replicas moved 6 of 1,024 roles three times.)
func TestNewLeaderKeepsLoadBalance(t *testing.T) {
	t.Parallel()
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprint("replicas ", k), func(t *testing.T) {
			h := &history{}
			name := rinkName(t)
			var ms []*Rink
			watch := func(m *Rink) {
				set, err := m.Watch(Handler{Assigned: func(context.Context, string) {}, Secondary: func(ctx context.Context, _ string) { <-ctx.Done() }}, partitions(1024)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(set.Close)
			}
			for i := range 9 {
				m := join(t, newClient(t), name, WithMemberName(fmt.Sprintf("m%d", i)), WithReplicas(k), WithRebalanceDelay(2*time.Second), h.hook())
				watch(m)
				ms = append(ms, m)
			}
			waitSettled(t, ms...)
			if !ms[0].ownersNow().ByLoad {
				t.Fatal("the rink is not balanced by load")
			}
			n := join(t, newClient(t), name, WithMemberName("new0"), WithReplicas(k), WithRebalanceDelay(2*time.Second), h.hook())
			watch(n)
			eventually(t, 10*time.Second, "new0 waiting", func() bool { return n.Rank().Waiting })
			before := *ms[1].ownersNow()
			if err := ms[0].Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			all := append(slices.Clone(ms[1:]), n)
			waitSettled(t, all...)
			after := ms[1].ownersNow()
			for v := range before.Table {
				want := before.Owner(v)
				if want == "m0" {
					want = "new0"
				}
				if after.Owner(v) != want {
					t.Fatalf("entry %d of the table went from %s to %s (the new leader balanced by count: %v)", v, before.Owner(v), after.Owner(v), !after.ByLoad)
				}
			}
		})
	}
}

// A zone is lost after an earlier crash, balanced by count: every primary
// the zone held is taken over by a member that held it as a secondary
// until then (its secondary context ended with ErrPromoted), although the
// zone's leases end one by one, each a map. (The leader held the lost
// members as ghosts between the two ends, with no zone: counted as a zone
// of their own, they drew secondaries away from slots whose primaries
// they held, which then failed over cold; found by examples/replicated.)
func TestReplicasZoneLossWarm(t *testing.T) {
	t.Parallel()
	h := &history{}
	name := rinkName(t)
	var ms []*Rink
	var cs []*clientv3.Client
	for i := range 6 {
		c := newClient(t)
		cs = append(cs, c)
		ms = append(ms, join(t, c, name, WithMemberName(fmt.Sprint("m", i)), WithZone(fmt.Sprint("z", i%3)), WithReplicas(2),
			WithSlots(64), WithImbalanceTolerance(0), h.hook()))
	}
	waitSettled(t, ms...)
	crash := func(victims ...int) time.Time {
		mark := time.Now()
		var live []*Rink
		for i, m := range ms {
			if slices.Contains(victims, i) {
				cs[i].Close()
				continue
			}
			if m.Err() == nil {
				live = append(live, m)
			}
		}
		for _, v := range victims {
			<-ms[v].Done()
		}
		eventually(t, 10*time.Second, "the crashed members' leases ended", func() bool { return len(live[0].ownersNow().Members) == len(live) })
		waitSettled(t, live...)
		return mark
	}
	crash(3)
	mark := crash(2, 5)
	last := map[[2]string]Event{} // (member, slot) -> its last secondary event
	failovers := 0
	for _, e := range h.snapshot() {
		k := [2]string{e.Member, fmt.Sprint(e.Slot)}
		switch e.Kind {
		case EventSecondaryAcquired, EventSecondaryReleased:
			last[k] = e
		case EventAcquired:
			if e.Time.Before(mark) || e.From != "m2" && e.From != "m5" {
				continue
			}
			failovers++
			if s, ok := last[k]; !ok || s.Kind != EventSecondaryReleased || !errors.Is(s.Cause, ErrPromoted) {
				t.Errorf("%s took slot %d from %s cold (its last secondary event for it: %+v)", e.Member, e.Slot, e.From, s)
			}
		}
	}
	if failovers == 0 {
		t.Fatal("no failover from the lost zone")
	}
	if err := checkReplicaHistory(h.snapshot(), 2); err != nil {
		t.Fatal(err)
	}
}

// The context Handler.Secondary gets checks the lease's fence deadline in
// its Err, as a role context does: a process stopped past its deadline
// acts on nothing as a secondary after it resumes, before its keeper
// wakes to fence. (A plain child of the holding's context did not: a
// storm found a member acting as a secondary 1 to 4 ms after SIGCONT,
// beside the member that had taken its place, three holders for two.)
func TestSecondaryContextChecksTheDeadline(t *testing.T) {
	r := newRink("deadline", options{member: "m", log: zap.NewNop()})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	now := int64(100)
	inc := &incarnation{ctx: ctx, cancel: cancel, clock: func() int64 { return now }}
	inc.deadline.Store(200)
	held := &slotState{ctx: &roleContext{Context: ctx, r: r, inc: inc}, changed: make(chan struct{})}
	got := make(chan context.Context, 1)
	calls := newSecondaryCalls(func(ctx context.Context, _ string) {
		got <- ctx
		<-ctx.Done()
	})
	defer calls.stop()
	calls.update(3, held, []string{"role"})
	sctx := <-got
	if err := sctx.Err(); err != nil {
		t.Fatalf("the secondary's context ended at once: %v", err)
	}
	now = 300 // past the deadline: a process that resumes after a stop
	if sctx.Err() == nil {
		t.Fatal("a secondary's context acts past the lease's fence deadline")
	}
	if !errors.Is(context.Cause(sctx), ErrFenced) {
		t.Errorf("cause %v, want ErrFenced", context.Cause(sctx))
	}
}

// With WithWarmup and replicas, a newcomer's share of primaries is
// announced and warmed up before the members that held them let go, as
// with one replica, and its new secondaries start at once through
// Handler.Secondary; never more than k holders of a slot.
func TestReplicasWarmupScaleOut(t *testing.T) {
	h := &history{}
	const k = 2
	zones := []string{"a", "b", "c"}
	w := newWarmLog(200 * time.Millisecond)
	var mu sync.Mutex
	secondary := map[string]bool{} // member/role
	handler := func(member string) Handler {
		hd := w.handler(member)
		hd.Secondary = func(ctx context.Context, role string) {
			mu.Lock()
			secondary[member+"/"+role] = true
			mu.Unlock()
			<-ctx.Done()
		}
		return hd
	}
	roles := partitions(64)
	opts := []Option{WithWarmup(2 * time.Second), WithRebalanceDelay(2500 * time.Millisecond)}
	name, ms := replicated(t, h, 3, k, zones, opts...)
	for _, m := range ms {
		set, err := m.Watch(handler(m.Member()), roles...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
	}
	settleReplicated(t, h, ms...)
	d := join(t, newClient(t), name, append([]Option{WithMemberName("d"), WithReplicas(k), WithSlots(64), WithZone("a"), h.hook()}, opts...)...)
	sd, err := d.Watch(handler("d"), roles...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sd.Close)
	ms = append(ms, d)
	eventually(t, 20*time.Second, "d holds its share", func() bool { return d.Rank().Index == 3 && len(sd.Held()) > 0 })
	settleReplicated(t, h, ms...)
	for _, role := range sd.Held() {
		s := wire.SlotOf(role, 64)
		acquired, aok := firstEvent(h, "d", EventAcquired, s)
		warmed, wok := w.get(w.warmed, "d", role)
		if !aok || !wok || !warmed.Before(acquired) {
			t.Errorf("%s: d acquired it at %v (%v), warmed up at %v (%v)", role, acquired.Format(time.StampMicro), aok, warmed.Format(time.StampMicro), wok)
		}
	}
	m := d.ownersNow()
	seconds := 0
	for _, role := range roles {
		names := m.ReplicaNames(wire.SlotOf(role, 64))
		if slices.Contains(names[1:], "d") {
			seconds++
			mu.Lock()
			ok := secondary["d/"+role]
			mu.Unlock()
			if !ok {
				t.Errorf("%s: d is its secondary, and Handler.Secondary never ran for it", role)
			}
		}
	}
	if seconds == 0 {
		t.Error("d holds no secondary")
	}
	if err := checkReplicaHistory(h.snapshot(), k); err != nil {
		t.Fatal(err)
	}
}
