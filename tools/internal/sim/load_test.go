package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// loadConfig is a rink whose members report their load and balance by it
// (Config.Load), with key faults.
func loadConfig() Config {
	cfg := DefaultConfig()
	cfg.KeyFaults = true
	cfg.Load = true
	return cfg
}

// TestRinkLoadHistories plays histories whose members report their load,
// balance by it and do work on their holdings, the hot set moving once,
// with the fault kinds each seed draws and key faults, and requires no
// violation: safety throughout, and at the end a rink balanced within
// what balancing can reach (unless etcd was restored: see checkLoad).
// Seeds 133, 330, 346, 468 and 654 ended unbalanced before the reporter
// wrote a slot's matured rate (see core.LoadReporter); seed 91 (an
// operator deleted a load key) before the floor named the members whose
// summaries the leader lacks (wire.AckFloor.Unreported).
func TestRinkLoadHistories(t *testing.T) {
	cfg := loadConfig()
	began := time.Now()
	worst, steps, unchecked := 0.0, 0, 0
	seeds := seedsToPlay(t, cfg, 80)
	for seed := uint64(1); seed <= seeds; seed++ {
		res := Run(seed, cfg)
		steps += res.MemberSteps
		if res.LoadUnchecked {
			unchecked++
		} else {
			worst = max(worst, res.Imbalance/max(1+LoadTolerance, res.ImbalanceBound))
		}
		if res.Violation != "" {
			t.Errorf("seed %d: %s (replay: go run ./tools/cmd/rink-sim -keys -load -seed %d)", seed, res.Violation, seed)
		}
	}
	if *rinkSeed == 0 {
		for _, seed := range []uint64{91, 133, 330, 346, 468, 654} {
			if res := Run(seed, cfg); res.Violation != "" {
				t.Errorf("seed %d: %s", seed, res.Violation)
			}
		}
	}
	if seeds > 0 && unchecked*2 > int(seeds) {
		t.Errorf("%d of %d histories had etcd restored: the balance was hardly checked", unchecked, seeds)
	}
	t.Logf("%d histories (%d with etcd restored, not checked for balance), %d member-steps in %v; the worst end at %.2f of what balancing can reach",
		seeds, unchecked, steps, time.Since(began), worst)
}

// TestLoadDrawsItsOwnStream: with Config.Load a seed draws the same fault
// kinds as without (the rates come from a stream of their own), reports
// load and balances by it, and replays byte for byte; without it nothing
// is reported.
func TestLoadDrawsItsOwnStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trace = true
	loaded := cfg
	loaded.Load = true
	for _, seed := range []uint64{1, 2, 3} {
		a, b := Run(seed, cfg), Run(seed, loaded)
		if !slices.Equal(a.Kinds, b.Kinds) {
			t.Fatalf("seed %d: kinds %v without load, %v with", seed, a.Kinds, b.Kinds)
		}
		if strings.Contains(a.Trace, "reported load") || a.Imbalance != 0 {
			t.Fatalf("seed %d: load reported without Config.Load", seed)
		}
		if !strings.Contains(b.Trace, "reported load") || !strings.Contains(b.Trace, "load round") || b.Imbalance == 0 {
			t.Fatalf("seed %d: no load reported or balanced with Config.Load", seed)
		}
		if again := Run(seed, loaded); again.Trace != b.Trace {
			t.Fatalf("seed %d: a history with load does not replay", seed)
		}
	}
}
