package rink

import (
	"testing"

	"github.com/rink-go/rink/internal/wire"
)

// A batch whose last map is whole leaves that map's moves to be recorded
// after the acquisitions (see slotHistory.lazy), and pruneHistory skips
// while it is pending: the step prunes once it is recorded, or the
// history outgrew its bounds under churn (found in review).
func TestHistoryPrunedAfterALazyMap(t *testing.T) {
	const L = 10
	b, two := tenMaps(t, L, func(v int64) int { return int(v % 2) })
	b.put(mapKV(two(11, 0, 1), L, 30), floorKV(wire.AckFloor{Lineage: L, Version: 10, Floor: 10, Complete: true}, 31))
	if b.r.st.hist.Covers(9) {
		t.Fatal("seq 9 kept after a floor at 10")
	}
}
