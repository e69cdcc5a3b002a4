package rink

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// as records a member's events under another name, so that two
// incarnations of one member name are told apart by the history checker.
func (h *history) as(name string) Option {
	return WithEvents(func(e Event) {
		e.Member = name
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	})
}

// cutOffHolder starts a rink of a (which leads) and a member named x
// behind a proxy, lets it settle, has x hold one of its roles, and cuts x
// off etcd until the test ends. opts go to both members, xOpts to x only.
func cutOffHolder(t *testing.T, h *history, opts, xOpts []Option) (name string, a, x *Rink, role string, ctxX context.Context) {
	t.Helper()
	p := newProxy(t)
	name = rinkName(t)
	a = join(t, newClient(t), name, append([]Option{WithMemberName("a"), h.hook()}, opts...)...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	x = join(t, proxyClient(t, p), name, append(append([]Option{WithMemberName("x")}, opts...), xOpts...)...)
	// (Not settle: x's events may be recorded under another name.)
	eventually(t, 10*time.Second, "a and x ranked, on one map", func() bool {
		m := a.ownersNow()
		return m != nil && len(m.Members) == 2 && len(m.Waiting) == 0 && len(m.Incoming) == 0 && x.Rank().Version == m.Version
	})
	role = roleOf(t, x)
	ctxX, err := x.AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	p.PauseTx()
	p.PauseRx()
	t.Cleanup(func() { p.UnpauseTx(); p.UnpauseRx() })
	return name, a, x, role, ctxX
}

// Issue 22, history 2: a restart under the same name. Member x holds a role
// and is cut off etcd (a StatefulSet pod whose node is lost); an operator
// deletes its key to let the replacement, also named x, in. The
// replacement's first view shows a map that still ranks "x": it must not
// start the old incarnation's slots while that incarnation may still hold
// them (until its lease is gone), though they are ranked to its name.
func TestSameNameReplacementWaitsForOldLease(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, _, _, role, ctxOld := cutOffHolder(t, h, nil, []Option{h.as("x-old")})
	if _, err := newClient(t).Delete(context.Background(), newKeys(name).Member("x")); err != nil {
		t.Fatal(err)
	}
	repl := join(t, newClient(t), name, WithMemberName("x"), h.as("x-new"))
	ctxNew, err := repl.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	if ctxOld.Err() == nil {
		t.Errorf("the replacement holds %s while the old x, cut off, still holds it", role)
	}
	_ = ctxNew
	h.check(t)
}

// Issue 22, history 1: a newcomer that never saw the deletion. Member x
// holds a role and is cut off etcd; newcomer w joins over a slow link
// (150 ms each way), and right after w's key appears an operator deletes
// x's key. w's first listing comes after the deletion: it has no x in it,
// and no deletion to see. The leader must not give x's slots to w (or to
// anybody) while x's lease lives: x holds them until it fences.
func TestNewcomerNeverSawKeyDeleted(t *testing.T) {
	h := &history{}
	ttl := WithSessionTTL(4 * time.Second) // x holds on for 3.5 s after its last renewal
	name, a, _, role, ctxX := cutOffHolder(t, h, []Option{ttl}, []Option{h.hook()})
	pw := newProxy(t)
	pw.DelayTx(150*time.Millisecond, 0)
	pw.DelayRx(150*time.Millisecond, 0)

	// The operator deletes x's key as soon as w's appears.
	op := newClient(t)
	deleted := make(chan error, 1)
	go func() {
		ctx := ctxTimeout(t, 10*time.Second)
		for ctx.Err() == nil {
			if resp, err := op.Get(ctx, newKeys(name).Member("w")); err == nil && len(resp.Kvs) > 0 {
				_, err = op.Delete(ctx, newKeys(name).Member("x"))
				deleted <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		deleted <- ctx.Err()
	}()
	w := join(t, proxyClient(t, pw), name, WithMemberName("w"), ttl, h.hook())
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, role+" held again, by a or w", func() bool { return len(holding(role, a, w)) == 1 })
	if ctxX.Err() == nil {
		t.Errorf("%s is held again while x, cut off, still holds it", role)
	}
	h.check(t)
}

// ghostFx records the leases a member asks etcd about (see addGhost); the
// bare harness's effects do the rest.
type ghostFx struct {
	netEffects
	asked []int64
}

func (fx *ghostFx) awaitLeaseGone(_ string, lease int64) { fx.asked = append(fx.asked, lease) }

// x holds slot 0 and is cut off etcd; the leader is cut off too. An
// operator deletes x's key, then puts back an older map that ranks
// neither x nor anyone alive. Member b, elected next, lists the rink: no x
// key, no deletion to see, and a map that does not rank x, but x's
// election key, bound to its live lease. b took x's slot at once, while x
// still held it. Found by the simulator (seed 103596 at 5 members). A
// listing makes a ghost of a lease that campaigns under a name with no
// key of that lease if any map the member still remembers gave the name a
// slot, not only the map applied now.
func TestListingFindsAGhostAnOlderMapForgot(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	fx := &ghostFx{netEffects: netEffects{b.r}}
	b.r.simFx = fx
	b.put(memberKV("x", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"x", "b"}, 0, 1), L, L), memberKV("x", 3, 11, 1, L))
	b.wantHeld(1, true, "b's, x acknowledged")
	k := newKeys("bare")
	elect := &mvccpb.KeyValue{Key: []byte(k.ElectionKey(3)), Value: []byte("x"), CreateRevision: 4, ModRevision: 4, Lease: 3}
	// The listing after the deletion and the older map (seq 2, lineage L).
	b.sim.Del(k, k.Member("x"))
	b.snapshot(20, memberKV("b", 5, 5, 0, 0), elect, mapKV(twoSlots(2, []string{"b"}, 0, 0), L, 19))
	b.wantHeld(0, false, "x, whose lease lives, held slot 0 in the map before")
	if len(fx.asked) != 1 || fx.asked[0] != 3 {
		t.Fatalf("leases asked after: %v, want [3] (x's)", fx.asked)
	}
}

// An operator deletes x's key, and etcd is restored from a snapshot taken
// before, which brings the key back, bound to x's lease as it was, before x
// saw it go: x goes on as a member. The leader had made a ghost of x's
// lease, and waited for that lease to end while x renewed it: nothing
// started again in the rink (found by the simulator: seed 10013147 at 8
// members). A key bound to a ghost's lease again ends the ghost: the
// member is in view again, and the barrier waits for it as for any.
func TestGhostWhoseKeyComesBackIsAMemberAgain(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	fx := &ghostFx{netEffects: netEffects{b.r}}
	b.r.simFx = fx
	b.put(memberKV("x", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"x", "b"}, 0, 1), L, L), memberKV("x", 3, 11, 1, L))
	b.wantHeld(1, true, "b's, x acknowledged")
	b.del(newKeys("bare").Member("x"), 12)
	if len(b.r.st.ghosts) != 1 {
		t.Fatalf("ghosts %v after x's key was deleted, want x's lease", b.r.st.ghosts)
	}
	b.put(memberKV("x", 3, 13, 1, L))
	if len(b.r.st.ghosts) != 0 {
		t.Fatalf("ghosts %v after x's key came back bound to its lease, want none", b.r.st.ghosts)
	}
}

// An operator puts back an older map that does not rank x, and then
// deletes x's key while x, cut off, holds slot 0 from the map before:
// the applied map does not rank x, so the deletion made no ghost, and the
// leader gave slot 0 away at once (found by the simulator: seed 40014292
// at 3 members). A deletion makes a ghost when any map the member still
// remembers gave the name a slot, and no map said it departed.
func TestDeletionAfterAnOlderMapMakesAGhost(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	fx := &ghostFx{netEffects: netEffects{b.r}}
	b.r.simFx = fx
	b.put(memberKV("x", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"x", "b"}, 0, 1), L, L), memberKV("x", 3, 11, 1, L))
	b.wantHeld(1, true, "b's, x acknowledged")
	b.put(mapKVSeq(twoSlots(1, []string{"b"}, 0, 0), L, 12, 2))
	b.del(newKeys("bare").Member("x"), 13)
	if len(fx.asked) != 1 || fx.asked[0] != 3 {
		t.Fatalf("leases asked after: %v, want [3] (x's): x held slot 0 in the map before", fx.asked)
	}
	b.wantHeld(0, false, "x may still hold slot 0")
}

// A map put back by hand that does not rank a ghost (x, whose key an
// operator deleted while it is cut off) makes the leader's next map drop
// x: its transition said x was gone (it holds nothing), and members took
// x's slots at once, counting it out of every check, while x held them
// (found by the simulator: seed 63019206 at 5 members). A ghost is never
// said gone.
func TestGoneFromLeavesGhostsOut(t *testing.T) {
	base := twoSlots(7, []string{"a", "x"}, 0, 1)
	next := twoSlots(8, []string{"a"}, 0, 0)
	members := map[string]memberInfo{"a": {createRev: 3}}
	if got := goneFrom(&base, &next, members, map[int64]string{9: "x"}); len(got) != 0 {
		t.Fatalf("gone %v: x is a ghost", got)
	}
	if got := goneFrom(&base, &next, members, nil); len(got) != 1 || got[0] != "x" {
		t.Fatalf("gone %v, want [x]: it has no key and is no ghost", got)
	}
}

// x holds slots 13 and 14 from map v20 and is cut off; an operator
// deletes x's key, and puts back an older map that never ranked x (the
// leader, which knew x as a ghost, plans without it from then on, and
// every member forgets the maps that gave x its slots). The leader leaves;
// member b, elected next, lists the rink: no x key, a map that does not
// rank x, no map remembered that gave x a slot, but x's election key,
// bound to its live lease. b's floor said no ghost, and a member took x's
// slot while x still held it (found by the simulator: seed 80033835 at 8
// members). A listing makes a ghost of every lease that campaigns under a
// name with no key of that lease, ranked or not: a graceful leaver's
// election key, which outlives its key until its lease is revoked, costs a
// question to etcd.
func TestListingFindsAGhostNoMapRemembers(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	fx := &ghostFx{netEffects: netEffects{b.r}}
	b.r.simFx = fx
	k := newKeys("bare")
	elect := &mvccpb.KeyValue{Key: []byte(k.ElectionKey(3)), Value: []byte("x"), CreateRevision: 4, ModRevision: 4, Lease: 3}
	b.snapshot(20, memberKV("b", 5, 5, 0, 0), elect, mapKV(twoSlots(2, []string{"b"}, 0, 0), L, 19))
	if len(fx.asked) != 1 || fx.asked[0] != 3 {
		t.Fatalf("leases asked after: %v, want [3] (x's)", fx.asked)
	}
	b.wantHeld(0, false, "x, whose lease lives, may hold slot 0")
}

// electionGets counts the reads of a rink's whole election prefix that go
// through a client's KV (checkOwnName's listing).
type electionGets struct {
	clientv3.KV
	prefix string
	n      atomic.Int64
}

func (e *electionGets) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if key == e.prefix {
		e.n.Add(1)
	}
	return e.KV.Get(ctx, key, opts...)
}

// A newcomer whose first map ranks it (the leader planned it after seeing
// the newcomer's key, and knew no ghost of its name) has no earlier
// incarnation to wait for, and must not list the election keys for one:
// at 10,000 members each such listing is 10,000 keys, and setup listed
// them thousands of times, so slowly that etcd let leases expire (issue
// 25). The newcomer's link is slow, so that the leader ranks it before its
// first listing.
func TestNewcomerRankedAtOnceListsNoElectionKeys(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	p := newProxy(t)
	p.DelayTx(150*time.Millisecond, 0)
	p.DelayRx(150*time.Millisecond, 0)
	cli := proxyClient(t, p)
	gets := &electionGets{KV: cli.KV, prefix: newKeys(name).Election()}
	cli.KV = gets
	x := join(t, cli, name, WithMemberName("x"), h.hook())
	eventually(t, 15*time.Second, "x ranked and settled", func() bool {
		rk := x.Rank()
		return rk.Index >= 0 && rk.Settled
	})
	if n := gets.n.Load(); n != 0 {
		t.Errorf("x, new to the rink, listed the election keys %d times", n)
	}
	h.check(t)
}

// ownNameFx records the checks for an earlier incarnation of the member's
// name that the core asks for (see checkOwnName).
type ownNameFx struct {
	netEffects
	checks int
}

func (fx *ownNameFx) checkOwnName(int64) { fx.checks++ }

// A newcomer skips the check for an earlier incarnation of its name only
// on a map a leader planned from a view that held its key: a departing
// member's map (its transition says a view, but no ghosts: the departing
// member's view may know none) gets the check. Found in review: x cut off
// with its key deleted, a replacement x joins, another member leaves, and
// the replacement's first map is the departure's.
func TestOwnNameCheckedUnlessALeaderPlannedTheMap(t *testing.T) {
	for _, c := range []struct {
		name  string
		tr    wire.Transition
		check bool
	}{
		{"departure's map", wire.Transition{View: 9, Gone: []string{"y"}}, true},
		{"leader's map", wire.Transition{View: 9, ByLeader: true}, false},
		{"leader's map naming the name replaced", wire.Transition{View: 9, ByLeader: true, Incs: map[string]int64{"x": 5}}, true},
		{"leader's map from before the key", wire.Transition{View: 4, ByLeader: true}, true},
		{"a build that says no view", wire.Transition{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBare(t, "x", 2, 5)
			fx := &ownNameFx{netEffects: netEffects{b.r}}
			b.r.simFx = fx
			b.narrowView()
			b.r.st.joins = 1
			b.put(memberKV("x", 5, 5, 0, 0))
			m := twoSlots(3, []string{"x", "z"}, 0, 1)
			kv := mapKV(m, 2, 10)
			kv.Value = wire.WithTransition(m.Encode(), c.tr)
			b.r.onWatch(watchBatch{snapshot: true, kvs: []*mvccpb.KeyValue{kv}, rev: 10})
			if b.r.st.cur.Version != 3 {
				t.Fatalf("map not applied (version %d)", b.r.st.cur.Version)
			}
			if got := fx.checks == 1; got != c.check {
				t.Fatalf("checks for an earlier incarnation: %d, want one: %v", fx.checks, c.check)
			}
		})
	}
}
