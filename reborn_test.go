package rink

import "testing"

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
