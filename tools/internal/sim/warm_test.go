package sim

import (
	"strings"
	"testing"
	"time"
)

// TestWarmPromotions plays histories of a rink with three replicas per
// slot (two secondaries, so that the oldest and the newest differ), six
// members in three zones, every fault kind, and requires no violation: in
// particular, every slot whose primary crashed goes to its oldest live
// secondary (checkPromotions), and some do.
func TestWarmPromotions(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Members, cfg.Replicas, cfg.Zones, cfg.Kinds = 6, 3, 3, FaultKinds
	seeds := seedsToPlay(t, cfg, 150)
	began := time.Now()
	promoted := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		res := Run(seed, cfg)
		promoted += res.Promotions
		if res.Violation != "" {
			t.Errorf("seed %d: %s (replay: go run ./tools/cmd/rink-sim -members 6 -replicas 3 -zones 3 -kinds %s -seed %d)",
				seed, res.Violation, strings.Join(FaultKinds, ","), seed)
		}
	}
	if seeds > 0 && promoted == 0 {
		t.Errorf("no promotion checked in %d histories", seeds)
	}
	t.Logf("%d histories, %d promotions checked, in %v", seeds, promoted, time.Since(began))
}
