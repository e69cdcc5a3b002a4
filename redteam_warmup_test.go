package rink

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Red-team tests for warmup.go. Each fails on the code as committed.

// blockingWarm is a Handler whose Warm never reports ready: it returns
// only when its announcement is withdrawn.
func blockingWarm() Handler {
	return Handler{
		Assigned: func(context.Context, string) {},
		Warm:     func(ctx context.Context, _ string) { <-ctx.Done() },
	}
}

// redteamRolePerSlot returns one role per slot of S.
func redteamRolePerSlot(S int) []string {
	roles := make([]string, S)
	found := 0
	for i := 0; found < S; i++ {
		role := fmt.Sprint("role-", i)
		if s := wire.SlotOf(role, S); roles[s] == "" {
			roles[s] = role
			found++
		}
	}
	return roles
}

// A member crashes while another leaves with a warm-up. The leader's
// announcement map ("hold", planned by keep() with the leavers still
// ranked) spreads the crashed member's orphaned slots over every live
// ranked member, the leaving one included; a leaving member never starts a
// slot (tryAcquire returns while st.leaving), and the leader treats it as
// a live owner that keeps serving, so the crashed member's roles stay
// unheld for the whole warm-up (and start over with each new
// announcement), instead of moving "at once, cold" after the lease
// expires.
func TestRedteamCrashDuringWarmLeaveOrphansGoToLeaver(t *testing.T) {
	t.Parallel()
	const S = 12
	const warmup = 12 * time.Second
	h := &history{}
	opts := []Option{WithSlots(S), WithWarmup(warmup), WithImbalanceTolerance(0)}
	name, ms, cs := cluster(t, h, 3, opts...)
	cli := newClient(t)
	l, a, b := ms[0], ms[1], ms[2]
	settle(t, h, ms...)
	eventually(t, 10*time.Second, "l leads", func() bool { return a.Rank().Leader == "m0" && l.Rank().Leader == "m0" })
	// l's heirs never get ready, so the leader waits out the warm-up.
	set, err := l.Watch(blockingWarm(), redteamRolePerSlot(S)...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	var bSlots []int
	eventually(t, 10*time.Second, "b owns slots", func() bool {
		m := l.ownersNow()
		bSlots = slotsOf(m, b.Member())
		return len(m.Members) == 3 && len(bSlots) > 0
	})

	leaving := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*warmup)
		defer cancel()
		leaving <- a.Shutdown(ctx)
	}()
	eventually(t, 10*time.Second, "the leader announces a's slots", func() bool { return len(l.ownersNow().Incoming) > 0 })

	cs[2].Close() // b crashes: its lease expires in about 2 s
	crash := time.Now()
	eventually(t, 10*time.Second, "b's key gone", func() bool {
		resp, err := cli.Get(context.Background(), newKeys(name).Member(b.Member()))
		return err == nil && len(resp.Kvs) == 0
	})

	// Crash failover does not wait for a warm-up: b's slots must be held
	// by a live member soon after its lease expired.
	within := 5 * time.Second
	deadline := crash.Add(within)
	for {
		held := h.holders()
		cur := l.ownersNow()
		var unheld []string
		for _, s := range bSlots {
			hs := slices.DeleteFunc(slices.Clone(held[s]), func(n string) bool { return n == b.Member() })
			if len(hs) == 0 {
				unheld = append(unheld, fmt.Sprintf("%d (owner %s)", s, cur.Owner(s)))
			}
		}
		if len(unheld) == 0 {
			t.Logf("b's slots %v held after %v; map %d members %v table %v incoming %v leave %v", bSlots, time.Since(crash), cur.Version, cur.Members, cur.Table, cur.Incoming, cur.Leave)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after b crashed, its slots %v are still unheld (leaving member: %s; map incoming %v)",
				within, unheld, a.Member(), cur.Incoming)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-leaving:
		if err != nil {
			t.Errorf("a's Shutdown: %v", err)
		}
	case <-time.After(4 * warmup):
		t.Errorf("a's Shutdown did not return")
	}
	h.check(t)
}

// A "leaving" flag put into a live member's key by hand (or by any writer
// but the member's own Shutdown): the leader plans without the member,
// announces its slots, and once the warm-up time has passed lists it in
// the map's "leave" and keeps every live owner's slots, waiting for the
// member's departure — which never comes, since the member is not
// shutting down. The leader then held back every planned move of the
// rink for good: a newcomer was ranked but never got a slot. Now the
// member writes its key back, and a leader gives up on a member told to
// leave that has not left within a TTL: the member stays ranked and the
// newcomer gets its share.
func TestRedteamHandWrittenLeavingFlagStallsPlannedMoves(t *testing.T) {
	const S = 8
	const warmup = 1500 * time.Millisecond
	h := &history{}
	opts := []Option{WithSlots(S), WithWarmup(warmup), WithImbalanceTolerance(0)}
	name, ms, _ := cluster(t, h, 2, opts...)
	settle(t, h, ms...)
	cli := newClient(t)
	key := newKeys(name).Member(ms[1].Member())
	if _, err := cli.Put(context.Background(), key, `{"protocols":[2],"leaving":true}`, clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "m1 writes its key back without the flag", func() bool {
		resp, err := cli.Get(context.Background(), key)
		return err == nil && len(resp.Kvs) == 1 && !wire.LeavingOf(resp.Kvs[0].Value) && resp.Kvs[0].Lease != 0
	})
	// A scale-out: the newcomer should get its share once its warm-up is
	// done (it has no Warm handler: it is ready at once).
	c := join(t, newClient(t), name, append(opts, WithMemberName("c"), h.hook())...)
	deadline := time.Now().Add(3*warmup + 5*time.Second)
	for {
		m := ms[0].ownersNow()
		n := 0
		for s := 0; s < S; s++ {
			if m.Owner(s) == c.Member() {
				n++
			}
		}
		if n > 0 && m.Index(ms[1].Member()) >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the newcomer owns no slot %v after joining: map version %d, members %v, table %v, incoming %v, leave %v",
				3*warmup+5*time.Second, m.Version, m.Members, m.Table, m.Incoming, m.Leave)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.check(t)
}

// A scale-out in a rink balanced by load, with a warm-up: fillNewcomers
// gives the newcomer the donor's least loaded slots, so as the load
// estimates move the planned moves change, and every change of the moves
// starts a new announcement (holdForWarmup: a new warmState with at =
// now). The heir's Warm calls are cancelled and restarted each time, and
// the warm-up clock restarts with them: while the load keeps moving
// faster than the heir warms up, the leader never makes the move, though
// WithWarmup promises that planned moves wait "for at most d".
func TestRedteamWarmupNeverEndsWhileLoadMoves(t *testing.T) {
	const S = 4
	const warmup = 1500 * time.Millisecond
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(S), WithWarmup(warmup), WithLoadInterval(100 * time.Millisecond), WithLoadWindow(200 * time.Millisecond), h.hook()}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	roles := redteamRolePerSlot(S)
	eventually(t, 10*time.Second, "a holds every slot", func() bool {
		for _, role := range roles {
			if _, ok := a.Get(role); !ok {
				return false
			}
		}
		return true
	})
	// The load moves between slots {0, 1} and {2, 3} every 300 ms.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		start := time.Now()
		every(ctx, 5*time.Millisecond, func() {
			hot := 0
			if time.Since(start)/(300*time.Millisecond)%2 == 1 {
				hot = 2
			}
			a.AddLoad(roles[hot], 50)
			a.AddLoad(roles[hot+1], 50)
			a.AddLoad(roles[2-hot], 1)
			a.AddLoad(roles[3-hot], 1)
		})
	}()
	// The newcomer warms a role up in 700 ms.
	n := join(t, newClient(t), name, append(opts, WithMemberName("n"))...)
	set, err := n.Watch(Handler{
		Assigned: func(context.Context, string) {},
		Warm: func(ctx context.Context, _ string) {
			t := time.NewTimer(700 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		},
	}, roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	joined := time.Now()
	within := 3*warmup + 3*time.Second
	versions := map[int64]bool{}
	for {
		m := a.ownersNow()
		if len(m.Incoming) > 0 {
			versions[m.Version] = true
		}
		owns := 0
		for s := 0; s < S; s++ {
			if m.Owner(s) == "n" {
				owns++
			}
		}
		if owns > 0 {
			break
		}
		if time.Since(joined) > within {
			t.Fatalf("%v after the newcomer joined (warm-up %v) it owns no slot: %d announcements so far, the last %v",
				within, warmup, len(versions), m.Incoming)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.check(t)
}

// A Shutdown with a warm-up whose context ends while it waits for the
// leader (docs/kubernetes.md: "when it ends, Shutdown stops waiting (for
// heirs, then for drains) and leaves at once"). The run goroutine, while
// leaving, does not select on the end of Shutdown's context (stopping is
// nil'd and leftWarm is only looked at after some other event), so a
// member in a quiet rink goes on serving until the leader's warm-up timer
// or its own leaveBy (warm-up + TTL) fires: here 20 s instead of at once.
// And once it does look, shutdown() derives the departure's context from
// the ended one, so the departure transaction and the lease revocation
// are never sent: the heirs wait for the lease to expire.
func TestRedteamWarmLeaveIgnoresShutdownContext(t *testing.T) {
	const S = 8
	const warmup = 20 * time.Second
	h := &history{}
	opts := []Option{WithSlots(S), WithWarmup(warmup), WithImbalanceTolerance(0), WithSessionTTL(4 * time.Second)}
	_, ms, _ := cluster(t, h, 2, opts...)
	a, b := ms[0], ms[1]
	settle(t, h, ms...)
	set, err := a.Watch(blockingWarm(), redteamRolePerSlot(S)...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	// b must hold slots when it leaves, or there is nothing to warm up:
	// settle waits until the newcomer's announced slots are moved to it.
	if m := a.ownersNow(); len(m.Incoming) > 0 || !slices.Contains(m.Table, int32(m.Index(b.Member()))) {
		t.Fatalf("b owns no slot before its Shutdown: map %d members %v table %v incoming %v", m.Version, m.Members, m.Table, m.Incoming)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = b.Shutdown(ctx)
	ended := time.Now()
	if err == nil {
		t.Errorf("Shutdown returned nil before the heir was ready")
	}
	select {
	case <-b.Done():
	case <-time.After(3 * time.Second):
		t.Errorf("3s after Shutdown's context ended the member is still in the rink (Done not closed)")
	}
	eventually(t, 30*time.Second, "a holds every slot", func() bool {
		for _, role := range redteamRolePerSlot(S) {
			if _, ok := a.Get(role); !ok {
				return false
			}
		}
		return true
	})
	if took := time.Since(ended); took > 1500*time.Millisecond {
		t.Errorf("the heir started b's roles %v after b's Shutdown context ended (b went on serving, then left without a departure write: its lease had to expire)", took)
	}
	h.check(t)
}

// The same gap through depart: a member's departure transaction plans
// with every live member key, leaving members included, so a graceful
// Shutdown that does not wait for the leader (here a member without a
// warm-up, as during a rolling change of the option; also a member whose
// leaveBy fired, or one of an older release) hands some of its slots to a
// member that is leaving with a warm-up, which never starts them: those
// roles stay unheld until the leader has announced them again and the
// warm-up has passed.
func TestRedteamDepartGivesSlotsToLeavingMember(t *testing.T) {
	const S = 12
	const warmup = 12 * time.Second
	h := &history{}
	name := rinkName(t)
	base := []Option{WithSlots(S), WithImbalanceTolerance(0), h.hook()}
	l := join(t, newClient(t), name, append(base, WithMemberName("l"), WithWarmup(warmup))...)
	eventually(t, 10*time.Second, "l ranked", func() bool { return l.Rank().Index == 0 })
	a := join(t, newClient(t), name, append(base, WithMemberName("a"), WithWarmup(warmup))...)
	d := join(t, newClient(t), name, append(base, WithMemberName("d"))...)
	ms := []*Rink{l, a, d}
	eventually(t, 10*time.Second, "all ranked", func() bool {
		for _, m := range ms {
			if m.Rank().Index < 0 || m.Rank().Size != 3 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)
	set, err := l.Watch(blockingWarm(), redteamRolePerSlot(S)...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	m := l.ownersNow()
	dSlots := slotsOf(m, "d")
	leaving := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*warmup)
		defer cancel()
		leaving <- a.Shutdown(ctx)
	}()
	eventually(t, 10*time.Second, "the leader announces a's slots, d applies the announcement", func() bool {
		cur := l.ownersNow()
		return len(cur.Incoming) > 0 && d.Rank().Version == cur.Version && a.Rank().Version == cur.Version
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	within := 3 * time.Second
	for {
		held := h.holders()
		cur := l.ownersNow()
		var unheld []string
		for _, s := range dSlots {
			if hs := slices.DeleteFunc(slices.Clone(held[s]), func(n string) bool { return n == "d" }); len(hs) == 0 {
				unheld = append(unheld, fmt.Sprintf("%d (owner %s)", s, cur.Owner(s)))
			}
		}
		if len(unheld) == 0 {
			break
		}
		if time.Since(left) > within {
			t.Errorf("%v after d's graceful Shutdown its slots %v are unheld (map incoming %v)", within, unheld, cur.Incoming)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-leaving:
		if err != nil {
			t.Errorf("a's Shutdown: %v", err)
		}
	case <-time.After(4 * warmup):
		t.Errorf("a's Shutdown did not return")
	}
	h.check(t)
}
