package sim

import "testing"

// TestCapacityHistories plays histories of members of unequal capacities
// (Config.Capacities), with the fault kinds each seed draws, and with key
// faults, and requires no violation.
func TestCapacityHistories(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Capacities = true
	keyed := cfg
	keyed.KeyFaults = true
	played := 0
	steps, took := playModels(t, []modelCase{{"capacities", cfg, 30}, {"capacities keys", keyed, 30}}, func(Result) { played++ })
	t.Logf("%d histories, %d member-steps in %v", played, steps, took)
}
