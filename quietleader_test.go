package rink

import (
	"slices"
	"testing"

	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
)

// TestQuietLeaderKeepsGoneMembersRanked: what a leader in its quiet time
// after a rejoin plans from (withRanked) keeps a ranked member that has no
// key and no ghost, so the map it plans gives that member's slots to
// nobody else (rink-sim -seed 1458 -kinds
// restore-unseen,leave,pause,etcd-errors, which the simulator's
// TestRestoreUnseenRankedKeylessGap replays whole); and a map that keeps
// such a name, recording no lease for anyone, is the map it replaces
// (sameLeases), not a change to proclaim again and again.
func TestQuietLeaderKeepsGoneMembersRanked(t *testing.T) {
	names := []string{"a", "gone"}
	cur := plan.PlanMap(wire.Map{Slots: 16}, plan.Input{Live: names, Ready: map[string]bool{"a": true, "gone": true}})
	if cur.Index("gone") < 0 {
		t.Fatalf("the first map does not rank gone: %v", cur.Members)
	}
	live := []string{"a", "b"} // (gone's key and lease are gone; b waits)
	kept := withRanked(slices.Clone(live), cur)
	if !slices.Contains(kept, "gone") || !slices.Contains(kept, "b") {
		t.Fatalf("withRanked(%v) = %v: want gone kept beside the live", live, kept)
	}
	quiet := plan.PlanMap(cur, plan.Input{Live: kept, Ready: map[string]bool{}})
	plain := plan.PlanMap(cur, plan.Input{Live: live, Ready: map[string]bool{"b": true}})
	for s := range cur.Slots {
		if cur.Owner(s) == "gone" && quiet.Owner(s) != "gone" {
			t.Errorf("slot %d: gone's in the map before, %s's in the quiet leader's plan", s, quiet.Owner(s))
		}
	}
	if plain.Index("gone") >= 0 {
		t.Fatalf("planned without withRanked, gone is still ranked: %v", plain.Members)
	}
	if !sameLeases([]int64{0, 0}, nil, true) || !sameLeases(nil, []int64{0}, true) || sameLeases([]int64{0, 7}, nil, true) || !sameLeases([]int64{3, 7}, []int64{3, 7}, true) {
		t.Fatal("sameLeases, quiet: a list of zeros is no list; any lease recorded counts")
	}
	if sameLeases([]int64{0, 0}, nil, false) {
		t.Fatal("sameLeases, not quiet: a list of zeros is a change from no list, as before withRanked")
	}
}
