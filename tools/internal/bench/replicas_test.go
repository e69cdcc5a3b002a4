package bench

import (
	"testing"
	"time"

	"github.com/rink-go/rink"
)

// TestReplicasOverlapChecker shows that replicaOverlaps counts more than k
// holders of a slot, a member holding a slot twice beside another holder,
// and two primaries, and passes a promotion after a fence.
func TestReplicasOverlapChecker(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for name, events := range map[string][]rink.Event{
		"three holders of two": {
			{Kind: rink.EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(1)},
			{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 1, Time: at(2)},
		},
		"a member twice beside another": {
			{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(0)},
			{Kind: rink.EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(1)},
			{Kind: rink.EventSecondaryAcquired, Member: "a", Slot: 1, Time: at(2)},
		},
		"two primaries": {
			{Kind: rink.EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: rink.EventAcquired, Member: "b", Slot: 1, Token: 6, Time: at(1)},
		},
		"a secondary acquired before the holder it replaces released (listed out of order)": {
			{Kind: rink.EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
			{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(1)},
			{Kind: rink.EventSecondaryReleased, Member: "b", Slot: 1, Time: at(3)},
			{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 1, Time: at(2)},
		},
	} {
		if replicaOverlaps(events, 2) == 0 {
			t.Errorf("%s: not counted", name)
		}
	}
	ok := []rink.Event{
		{Kind: rink.EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
		{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(1)},
		{Kind: rink.EventSecondaryReleased, Member: "b", Slot: 1, Time: at(2)},
		{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 1, Time: at(3)},
		{Kind: rink.EventFenced, Member: "a", Time: at(4)},
		{Kind: rink.EventSecondaryReleased, Member: "c", Slot: 1, Cause: rink.ErrPromoted, Time: at(5)},
		{Kind: rink.EventAcquired, Member: "c", Slot: 1, Token: 9, Time: at(5)},
		{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(6)},
		{Kind: rink.EventSecondaryAcquired, Member: "a", Slot: 2, Time: at(6)},
	}
	if n := replicaOverlaps(ok, 2); n != 0 {
		t.Errorf("a valid history: %d overlaps", n)
	}
	primary, secondaries := replicaHolds(ok)
	if primary[1] != "c" || len(secondaries[1]) != 1 || secondaries[1][0] != "b" || primary[2] != "" || len(secondaries[2]) != 1 {
		t.Errorf("holdings at the end: primaries %v, secondaries %v", primary, secondaries)
	}
}

// TestReplicasTakeovers shows which takeovers of a crashed member's slots
// count as warm: only by a member that held the slot as a secondary at
// the crash and until the promotion ended that secondary.
func TestReplicasTakeovers(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lost := map[int]bool{1: true, 2: true, 3: true, 4: true}
	secondaries := map[int][]string{1: {"b"}, 2: {"b"}, 3: {"c"}, 4: {"c"}}
	events := []rink.Event{
		{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 1, Time: at(-10)},
		{Kind: rink.EventSecondaryAcquired, Member: "b", Slot: 2, Time: at(-10)},
		{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 3, Time: at(-10)},
		{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 4, Time: at(-10)},
		{Kind: rink.EventFenced, Member: "a", Time: at(1)},
		// 1: promoted, warm.
		{Kind: rink.EventSecondaryReleased, Member: "b", Slot: 1, Cause: rink.ErrPromoted, Time: at(2)},
		{Kind: rink.EventAcquired, Member: "b", Slot: 1, Token: 9, Time: at(2)},
		// 2: taken by a member that was not its secondary.
		{Kind: rink.EventAcquired, Member: "d", Slot: 2, Token: 9, Time: at(3)},
		// 3: its secondary lost it (moved) before taking it again.
		{Kind: rink.EventSecondaryReleased, Member: "c", Slot: 3, Cause: rink.ErrRoleMoved, Time: at(2)},
		{Kind: rink.EventSecondaryAcquired, Member: "c", Slot: 3, Time: at(3)},
		{Kind: rink.EventAcquired, Member: "c", Slot: 3, Token: 9, Time: at(4)},
		// 4: not taken yet.
	}
	taken, warm := takeovers(events, at(0), lost, secondaries)
	if len(taken) != 3 || taken[1].Member != "b" || taken[2].Member != "d" || taken[3].Member != "c" {
		t.Fatalf("taken %v", taken)
	}
	if !warm[1] || warm[2] || warm[3] {
		t.Errorf("warm %v, want only slot 1", warm)
	}
}
