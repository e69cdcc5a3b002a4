package rink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// holding reports which of the members hold role right now.
func holding(role string, members ...*Rink) []*Rink {
	var out []*Rink
	for _, m := range members {
		if _, ok := m.Get(role); ok {
			out = append(out, m)
		}
	}
	return out
}

func names(rs []*Rink) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Member())
	}
	return out
}

// gaps returns, for slot s, the time between each release (or fence) by one
// member and the next acquisition by another, for acquisitions after since.
func gaps(events []Event, s int, since time.Time) []time.Duration {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	var out []time.Duration
	var lastEnd time.Time
	holder := ""
	for _, e := range events {
		switch {
		case e.Kind == EventAcquired && e.Slot == s:
			if holder == "" && !lastEnd.IsZero() && e.Time.After(since) {
				out = append(out, e.Time.Sub(lastEnd))
			}
			holder = e.Member
		case (e.Kind == EventReleased && e.Slot == s || e.Kind == EventFenced) && e.Member == holder:
			holder, lastEnd = "", e.Time
		}
	}
	return out
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("n=%d min=%v median=%v max=%v", len(s), s[0], s[len(s)/2], s[len(s)-1])
}

func TestBadInput(t *testing.T) {
	cli := newClient(t)
	tests := []struct {
		name string
		cli  *clientv3.Client
		rink string
		opts []Option
		want error
	}{
		{"nil client", nil, "x", nil, ErrNilClient},
		{"empty name", cli, "", nil, ErrInvalidName},
		{"space in name", cli, "a b", nil, ErrInvalidName},
		{"control character", cli, "a\x01", nil, ErrInvalidName},
		{"leading slash", cli, "/a", nil, ErrInvalidName},
		{"trailing slash", cli, "a/", nil, ErrInvalidName},
		{"double slash", cli, "a//b", nil, ErrInvalidName},
		{"reserved segment members", cli, "orders/members", nil, ErrInvalidName},
		{"reserved segment election", cli, "orders/election/x", nil, ErrInvalidName},
		{"reserved segment map", cli, "map", nil, ErrInvalidName},
		{"reserved segment .load", cli, "orders/.load", nil, ErrInvalidName},
		{"reserved segment .tail", cli, "orders/.tail", nil, ErrInvalidName},
		{"member with slash", cli, "x", []Option{WithMemberName("a/b")}, ErrInvalidName},
		{"member with space", cli, "x", []Option{WithMemberName("a b")}, ErrInvalidName},
		{"short TTL", cli, "x", []Option{WithSessionTTL(time.Second)}, ErrInvalidOption},
		{"fractional TTL", cli, "x", []Option{WithSessionTTL(2500 * time.Millisecond)}, ErrInvalidOption},
		{"negative delay", cli, "x", []Option{WithRebalanceDelay(-time.Second)}, ErrInvalidOption},
		{"zero slots", cli, "x", []Option{WithSlots(0)}, ErrInvalidOption},
		{"too many slots", cli, "x", []Option{WithSlots(MaxSlots + 1)}, ErrInvalidOption},
		{"zero capacity", cli, "x", []Option{WithCapacity(0)}, ErrInvalidOption},
		{"negative capacity", cli, "x", []Option{WithCapacity(-2)}, ErrInvalidOption},
		{"NaN capacity", cli, "x", []Option{WithCapacity(math.NaN())}, ErrInvalidOption},
		{"infinite capacity", cli, "x", []Option{WithCapacity(math.Inf(1))}, ErrInvalidOption},
		{"tiny tolerance", cli, "x", []Option{WithImbalanceTolerance(0.001)}, ErrInvalidOption},
		{"negative tolerance", cli, "x", []Option{WithImbalanceTolerance(-0.1)}, ErrInvalidOption},
		{"NaN tolerance", cli, "x", []Option{WithImbalanceTolerance(math.NaN())}, ErrInvalidOption},
		{"nil logger", cli, "x", []Option{WithLogger(nil)}, ErrInvalidOption},
		{"zero join timeout", cli, "x", []Option{WithJoinTimeout(0)}, ErrInvalidOption},
		{"nil option", cli, "x", []Option{nil}, ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cli, tt.rink, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if r != nil {
				t.Fatal("got a rink with an error")
			}
		})
	}

	r := join(t, cli, rinkName(t))
	if _, err := r.AwaitRoleContext(context.Background(), ""); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("AwaitRoleContext(\"\") err = %v", err)
	}
	if ctx := r.AwaitRole(""); ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrInvalidRole) {
		t.Errorf("AwaitRole(\"\") = %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	if _, ok := r.Get(""); ok {
		t.Error("Get(\"\") ok")
	}
	if _, ok := r.Owner(""); ok {
		t.Error("Owner(\"\") ok")
	}
	var none context.Context // a caller's nil context must not panic
	if _, ok := Token(none); ok {
		t.Error("Token(nil) ok")
	}
	if _, ok := Token(context.Background()); ok {
		t.Error("Token(Background) ok")
	}
}

func TestUnreachableEtcd(t *testing.T) {
	dead := freeURL() // nothing listens here
	cli := newClient(t, dead.Host)
	start := time.Now()
	_, err := New(cli, "x", WithJoinTimeout(500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("New took %v with a 500ms join timeout", d)
	}
}

func TestSingleMember(t *testing.T) {
	cli := newClient(t)
	h := &history{}
	r := join(t, cli, rinkName(t), WithMemberName("solo"), h.hook())
	ctx, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader")
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := Token(ctx)
	if !ok || tok <= 0 {
		t.Fatalf("token = %d, %v", tok, ok)
	}
	if got, ok := r.Get("leader"); !ok || got != ctx {
		t.Fatal("Get does not return the held role's context")
	}
	if owner, ok := r.Owner("partition:42"); !ok || owner != "solo" {
		t.Fatalf("Owner = %q, %v", owner, ok)
	}
	rk := r.Rank()
	if rk.Index != 0 || rk.Size != 1 || rk.Member != "solo" || rk.Version < 1 || rk.Leader != "solo" || rk.Waiting {
		t.Fatalf("rank = %+v", rk)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Fatalf("role context cause after Shutdown = %v", context.Cause(ctx))
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if rk := r.Rank(); rk.Index != -1 || rk.Leader != "" || rk.Size != 0 {
		t.Fatalf("rank after Shutdown = %+v, want out of the rink", rk)
	}
	if ctx := r.AwaitRole("leader"); !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Fatalf("AwaitRole after Shutdown: cause %v", context.Cause(ctx))
	}
	if _, err := r.AwaitRoleContext(context.Background(), "leader"); !errors.Is(err, ErrShutdown) {
		t.Fatalf("AwaitRoleContext after Shutdown: %v", err)
	}
	// The member key and lease are gone.
	resp, err := cli.Get(context.Background(), newKeys(r.Name()).Members(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("member keys after Shutdown: %v %v", resp.Kvs, err)
	}
	h.check(t)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSingletonAcrossThree(t *testing.T) {
	t.Parallel()
	h := &history{}
	name := rinkName(t)
	var ms []*Rink
	for i := 0; i < 3; i++ {
		ms = append(ms, join(t, newClient(t), name, WithMemberName(fmt.Sprintf("m%d", i)), h.hook()))
	}
	live := slices.Clone(ms)
	for len(live) > 0 {
		var holder *Rink
		eventually(t, 10*time.Second, "one member holds leader", func() bool {
			hs := holding("leader", live...)
			if len(hs) == 1 {
				holder = hs[0]
			}
			return len(hs) == 1
		})
		// Stay with at most one holder for a while, through map changes.
		for i := 0; i < 20; i++ {
			if got := holding("leader", live...); len(got) > 1 {
				t.Fatalf("two holders: %v", names(got))
			}
			time.Sleep(time.Millisecond)
		}
		if err := holder.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		live = slices.DeleteFunc(live, func(r *Rink) bool { return r == holder })
	}
	h.check(t)
}

// roleOf returns a role that r owns in its current map.
func roleOf(t testing.TB, r *Rink) string {
	t.Helper()
	for j := 0; j < 100000; j++ {
		role := fmt.Sprint("role-", j)
		if o, _ := r.Owner(role); o == r.Member() {
			return role
		}
	}
	t.Fatalf("%s owns no role", r.Member())
	return ""
}

// pair starts a two-member rink, both ranked; the first to join leads.
func pair(t testing.TB, h *history, first, second string, opts ...Option) (a, b *Rink, ca *clientv3.Client) {
	t.Helper()
	name := rinkName(t)
	ca, cb := newClient(t), newClient(t)
	clients := map[string]*clientv3.Client{first: ca, second: cb}
	if first != "a" {
		clients[first], clients[second] = cb, ca
	}
	x := join(t, clients[first], name, append([]Option{WithMemberName(first), h.hook()}, opts...)...)
	eventually(t, 10*time.Second, first+" ranked", func() bool { return x.Rank().Index == 0 })
	y := join(t, clients[second], name, append([]Option{WithMemberName(second), h.hook()}, opts...)...)
	eventually(t, 10*time.Second, "both ranked", func() bool { return x.Rank().Size == 2 && y.Rank().Size == 2 && y.Rank().Index >= 0 })
	if first == "a" {
		return x, y, ca
	}
	return y, x, ca
}

// TestGracefulHandover hands a role over by Shutdown, with the holder as
// a plain member and as the rink's leader, and logs the gaps.
func TestGracefulHandover(t *testing.T) {
	t.Parallel()
	for _, holderLeads := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder_leads=%v", holderLeads), func(t *testing.T) {
			const rounds = 5
			var all []time.Duration
			for i := 0; i < rounds; i++ {
				h := &history{}
				first, second := "b", "a"
				if holderLeads {
					first, second = "a", "b"
				}
				a, b, _ := pair(t, h, first, second)
				if got := a.Rank().Leader == "a"; got != holderLeads {
					t.Fatalf("leader is %q", a.Rank().Leader)
				}
				role := roleOf(t, a)
				ctxA, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan context.Context, 1)
				go func() {
					ctx, _ := b.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
					got <- ctx
				}()
				mark := time.Now()
				if err := a.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				ctxB := <-got
				if ctxB == nil {
					t.Fatal("b did not get the role")
				}
				if !errors.Is(context.Cause(ctxA), ErrShutdown) {
					t.Fatalf("a's context: %v", context.Cause(ctxA))
				}
				ta, _ := Token(ctxA)
				tb, _ := Token(ctxB)
				if tb <= ta {
					t.Fatalf("token went from %d to %d", ta, tb)
				}
				h.check(t)
				g := gaps(h.snapshot(), wire.SlotOf(role, DefaultSlots), mark)
				if len(g) != 1 {
					t.Fatalf("%d handovers of the role, want 1", len(g))
				}
				all = append(all, g...)
			}
			t.Logf("graceful handover gap (a's release to b's acquire): %s", spread(all))
		})
	}
}

// TestCrashFailover closes a holder's client without revoking its lease:
// the role moves once the lease expires.
func TestCrashFailover(t *testing.T) {
	t.Parallel()
	const rounds = 3
	var failovers []time.Duration
	for i := 0; i < rounds; i++ {
		h := &history{}
		a, b, ca := pair(t, h, "a", "b")
		role := roleOf(t, a)
		if _, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role); err != nil {
			t.Fatal(err)
		}
		crash := time.Now()
		ca.Close() // no revoke: the lease must expire
		if _, err := b.AwaitRoleContext(ctxTimeout(t, 15*time.Second), role); err != nil {
			t.Fatal(err)
		}
		failovers = append(failovers, time.Since(crash))
		<-a.Done()
		if err := a.Shutdown(context.Background()); !errors.Is(err, ErrClientClosed) {
			t.Errorf("Shutdown after client close: %v", err)
		}
		h.check(t)
	}
	t.Logf("crash failover at TTL 2s (client closed to successor holding): %s", spread(failovers))
}

// cluster starts n members of one rink, each with its own client, and waits
// until all are ranked.
func cluster(t testing.TB, h *history, n int, opts ...Option) (string, []*Rink, []*clientv3.Client) {
	t.Helper()
	name := rinkName(t)
	var ms []*Rink
	var cs []*clientv3.Client
	for i := 0; i < n; i++ {
		c := newClient(t)
		m := join(t, c, name, append([]Option{WithMemberName(fmt.Sprintf("m%d", i)), h.hook()}, opts...)...)
		if i == 0 {
			eventually(t, 10*time.Second, "first member ranked", func() bool { return m.Rank().Index == 0 })
		}
		ms, cs = append(ms, m), append(cs, c)
	}
	eventually(t, 30*time.Second, "all ranked", func() bool {
		for _, m := range ms {
			if rk := m.Rank(); rk.Index < 0 || rk.Size != n {
				return false
			}
		}
		return true
	})
	return name, ms, cs
}

// settle waits until every member holds every slot its map gives it, and
// the map announces no move still to be made (with a warm-up, a map that
// ranks a newcomer first gives it nothing: it only announces its slots).
func settle(t testing.TB, h *history, ms ...*Rink) {
	t.Helper()
	eventually(t, 10*time.Second, "members hold their slots", func() bool {
		m := ms[0].ownersNow()
		if m == nil || len(m.Incoming) > 0 || !h.heldAsMapped(m) {
			return false
		}
		for _, r := range ms[1:] {
			if r.Rank().Version != m.Version {
				return false
			}
		}
		// Every member is in the map, ranked or waiting: a member that
		// has just joined has the map of before it, as the others do,
		// until the leader proclaims one that lists it
		// (TestChangeRecordsInTheMapKey read that earlier map now and
		// then: issue 44).
		for _, r := range ms {
			if m.Index(r.Member()) < 0 && !slices.ContainsFunc(m.Waiting, func(w wire.Waiter) bool { return w.Name == r.Member() }) {
				return false
			}
		}
		return true
	})
}

// slotsSince lists, per member, the slots it acquired and released after t0.
func slotsSince(h *history, t0 time.Time) (acq, rel map[string]map[int]int) {
	acq, rel = map[string]map[int]int{}, map[string]map[int]int{}
	for _, e := range h.snapshot() {
		if !e.Time.After(t0) {
			continue
		}
		dst := acq
		if e.Kind == EventReleased {
			dst = rel
		} else if e.Kind != EventAcquired {
			continue
		}
		if dst[e.Member] == nil {
			dst[e.Member] = map[int]int{}
		}
		dst[e.Member][e.Slot]++
	}
	return acq, rel
}

// slotsOf returns the slots m gives member, in order.
func slotsOf(m *wire.Map, member string) []int {
	var out []int
	for s := 0; s < m.Slots; s++ {
		if m.Owner(s) == member {
			out = append(out, s)
		}
	}
	return out
}

func ownedBy(m *wire.Map, member string) map[int]bool {
	out := map[int]bool{}
	for s := 0; s < m.Slots; s++ {
		if m.Owner(s) == member {
			out[s] = true
		}
	}
	return out
}

// rollingDeploy starts 4 members, then replaces each by a newcomer, the way
// a Kubernetes Deployment with MaxSurge=1, MaxUnavailable=0 does: the
// newcomer joins and waits, then an old member leaves and the newcomer takes
// its index and slots. started is called for every member as it joins. It
// returns the members at the end and when the replacements began.
func rollingDeploy(tb testing.TB, h *history, started func(*Rink)) ([]*Rink, time.Time) {
	tb.Helper()
	opts := []Option{WithRebalanceDelay(2 * time.Second)}
	name, old, _ := cluster(tb, h, 4, opts...)
	settle(tb, h, old...)
	for _, m := range old {
		started(m)
	}
	mark := time.Now()
	all := slices.Clone(old)
	for i, o := range old {
		n := join(tb, newClient(tb), name, append([]Option{WithMemberName(fmt.Sprintf("new%d", i)), h.hook()}, opts...)...)
		all = append(all, n)
		started(n)
		// The readiness check of a rolling deploy: the old member may go
		// once the leader lists the newcomer as waiting.
		eventually(tb, 10*time.Second, "newcomer listed as waiting", func() bool { return n.Rank().Waiting })
		want := ownedBy(o.ownersNow(), o.Member())
		if err := o.Shutdown(context.Background()); err != nil {
			tb.Fatal(err)
		}
		all = slices.DeleteFunc(all, func(r *Rink) bool { return r == o })
		eventually(tb, 10*time.Second, "newcomer ranked", func() bool { return n.Rank().Index == i })
		settle(tb, h, all...)
		if got := ownedBy(n.ownersNow(), n.Member()); !maps.Equal(got, want) {
			tb.Fatalf("newcomer %s owns %d slots, its predecessor had %d", n.Member(), len(got), len(want))
		}
	}
	return all, mark
}

// roleMoves counts, per role, the acquisitions after mark and collects the
// gaps of those moves.
func roleMoves(h *history, roles []string, mark time.Time) (moves map[string]int, gapsPerMove []time.Duration) {
	acq, _ := slotsSince(h, mark)
	moves = map[string]int{}
	events := h.snapshot()
	for _, role := range roles {
		s := wire.SlotOf(role, DefaultSlots)
		for _, per := range acq {
			moves[role] += per[s]
		}
		gapsPerMove = append(gapsPerMove, gaps(events, s, mark)...)
	}
	return moves, gapsPerMove
}

func partitions(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprint("partition:", i))
	}
	return out
}

// TestRollingDeploy replaces each of 4 members by a newcomer: every role
// moves exactly once, and user code awaiting roles sees one holder each.
func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	roles := partitions(64)
	h := &history{}
	// Every member, old and new, runs a loop per role, as a user would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var loops sync.WaitGroup
	await := func(m *Rink) {
		for _, role := range roles {
			loops.Add(1)
			go func() {
				defer loops.Done()
				holdLoop(ctx, m, role)
			}()
		}
	}
	all, mark := rollingDeploy(t, h, await)
	h.check(t)
	moves, moveGaps := roleMoves(h, roles, mark)
	for _, role := range roles {
		if moves[role] != 1 {
			t.Errorf("%s (slot %d) acquired %d times during the deploy, want 1", role, wire.SlotOf(role, DefaultSlots), moves[role])
		}
	}
	// Every role is held by exactly one of the new members.
	for _, role := range roles {
		eventually(t, 5*time.Second, role+" held once", func() bool { return len(holding(role, all...)) == 1 })
	}
	t.Logf("rolling deploy of 4 members x %d roles: %d role moves, gap per move %s", len(roles), len(moveGaps), spread(moveGaps))
	cancel()
	loops.Wait()
}

// TestScaleOut adds a fifth member after the rebalance delay: it takes only
// its share, and no other member's role is interrupted.
func TestScaleOut(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, ms, _ := cluster(t, h, 4)
	settle(t, h, ms...)
	before := *ms[0].ownersNow()
	role := roleOf(t, ms[1])
	held, err := ms[1].AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	mark := time.Now()
	n := join(t, newClient(t), name, WithMemberName("m4"), h.hook())
	all := append(slices.Clone(ms), n)
	eventually(t, 10*time.Second, "m4 ranked", func() bool { return n.Rank().Index == 4 })
	settle(t, h, all...)
	after := *n.ownersNow()
	if m := ownersMoved(before, after); m < DefaultSlots/5 || m > DefaultSlots/5+1 {
		t.Fatalf("%d slots moved, want %d's share", m, DefaultSlots/5)
	}
	acq, rel := slotsSince(h, mark)
	for member, slots := range acq {
		if member != "m4" {
			t.Errorf("%s acquired %d slots during scale-out", member, len(slots))
		}
	}
	released := 0
	for _, slots := range rel {
		released += len(slots)
	}
	if len(acq["m4"]) != ownersMoved(before, after) || released != ownersMoved(before, after) {
		t.Errorf("m4 acquired %d slots, others released %d, moved %d", len(acq["m4"]), released, ownersMoved(before, after))
	}
	if after.Owner(wire.SlotOf(role, DefaultSlots)) == "m1" && held.Err() != nil {
		t.Error("a role that stayed with m1 was interrupted")
	}
	h.check(t)
}

// TestLeaderCrash crashes the leader: only its slots move, spread over the
// survivors, and nothing else is interrupted.
func TestLeaderCrash(t *testing.T) {
	t.Parallel()
	h := &history{}
	_, ms, cs := cluster(t, h, 4)
	settle(t, h, ms...)
	if ms[0].Rank().Leader != "m0" {
		t.Fatalf("leader is %s", ms[0].Rank().Leader)
	}
	before := *ms[1].ownersNow()
	theirs := ownedBy(&before, "m0")
	mark := time.Now()
	cs[0].Close()
	eventually(t, 15*time.Second, "new leader", func() bool { return ms[1].Rank().Leader != "m0" && ms[1].Rank().Leader != "" })
	settle(t, h, ms[1:]...)
	after := *ms[1].ownersNow()
	if m := ownersMoved(before, after); m != len(theirs) {
		t.Fatalf("%d slots moved, want exactly the leader's %d", m, len(theirs))
	}
	acq, rel := slotsSince(h, mark)
	for member, slots := range acq {
		for s := range slots {
			if !theirs[s] {
				t.Errorf("%s acquired slot %d, which was not the crashed leader's", member, s)
			}
		}
	}
	for member, slots := range rel {
		if member != "m0" {
			t.Errorf("%s released %d slots", member, len(slots))
		}
	}
	// A leader change alone (no membership change) proclaims nothing new.
	if v := after.Version; v != before.Version+1 {
		t.Errorf("map went from version %d to %d, want one step", before.Version, v)
	}
	h.check(t)
}

// TestPartition cuts one member off etcd with a proxy: it must stop holding
// its roles before anyone else takes them, and rejoin after the heal.
func TestPartition(t *testing.T) {
	h := &history{}
	p := newProxy(t)
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	cp := proxyClient(t, p)
	b := join(t, cp, name, WithMemberName("b"), h.hook())
	eventually(t, 10*time.Second, "both ranked", func() bool { return a.Rank().Size == 2 && b.Rank().Index >= 0 })
	settle(t, h, a, b)
	role := roleOf(t, b)
	ctxB, err := b.AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	tokB, _ := Token(ctxB)

	// Pause both directions: bytes wait in the proxy as they would in a
	// network that drops packets (TCP retransmits them after the heal).
	cut := time.Now()
	p.PauseTx()
	p.PauseRx()
	select {
	case <-ctxB.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("partitioned member still holds its role")
	}
	fenced := time.Since(cut)
	if !errors.Is(context.Cause(ctxB), ErrFenced) {
		t.Fatalf("cause = %v", context.Cause(ctxB))
	}
	ctxA, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	moved := time.Since(cut)
	if tokA, _ := Token(ctxA); tokA <= tokB {
		t.Fatalf("token went from %d to %d", tokB, tokA)
	}
	t.Logf("partition: b fenced after %v, a held b's role after %v", fenced, moved)

	p.UnpauseTx()
	p.UnpauseRx()
	eventually(t, 30*time.Second, "b rejoined and ranked", func() bool { return b.Rank().Index >= 0 && a.Rank().Size == 2 })
	settle(t, h, a, b)
	h.check(t)
	var sawFence, sawRejoin bool
	for _, e := range h.snapshot() {
		if e.Member == "b" {
			sawFence = sawFence || e.Kind == EventFenced && errors.Is(e.Cause, ErrFenced)
			sawRejoin = sawRejoin || e.Kind == EventRejoined
		}
	}
	if !sawFence || !sawRejoin {
		t.Errorf("b's events: fenced %v, rejoined %v", sawFence, sawRejoin)
	}
}

// TestMemberNameReuse: a live member's name is refused; once its lease has
// ended (a restarted StatefulSet pod), the name can be used again without
// any manual cleanup.
func TestMemberNameReuse(t *testing.T) {
	name := rinkName(t)
	c1 := newClient(t)
	first := join(t, c1, name, WithMemberName("pod-0"))
	eventually(t, 10*time.Second, "ranked", func() bool { return first.Rank().Index == 0 })
	_, err := New(newClient(t), name, WithMemberName("pod-0"), WithSessionTTL(2*time.Second), WithJoinTimeout(300*time.Millisecond))
	if !errors.Is(err, ErrMemberExists) {
		t.Fatalf("err = %v, want ErrMemberExists", err)
	}
	c1.Close() // crash: the lease is left to expire
	start := time.Now()
	again := join(t, newClient(t), name, WithMemberName("pod-0"), WithJoinTimeout(10*time.Second))
	t.Logf("restarted member rejoined after %v", time.Since(start))
	eventually(t, 10*time.Second, "ranked again", func() bool { return again.Rank().Index == 0 })
	if _, err := again.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader"); err != nil {
		t.Fatal(err)
	}
}

// TestIncompatibleMap: New refuses a rink made with other settings, and a
// running member that meets a map it cannot use stops holding roles until
// a usable map appears.
func TestIncompatibleMap(t *testing.T) {
	t.Parallel()
	h := &history{}
	cli := newClient(t)
	name := rinkName(t)
	a := join(t, cli, name, WithMemberName("a"), h.hook())
	ctx, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(newClient(t), name, WithSlots(64)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("New with other slots: %v", err)
	}
	k := newKeys(name)
	goodWhole, _, err := readWhole(cli, name, DefaultSlots)
	if err != nil {
		t.Fatal(err)
	}
	// A map of another slot count. (A map in an unknown protocol is waited
	// out instead: see TestUnknownProtocolWaitedOut.)
	if _, err := cli.Put(context.Background(), k.Map(), `{"schema":2,"version":1,"slots":64}`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("role still held under an unusable map")
	}
	if !errors.Is(context.Cause(ctx), ErrIncompatible) {
		t.Fatalf("cause = %v", context.Cause(ctx))
	}
	eventually(t, 5*time.Second, "member out of the rink", func() bool { return a.Rank().Index == -1 })
	if _, err := New(newClient(t), name); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("New under an unusable map: %v", err)
	}
	// An operator restores a usable map: the member rejoins and leads again.
	m := goodWhole
	m.Version += 10
	if _, err := cli.Put(context.Background(), k.Map(), string(m.Encode())); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AwaitRoleContext(ctxTimeout(t, 15*time.Second), "leader"); err != nil {
		t.Fatal(err)
	}
	h.check(t)
}

func TestRankChanged(t *testing.T) {
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"))
	rk := a.Rank()
	for rk.Index != 0 {
		select {
		case <-rk.Changed():
			rk = a.Rank()
		case <-time.After(10 * time.Second):
			t.Fatal("no rank change")
		}
	}
	b := join(t, newClient(t), name, WithMemberName("b"))
	select {
	case <-rk.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no rank change after a join")
	}
	eventually(t, 10*time.Second, "size 2", func() bool { return a.Rank().Size == 2 })
	if owner, ok := a.Owner("leader"); !ok || (owner != "a" && owner != "b") {
		t.Fatalf("owner = %q", owner)
	}
	b.Shutdown(context.Background())
	eventually(t, 10*time.Second, "size 1", func() bool { return a.Rank().Size == 1 && a.Rank().Index == 0 })
}

// TestShutdownHonoursContext: with etcd unreachable, Shutdown returns its
// context's error when it expires, roles are cancelled at once, and every
// goroutine of the rink still ends (Done closes) while etcd is unreachable.
func TestShutdownHonoursContext(t *testing.T) {
	p := newProxy(t)
	cp, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{strings.TrimPrefix(p.From(), "tcp://")},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Close() })
	name := rinkName(t)
	leader := join(t, newClient(t), name, WithMemberName("leader"))
	eventually(t, 10*time.Second, "leader ranked", func() bool { return leader.Rank().Index == 0 })
	// r is not the leader: its campaign is waiting, which is where a
	// cancelled Campaign resigns.
	r := join(t, cp, name, WithMemberName("a"))
	role, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), roleOf(t, r))
	if err != nil {
		t.Fatal(err)
	}
	p.PauseTx()
	p.PauseRx()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := r.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the context's deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %v with a 300ms context", d)
	}
	if !errors.Is(context.Cause(role), ErrShutdown) {
		t.Fatalf("role context: %v", context.Cause(role))
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the rink's goroutines did not end while etcd was unreachable")
	}
	p.UnpauseTx()
	p.UnpauseRx()
}

// TestMapKeyDeleted: an operator deletes the map key under a running rink.
// The leader starts a new lineage; no role ever has two holders.
func TestMapKeyDeleted(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, ms, _ := cluster(t, h, 3)
	settle(t, h, ms...)
	cli := newClient(t)
	if _, err := cli.Delete(context.Background(), newKeys(name).Map()); err != nil {
		t.Fatal(err)
	}
	// The leader writes the map again by itself, in a new lineage.
	eventually(t, 10*time.Second, "map key re-created", func() bool {
		resp, err := cli.Get(context.Background(), newKeys(name).Map())
		return err == nil && len(resp.Kvs) == 1
	})
	settle(t, h, ms...)
	// And the rink goes on: a membership change in the new lineage.
	n := join(t, newClient(t), name, WithMemberName("m3"), h.hook())
	all := append(slices.Clone(ms), n)
	eventually(t, 10*time.Second, "m3 ranked in the new lineage", func() bool { return n.Rank().Index >= 0 })
	settle(t, h, all...)
	m, _, err := readWhole(cli, name, DefaultSlots)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if v := r.Rank().Version; v != m.Version {
			t.Errorf("%s applied version %d, the new lineage is at %d", r.Member(), v, m.Version)
		}
	}
	h.check(t)
}

// A deleted floor key is written again by the leader, even though the floor
// it computes has not changed: members waiting to start slots need it.
func TestFloorRewrittenAfterDeletion(t *testing.T) {
	cli := newClient(t)
	name := rinkName(t)
	a := join(t, cli, name, WithMemberName("a"), WithSlots(8))
	eventually(t, 10*time.Second, "a leads", func() bool { return a.Rank().Leader == "a" })
	b := join(t, cli, name, WithMemberName("b"), WithSlots(8))
	eventually(t, 10*time.Second, "b ranked", func() bool { return b.Rank().Index >= 0 })
	key := newKeys(name).Floor()
	floor := func() (wire.AckFloor, bool) {
		resp, err := cli.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) == 0 {
			return wire.AckFloor{}, false
		}
		var f wire.AckFloor
		return f, json.Unmarshal(resp.Kvs[0].Value, &f) == nil
	}
	eventually(t, 10*time.Second, "a floor with both members at the map's version", func() bool {
		f, ok := floor()
		return ok && f.Complete && len(f.Lagging) == 0 && f.Version == b.Rank().Version
	})
	if _, err := cli.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the floor written again", func() bool {
		_, ok := floor()
		return ok
	})
}
