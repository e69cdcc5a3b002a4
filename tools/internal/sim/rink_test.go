package sim

import (
	"flag"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/simhook"
)

var rinkSeed = flag.Uint64("sim.rinkseed", 0, "play only this seed in TestRinkHistories (0: the default seeds)")

// TestRinkQuiet: members that join a rink with no fault get ranked and
// hold every slot, and nothing is held twice.
func TestRinkQuiet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Faults = 0
	cfg.Trace = true
	for seed := uint64(1); seed <= 3; seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s\n%s", seed, res.Violation, res.Trace)
		}
		t.Logf("seed %d: %d events, %d member-steps", seed, res.Events, res.MemberSteps)
	}
}

// TestRinkHistories plays seeded histories with faults and requires no
// violation.
func TestRinkHistories(t *testing.T) {
	// The first seeds, and seeds that failed with a fix undone (see
	// CHANGELOG: what the simulator found). A seed names a history of
	// one version of the simulator and of the core: when either draws or
	// does anything differently, the seeds that show a fix change, and
	// the fix's real-core test is what stays (the CHANGELOG names it).
	// The older seeds were found when the swarm had only the first ten
	// fault kinds, and play with those.
	type run struct {
		seeds   []uint64
		swarm   []string
		members int // (0: the default)
	}
	runs := []run{
		{seeds: []uint64{1, 2, 3, 4, 5, 6, 7, 8,
			1530, 4868, // a new lineage after a restore: a member the restore erased still acted
			73024334, // an older record put back, applied laxly, ranked a name twice: no map went out again
		}},
		{members: 8, seeds: []uint64{
			80009697, // (the same)
			80033835, // a ghost that no map the next leader remembered gave a slot
		}},
		{swarm: FaultKinds[:10], seeds: []uint64{
			80, 198, 210, 291, 378, 454, // a restart under the name held a slot beside its heir
			98, 3160, // a listing older than the own key's rebinding: never started again
			26, 32, 49, 61, 72, // a process resumed past its deadline started slots before it fenced (and 3)
		}},
	}
	if *rinkSeed != 0 {
		runs = []run{{seeds: []uint64{*rinkSeed}}}
	}
	began := time.Now()
	steps, n := 0, 0
	for _, r := range runs {
		cfg := DefaultConfig()
		cfg.Swarm = r.swarm
		if r.members != 0 {
			cfg.Members = r.members
		}
		for _, seed := range r.seeds {
			res := Run(seed, cfg)
			steps, n = steps+res.MemberSteps, n+1
			if res.Violation != "" {
				cfg.Trace = true
				res = Run(seed, cfg)
				t.Fatalf("seed %d: %s (replay: go test ./tools/internal/sim -run TestRinkHistories -sim.rinkseed %d)\n%s", seed, res.Violation, seed, res.Trace)
			}
		}
	}
	t.Logf("%d histories, %d member-steps in %v", n, steps, time.Since(began))
}

// TestRinkReplaysBySeed: a seed plays the same history, byte for byte.
func TestRinkReplaysBySeed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trace = true
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 722} {
		a, b := Run(seed, cfg), Run(seed, cfg)
		if a.Trace != b.Trace || a.Events != b.Events || a.MemberSteps != b.MemberSteps {
			t.Fatalf("seed %d played two histories: %d and %d events, traces equal %v", seed, a.Events, b.Events, a.Trace == b.Trace)
		}
		if len(a.Trace) < 1000 {
			t.Fatalf("seed %d: a trace of %d bytes", seed, len(a.Trace))
		}
	}
}

// TestPlantedBugsAreFound: the simulator can fail. Each bug planted in the
// members' cores (simhook.Plants) is found within the first 2,000 seeds.
// forget-ghosts is the slowest (seed 706): it needs an operator to delete
// a live member's key at the right time, one fault kind of eighteen.
func TestPlantedBugsAreFound(t *testing.T) {
	if len(simhook.Plants) < 4 {
		t.Fatalf("plants: %v", simhook.Plants)
	}
	for _, plant := range simhook.Plants {
		cfg := DefaultConfig()
		cfg.Plant = plant
		found := uint64(0)
		for seed := uint64(1); seed <= 2000 && found == 0; seed++ {
			if res := Run(seed, cfg); res.Violation != "" {
				found = seed
				t.Logf("%s: seed %d: %s", plant, seed, res.Violation)
			}
		}
		if found == 0 {
			t.Errorf("%s: no violation in 2,000 seeds", plant)
		}
	}
}

// TestShrinkFindsASmallerHistory: a failing history (a planted bug) shrinks
// to one with fewer members, faults or kinds that still fails.
func TestShrinkFindsASmallerHistory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Plant = "ignore-fence"
	res := Run(1, cfg)
	if res.Violation == "" {
		t.Fatal("the planted bug is not found at seed 1")
	}
	small, sres := Shrink(1, cfg, 60)
	if sres.Violation == "" {
		t.Fatal("the shrunk history does not fail")
	}
	if small.Members >= cfg.Members && small.Faults >= cfg.Faults && len(small.Kinds) >= len(res.Kinds) {
		t.Fatalf("nothing shrunk: %d members, %v of faults, kinds %v", small.Members, small.Faults, small.Kinds)
	}
	t.Logf("shrunk to %d members, %v of faults, kinds %v: %s", small.Members, small.Faults, small.Kinds, sres.Violation)
}
