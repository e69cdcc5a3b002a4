package rink

import (
	"testing"
	"time"
)

// TestFencedThenMovedWaitsForFenceDrains: a fence on the run goroutine
// (own key deleted, the map naming another process of our name, a stop
// past the deadline) cancels the holdings' contexts at once, but onLost
// runs at a later step. A map handled in between that moves the slot
// away released it with the fence's cause, which started no drain of
// either kind: onLost found nothing to hold the fenced lease for, and the
// rejoin revoked it while a function (rinkd waiting for its app's grant)
// still ran on the holding.
func TestFencedThenMovedWaitsForFenceDrains(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 1, 5)
	b.r.opts.drain = 10 * time.Second
	fx := &rejoinFx{netEffects: netEffects{b.r}}
	b.r.simFx, b.r.load = fx, newLoadAcc(1)
	b.r.st.joins = 1
	b.put(memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"b"}, 0), L, L))
	b.wantHeld(0, true, "b's in lineage 10")
	cur := b.r.slots.load(0)
	if !cur.enter() { // a handler runs on the holding
		t.Fatal("the holding has ended")
	}
	old := b.r.st.inc
	first := old.Lease
	old.setDeadline(time.Now().Add(time.Hour))
	b.r.fence(old, ErrFenced) // on the run goroutine: onLost comes at a later step
	b.put(memberKV("a", 12, 12, 0, 0), mapKV(twoSlots(2, []string{"b", "a"}, 1), L, 13))
	b.wantHeld(0, false, "moved to a")
	close(old.lost)
	b.r.onLost()
	b.r.onMail(mail{keyGone: b.r.st.fenced}) // a resume found the key bound to another lease
	if len(fx.revoked) != 0 {
		t.Fatalf("revoked %v while the handler still ran on the holding the fence ended", fx.revoked)
	}
	cur.runners.Add(-1) // the handler returns
	b.r.onMail(mail{drained: true})
	if len(fx.revoked) != 1 || fx.revoked[0] != first {
		t.Fatalf("revoked %v once the handler returned, want [%d]", fx.revoked, first)
	}
}
