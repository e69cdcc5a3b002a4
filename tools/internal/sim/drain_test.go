package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// drainConfig is a rink whose members drain for 500 ms, with key faults.
func drainConfig() Config {
	cfg := DefaultConfig()
	cfg.KeyFaults = true
	cfg.Drain = 500 * time.Millisecond
	return cfg
}

// TestRinkDrainHistories plays histories whose members drain given-away
// slots (Config.Drain) while functions run on their holdings and outlast
// them, with the fault kinds each seed draws and key faults, and requires
// no violation: no heir starts a slot while a function of its previous
// holder still runs on it within the drain timeout. Twenty histories also
// drift within the fence margin, and twenty have two replicas in three
// zones.
func TestRinkDrainHistories(t *testing.T) {
	base := drainConfig()
	drift := base
	drift.Drift = DriftBound
	rep := base
	rep.Members, rep.Replicas, rep.Zones = 6, 2, 3
	began := time.Now()
	lingered, steps := 0, 0
	for _, c := range []struct {
		name string
		cfg  Config
		n    uint64
	}{{"drain", base, 80}, {"drain+drift", drift, 20}, {"drain+replicas", rep, 20}} {
		for seed := uint64(1); seed <= seedsToPlay(t, c.cfg, c.n); seed++ {
			res := Run(seed, c.cfg)
			lingered += res.Lingered
			steps += res.MemberSteps
			if res.Violation != "" {
				t.Errorf("%s: seed %d: %s (replay: go run ./tools/cmd/rink-sim -keys -drain %v -drift %g -members %d -replicas %d -zones %d -seed %d)",
					c.name, seed, res.Violation, c.cfg.Drain, c.cfg.Drift, c.cfg.Members, c.cfg.replicas(), c.cfg.Zones, seed)
			}
		}
	}
	if *rinkSeed == 0 && lingered == 0 {
		t.Fatal("no function outlasted its holding: the drain was never put to the test")
	}
	t.Logf("%d functions outlasted their holdings, %d member-steps in %v", lingered, steps, time.Since(began))
}

// TestDrainDrawsItsOwnStream: with Config.Drain a seed draws the same fault
// kinds as without (the functions come from a stream of their own), its
// functions outlast their holdings, and it replays byte for byte; without
// it no function runs.
func TestDrainDrawsItsOwnStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trace = true
	drained := cfg
	drained.Drain = 500 * time.Millisecond
	for _, seed := range []uint64{1, 2, 3} {
		a, b := Run(seed, cfg), Run(seed, drained)
		if !slices.Equal(a.Kinds, b.Kinds) {
			t.Fatalf("seed %d: kinds %v without a drain, %v with", seed, a.Kinds, b.Kinds)
		}
		if a.Lingered != 0 || strings.Contains(a.Trace, "after the holding ended") {
			t.Fatalf("seed %d: a function ran without Config.Drain", seed)
		}
		if b.Lingered == 0 || !strings.Contains(b.Trace, "after the holding ended") {
			t.Fatalf("seed %d: no function outlasted its holding with Config.Drain", seed)
		}
		if again := Run(seed, drained); again.Trace != b.Trace {
			t.Fatalf("seed %d: a history with a drain does not replay", seed)
		}
	}
}
