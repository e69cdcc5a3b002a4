package sim

import "testing"

// TestCapacityHistories plays histories of members of unequal capacities
// (Config.Capacities), with the fault kinds each seed draws, with key
// faults, and balancing by load, and requires no violation. (The load
// check took every member's share as equal: with capacities, 596 of 978
// histories "carried more than the mean"; it now weighs shares by
// capacity.)
func TestCapacityHistories(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Capacities = true
	keyed := cfg
	keyed.KeyFaults = true
	loaded := loadConfig()
	loaded.Capacities = true
	played := 0
	steps, took := playModels(t, []modelCase{{"capacities", cfg, 30}, {"capacities keys", keyed, 30}, {"capacities load", loaded, 20}}, func(Result) { played++ })
	t.Logf("%d histories, %d member-steps in %v", played, steps, took)
}
