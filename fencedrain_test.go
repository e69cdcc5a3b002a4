package rink

import (
	"slices"
	"testing"
	"time"
)

// TestFencedLeaseWaitsForFenceDrains: with WithDrainTimeout, a member
// fenced while a function still runs on a holding the fence ended (a
// Revoked handler flushing; rinkd waiting for its app's release) does not
// revoke its old lease before that function returns, or before the ended
// incarnation's fence deadline: revoking it early would let an heir start
// beside the function (another process of the member's name, which waits
// for the old lease to be gone). Past the deadline it revokes at once.
func TestFencedLeaseWaitsForFenceDrains(t *testing.T) {
	for _, tc := range []struct {
		name string
		left time.Duration // of the fence deadline at the fence
		held bool          // the revocation waits for the function
	}{
		{"before the deadline", time.Hour, true},
		{"past the deadline", -time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			first := b.r.st.inc.Lease
			b.r.st.inc.setDeadline(time.Now().Add(tc.left))
			b.lose()
			b.r.onMail(mail{keyGone: b.r.st.fenced}) // a resume found the key bound to another lease
			if got := len(fx.revoked) == 0; got != tc.held {
				t.Fatalf("revoked %v while the handler still ran; want held %v", fx.revoked, tc.held)
			}
			cur.runners.Add(-1) // the handler returns
			b.r.onMail(mail{drained: true})
			if want := []int64{first}; !slices.Equal(fx.revoked, want) {
				t.Fatalf("revoked %v once the handler returned, want %v", fx.revoked, want)
			}
		})
	}
}
