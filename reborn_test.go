package rink

import (
	"testing"
	"time"
)

// A process restarted under a member's name, whose key is newer than the
// view the applied map was planned from, starts nothing in that map: the
// map gives the name's slots to the earlier incarnation, and a newer map
// may already give them to others, whose heirs count the name as gone.
// It starts them once a map planned with its key in view comes. Found by
// the simulator (a restart that joins between its predecessor's expiry and
// the leader's next map held a slot beside its heir: see the seeds in
// tools/internal/sim's TestRinkHistories).
func TestRestartedNameWaitsForAMapThatKnowsIt(t *testing.T) {
	withView := func(m rankMap, modRev, view int64) []byte {
		kv := mapKV(m, 3, modRev)
		return withTransition(kv.Value, transition{View: view})
	}
	b := newBare(t, "m3", 2, 28) // our key was created at revision 28
	old := mapKV(twoSlots(6, []string{"m0", "m3"}, 0, 1), 3, 27)
	old.Value = withView(twoSlots(6, []string{"m0", "m3"}, 0, 1), 27, 20)
	b.put(memberKV("m0", 5, 5, 6, 3), memberKV("m3", 28, 28, 6, 3), old)
	b.wantHeld(1, false, "the map was planned before our key existed")

	again := mapKV(twoSlots(7, []string{"m0", "m3"}, 0, 1), 3, 31)
	again.Value = withView(twoSlots(7, []string{"m0", "m3"}, 0, 1), 31, 29)
	b.put(memberKV("m0", 5, 32, 7, 3), memberKV("m3", 28, 33, 7, 3), again)
	b.wantHeld(1, true, "a map planned with our key in view")

	// A map that does not say its view (a leader of an earlier release)
	// is acted on as before.
	b2 := newBare(t, "m3", 2, 28)
	b2.put(memberKV("m0", 5, 5, 6, 3), memberKV("m3", 28, 28, 6, 3), mapKV(twoSlots(6, []string{"m0", "m3"}, 0, 1), 3, 27))
	b2.wantHeld(1, true, "a map without a view")
}

// The leader proclaims a map with the same assignment when a ranked name's
// key is newer than the view the current map was planned from, so that the
// restarted process does not wait for good.
func TestLeaderReplansForARestartedName(t *testing.T) {
	b := newBare(t, "m0", 2, 5)
	st := &b.r.st
	st.cur = twoSlots(6, []string{"m0", "m3"}, 0, 1)
	st.members["m0"] = memberInfo{createRev: 5}
	st.members["m3"] = memberInfo{createRev: 28}
	st.curView = 20
	if !b.r.rankedReborn() {
		t.Fatal("a ranked name re-created after the map's view is not seen")
	}
	st.curView = 29
	if b.r.rankedReborn() {
		t.Fatal("a map planned with every ranked key in view is replanned")
	}
	st.curView = 0
	if b.r.rankedReborn() {
		t.Fatal("a map that does not say its view is replanned")
	}
}

// A process that resumes past its lease's deadline (a stop, a stall) may
// handle what piled up before its keeper wakes: it starts nothing then, and
// fences. Found by the simulator (paused members started slots with a
// stale token beside their heirs: see TestRinkHistories' seeds).
func TestNothingStartsPastTheDeadline(t *testing.T) {
	b := newBare(t, "b", 2, 5)
	var fenced int
	b.r.opts.events = func(e Event) {
		if e.Kind == EventFenced {
			fenced++
		}
	}
	b.r.st.inc.setDeadline(time.Now().Add(-time.Millisecond)) // as if stopped past it
	b.put(memberKV("b", 5, 5, 0, 0), mapKV(twoSlots(1, []string{"b"}, 0, 0), 7, 7))
	b.wantHeld(0, false, "past the deadline")
	if fenced != 1 || b.r.st.inc.ctx.Err() == nil {
		t.Fatalf("%d fence events, incarnation ended: %v", fenced, b.r.st.inc.ctx.Err() != nil)
	}
}
