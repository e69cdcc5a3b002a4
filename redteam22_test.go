package rink

import (
	"context"
	"testing"
	"time"
)

// Red team, issue 22 fixes (commits 885ce89..HEAD).

// A leaseless put over a live member's key (docs/operations.md: "counts as
// deleting that key (the member ... fences, and joins again once the stray
// is swept)"). The sweeper is the member with the lowest election key; it
// marks the stray tried (strayKey.tried) and its deletion goroutine gives
// up when the sweeper's incarnation ends. If the sweeper fences while its
// deletion is in flight, and is still the lowest election key after it
// rejoins (here: the only candidate left, since x revoked its old lease on
// errKeyGone), sweepStrays skips the entry for good: nothing re-arms it but
// a re-listing or another put of that key. x waits in join ("member name
// in use") forever.
func TestRedteamStraySweepNotRetriedAfterFence(t *testing.T) {
	const ttl = 4 * time.Second
	h := &history{}
	p := newProxy(t)
	name := rinkName(t)
	a := join(t, proxiedClient(t, p), name, WithMemberName("a"), WithSessionTTL(ttl), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	x := join(t, newClient(t), name, WithMemberName("x"), WithSessionTTL(ttl), h.hook())
	eventually(t, 10*time.Second, "both ranked", func() bool { return a.Rank().Size == 2 && x.Rank().Index >= 0 })
	settle(t, h, a, x)

	// a's requests stop reaching etcd (its watch still delivers): its
	// deletion of the stray cannot land, and it fences.
	mark := time.Now()
	p.BlackholeTx()
	op := newClient(t)
	key := newKeys(name).Member("x")
	if _, err := op.Put(context.Background(), key, "{}"); err != nil { // no lease
		t.Fatal(err)
	}
	eventually(t, 2*ttl, "a fenced", func() bool { return fencedSince(h, "a", mark) })
	eventually(t, 2*ttl, "x fenced", func() bool { return fencedSince(h, "x", mark) })
	p.UnblackholeTx()
	eventually(t, 3*ttl, "a back", func() bool { return rejoinedSince(h, "a", mark) })

	// The stray should be swept, and x let back in.
	eventually(t, 3*ttl, "the leaseless member key swept", func() bool {
		resp, err := op.Get(context.Background(), key)
		return err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].Lease != 0)
	})
	eventually(t, 3*ttl, "x rejoined", func() bool { return rejoinedSince(h, "x", mark) })
	h.check(t)
}
