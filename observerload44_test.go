package rink

import (
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.uber.org/zap"
)

// An Observer gives each member the load and the roles of the slots the
// map gives it now: a slot its owner has not reported yet (it gained it
// since its last summary) counts with the figure of the member that
// reported it, its previous owner, as the leader estimates it (rinkctl
// status's LOAD/S and ROLES lagged moves by up to a load interval:
// issue 44).
func TestObserverLoadFollowsTheMap(t *testing.T) {
	v := newObserverView("r", newKeys("r"), zap.NewNop())
	// b was ranked and took slots 2 and 3 from a; a's summary predates
	// the move, and b has written none yet.
	cur := wire.Map{Schema: 3, Version: 2, Slots: 4, Members: []string{"a", "b"}, Table: []int32{0, 0, 1, 1}}
	members := map[string]memberInfo{"a": {lease: 1, capacity: 1}, "b": {lease: 2, capacity: 1}}
	loads := map[string]memberLoad{"a": {lease: 1, report: wire.LoadReport{Slots: []wire.SlotLoad{
		{Slot: 0, Rate: 1, Roles: 1}, {Slot: 1, Rate: 2, Roles: 1}, {Slot: 2, Rate: 4, Roles: 1}, {Slot: 3, Rate: 8, Roles: 2}}}}}
	v.cur, v.lineage, v.seq, v.rev, v.members, v.loads = cur, 1, 1, 10, members, loads
	got := map[string]MemberState{}
	for _, m := range v.state().Members {
		got[m.Name] = m
	}
	if a, b := got["a"], got["b"]; a.Roles != 2 || a.Load != 3 || b.Roles != 3 || b.Load != 12 {
		t.Fatalf("a: %d roles, load %v (want 2, 3); b: %d roles, load %v (want 3, 12)", a.Roles, a.Load, b.Roles, b.Load)
	}
	// b's own summary, once written, is what counts for its slots.
	loads["b"] = memberLoad{lease: 2, report: wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 2, Rate: 5, Roles: 1}, {Slot: 3, Rate: 0, Roles: 0}}}}
	v.rev = 11
	for _, m := range v.state().Members {
		got[m.Name] = m
	}
	if a, b := got["a"], got["b"]; a.Roles != 2 || a.Load != 3 || b.Roles != 1 || b.Load != 5 {
		t.Fatalf("after b's summary, a: %d roles, load %v (want 2, 3); b: %d roles, load %v (want 1, 5)", a.Roles, a.Load, b.Roles, b.Load)
	}
}
