package sim

import "testing"

// TestKnobHistories plays histories whose members remember little (see
// knobs.go: Config.Knobs), with the fault kinds each seed draws, and with
// key faults, and requires no violation: what is forgotten past a bound
// makes the members wait or fall back to a lower bound, never act on
// less than they need, and every slot is held at the end.
func TestKnobHistories(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Knobs = true
	keyed := cfg
	keyed.KeyFaults = true
	played := 0
	steps, took := playModels(t, []modelCase{{"knobs", cfg, 30}, {"knobs keys", keyed, 30}}, func(Result) { played++ })
	t.Logf("%d histories, %d member-steps in %v", played, steps, took)
}

// TestKnobsDrawTheirOwnStream: with Config.Knobs a seed draws the same
// fault kinds as without, its trace says the knobs drawn, and it replays
// byte for byte.
func TestKnobsDrawTheirOwnStream(t *testing.T) {
	t.Parallel()
	checkOwnStream(t, "knobs", func(c *Config) { c.Knobs = true }, "knobs: {HistChanges:", func(a, b Result) error { return nil })
}
