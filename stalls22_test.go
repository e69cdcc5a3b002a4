package rink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Issue 22, histories 3 to 6: one member whose acknowledgement is unknown
// must block only what it could hold, not every acquisition in the rink.

// holdsMapped reports whether r holds every slot its map gives it.
func holdsMapped(r *Rink) bool {
	m := r.ownersNow()
	if m == nil {
		return false
	}
	for s := 0; s < m.Slots; s++ {
		if m.Owner(s) == r.Member() && r.slots.load(s) == nil {
			return false
		}
	}
	return true
}

// threeSettled starts a settled rink of a (which leads), b and c; b's
// client is given, the others connect directly.
func threeSettled(t *testing.T, h *history, cliB *clientv3.Client, opts ...Option) (name string, a, b, c *Rink) {
	t.Helper()
	name = rinkName(t)
	opts = append(opts, h.hook())
	a = join(t, newClient(t), name, append([]Option{WithMemberName("a")}, opts...)...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b = join(t, cliB, name, append([]Option{WithMemberName("b")}, opts...)...)
	c = join(t, newClient(t), name, append([]Option{WithMemberName("c")}, opts...)...)
	eventually(t, 10*time.Second, "all ranked", func() bool { return a.Rank().Size == 3 && c.Rank().Index >= 0 })
	settle(t, h, a, b, c)
	return name, a, b, c
}

// History 3: a member key without a lease (etcdctl put <rink>/members/zz
// '{}') is a stray: nobody ranks it, and the leader deletes it. Before,
// it was a live member forever, was given slots nobody held, and its
// unknown acknowledgement blocked every later handover.
func TestLeaselessMemberKeyIsStray(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, a, b, c := threeSettled(t, h, newClient(t))
	op := newClient(t)
	zz := newKeys(name).Member("zz")
	if _, err := op.Put(context.Background(), zz, "{}"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the leaseless member key deleted", func() bool {
		resp, err := op.Get(context.Background(), zz)
		return err == nil && len(resp.Kvs) == 0
	})
	if m := a.ownersNow(); m.Index("zz") >= 0 {
		t.Errorf("the leaseless key is ranked: %v", m.Members)
	}
	role := roleOf(t, c)
	if err := c.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, role+" held again", func() bool { return len(holding(role, a, b)) == 1 })
	h.check(t)
}

// History 4: a member that speaks none of the leader's protocols (a
// leased member key {"protocols":[9]}, as a release that dropped protocol
// 2 would write) refuses every map, so it holds nothing of them: it is not
// ranked, and it blocks no handover.
func TestStrangerBlocksNothing(t *testing.T) {
	h := &history{}
	name, a, b, c := threeSettled(t, h, newClient(t))
	op := newClient(t)
	lease, err := op.Grant(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = op.Revoke(context.Background(), lease.ID) })
	if _, err := op.Put(context.Background(), newKeys(name).Member("future"), `{"protocols":[9]}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	// c leaves after the stranger's key is in (a later revision): every
	// member sees the stranger first.
	role := roleOf(t, c)
	if err := c.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, role+" held again", func() bool { return len(holding(role, a, b)) == 1 })
	settle(t, h, a, b)
	if m := a.ownersNow(); m.Index("future") >= 0 {
		t.Errorf("the stranger is ranked: %v", m.Members)
	}
	h.check(t)
}

// History 5: ack keys deleted (etcdctl del --prefix <rink>/acks/) or
// overwritten are written again by their members, so the barrier does not wait for
// acknowledgements that nothing would rewrite until the next map.
func TestAckKeysHeal(t *testing.T) {
	h := &history{}
	name, a, b, c := threeSettled(t, h, newClient(t))
	op := newClient(t)
	k := newKeys(name)
	if _, err := op.Delete(context.Background(), k.Acks(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "every ack key written again", func() bool {
		resp, err := op.Get(context.Background(), k.Acks(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 3
	})
	// Overwritten (etcdctl put <rink>/acks/b '{}'), too.
	if _, err := op.Put(context.Background(), k.Ack("b"), "{}"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b's ack key written again", func() bool {
		resp, err := op.Get(context.Background(), k.Ack("b"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0 && strings.Contains(string(resp.Kvs[0].Value), `"seq"`)
	})
	role := roleOf(t, c)
	if err := c.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, role+" held again", func() bool { return len(holding(role, a, b)) == 1 })
	settle(t, h, a, b)
	h.check(t)
}

// History 6: member b fences and resumes; its ack key went with its old
// lease, and it acknowledges nothing for one TTL (see hush). That must
// hold up only slots b could hold: c's graceful departure hands the slots
// that go to a over at once, not a TTL later.
func TestFenceBlocksOnlyItsSlots(t *testing.T) {
	t.Parallel()
	const ttl = 4 * time.Second // b fences at 7/8 of it: 0.5 s to come back
	h := &history{}
	p := newProxy(t)
	_, a, b, c := threeSettled(t, h, proxiedClient(t, p), WithSessionTTL(ttl))
	role := roleOf(t, b)
	ctxB, err := b.AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	// A role awaited for the first time is reported at once, and the
	// leader proclaims a map balanced by load: let it come first.
	eventually(t, 10*time.Second, "the map balanced by load", func() bool { return a.ownersNow().ByLoad })
	settle(t, h, a, b, c)
	assigned := a.ownersNow()
	mark := cutUntilFenced(t, p, ctxB, ttl)
	eventually(t, 5*time.Second, "b resumed", func() bool { return rejoinedSince(h, "b", mark) })
	if now := a.ownersNow(); !now.SameAssignment(*assigned) {
		t.Fatalf("b did not resume: the assignment changed, version %d to %d", assigned.Version, now.Version)
	}
	if err := c.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// b starts nothing for one TTL after its resume (see hush); a, whose
	// slots b never held, must not wait for it.
	eventually(t, 10*time.Second, "c's departure proclaimed", func() bool { return a.Rank().Size == 2 })
	eventually(t, ttl/4, "a holds what the map gives it", func() bool { return holdsMapped(a) })
	settle(t, h, a, b)
	h.check(t)
}

// A member whose key an operator binds to another lease (etcdctl put
// --lease) can write nothing any more: its acknowledgements are guarded
// by its own lease. It fences, and joins again once that key is gone.
func TestOwnKeyReboundFences(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, a, b, c := threeSettled(t, h, newClient(t))
	role := roleOf(t, b)
	ctxB, err := b.AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	op := newClient(t)
	lease, err := op.Grant(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = op.Revoke(context.Background(), lease.ID) })
	mark := time.Now()
	if _, err := op.Put(context.Background(), newKeys(name).Member("b"), wire.MemberValue(1), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctxB.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("b still holds its role with its key bound to another lease")
	}
	if _, err := op.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "b rejoined and ranked", func() bool { return rejoinedSince(h, "b", mark) && b.Rank().Index >= 0 })
	// (b may rejoin anew rather than resume, and the role move to c.)
	eventually(t, 10*time.Second, role+" held", func() bool { return len(holding(role, a, b, c)) == 1 })
	h.check(t)
}
