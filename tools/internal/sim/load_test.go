package sim

import (
	"fmt"
	"strings"
	"testing"
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
	t.Parallel()
	cfg := loadConfig()
	worst, unchecked, played := 0.0, 0, 0
	steps, took := playModels(t, []modelCase{{"load", cfg, 80}}, func(res Result) {
		played++
		if res.LoadUnchecked {
			unchecked++
		} else {
			worst = max(worst, res.Imbalance/max(1+LoadTolerance, res.ImbalanceBound))
		}
	})
	if *rinkSeed == 0 {
		for _, seed := range []uint64{91, 133, 330, 346, 468, 654} {
			if res := Run(seed, cfg); res.Violation != "" {
				t.Errorf("seed %d: %s", seed, res.Violation)
			}
		}
	}
	if played > 0 && unchecked*2 > played {
		t.Errorf("%d of %d histories had etcd restored: the balance was hardly checked", unchecked, played)
	}
	t.Logf("%d histories (%d with etcd restored, not checked for balance), %d member-steps in %v; the worst end at %.2f of what balancing can reach",
		played, unchecked, steps, took, worst)
}

// TestLoadDrawsItsOwnStream: with Config.Load a seed draws the same fault
// kinds as without (the rates come from a stream of their own), does
// work, balances by it in load rounds, and replays byte for byte; without
// it the members report their load too (production's always do: the
// roles they watch, no work), and no load round runs.
func TestLoadDrawsItsOwnStream(t *testing.T) {
	t.Parallel()
	checkOwnStream(t, "load", func(c *Config) { c.Load = true }, "load round", func(a, b Result) error {
		if a.Imbalance != 0 || b.Imbalance == 0 || !strings.Contains(a.Trace, "reported load") {
			return fmt.Errorf("imbalance %v without load, %v with; load reported without: %v", a.Imbalance, b.Imbalance, strings.Contains(a.Trace, "reported load"))
		}
		return nil
	})
}

// TestAbsurdLoad plays histories whose members balance by load, in which
// an application now and then records absurd figures of work for a while
// (load-absurd, played only when named): sums and averaged rates that
// overflow count for nothing in the member's summary (core.LoadMeter), and
// every summary written decodes (see checkDecoders). No violation. (The
// balance at the end is not checked: see absurdLoad.)
func TestAbsurdLoad(t *testing.T) {
	t.Parallel()
	cfg := loadConfig()
	cfg.KeyFaults = false
	cfg.Kinds = []string{"load-absurd", "crash", "join"}
	recorded := 0
	playModels(t, []modelCase{{"load-absurd", cfg, 10}}, func(res Result) { recorded += res.Ops["load-absurd"] })
	if recorded == 0 {
		t.Fatal("no absurd work recorded")
	}
	t.Logf("%d absurd figures of work recorded", recorded)
}
