package sim

import (
	"fmt"
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
	t.Parallel()
	base := drainConfig()
	drift := base
	drift.Drift = DriftBound
	rep := base
	rep.Members, rep.Replicas, rep.Zones = 6, 2, 3
	lingered := 0
	steps, took := playModels(t, []modelCase{{"drain", base, 80}, {"drain+drift", drift, 20}, {"drain+replicas", rep, 20}},
		func(res Result) { lingered += res.Lingered })
	if *rinkSeed == 0 && lingered == 0 {
		t.Fatal("no function outlasted its holding: the drain was never put to the test")
	}
	t.Logf("%d functions outlasted their holdings, %d member-steps in %v", lingered, steps, took)
}

// TestDrainDrawsItsOwnStream: with Config.Drain a seed draws the same fault
// kinds as without (the functions come from a stream of their own), its
// functions outlast their holdings, and it replays byte for byte; without
// it no function runs.
func TestDrainDrawsItsOwnStream(t *testing.T) {
	t.Parallel()
	checkOwnStream(t, "a drain", func(c *Config) { c.Drain = 500 * time.Millisecond }, "after the holding ended",
		func(a, b Result) error {
			if a.Lingered != 0 || b.Lingered == 0 {
				return fmt.Errorf("functions outlasted their holdings %d times without a drain, %d with", a.Lingered, b.Lingered)
			}
			return nil
		})
}
