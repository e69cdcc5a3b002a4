package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// modelCase is a config a test plays the first n seeds of.
type modelCase struct {
	name string
	cfg  Config
	n    uint64
}

// playModels plays each case's seeds (fewer with -short, one with
// -sim.rinkseed: see seedsToPlay), reports each violation with the command
// that replays it, and hands every result to each; it returns the
// member-steps played and how long it took.
func playModels(t *testing.T, cases []modelCase, each func(Result)) (steps int, took time.Duration) {
	t.Helper()
	began := time.Now()
	for _, c := range cases {
		for seed := uint64(1); seed <= seedsToPlay(t, c.cfg, c.n); seed++ {
			res := Run(seed, c.cfg)
			steps += res.MemberSteps
			each(res)
			if res.Violation != "" {
				t.Errorf("%s: seed %d: %s (replay: %s)", c.name, seed, res.Violation, replayCommand(c.cfg, seed))
			}
		}
	}
	return steps, time.Since(began)
}

// replayCommand is the rink-sim command that plays seed with cfg.
func replayCommand(cfg Config, seed uint64) string {
	cmd := fmt.Sprintf("go run ./tools/cmd/rink-sim -members %d -replicas %d -zones %d", cfg.Members, cfg.replicas(), cfg.Zones)
	if cfg.KeyFaults {
		cmd += " -keys"
	}
	if cfg.Drift != 0 {
		cmd += fmt.Sprintf(" -drift %g", cfg.Drift)
	}
	if cfg.Drain != 0 {
		cmd += fmt.Sprintf(" -drain %v", cfg.Drain)
	}
	if cfg.Warmup != 0 {
		cmd += fmt.Sprintf(" -warmup %v", cfg.Warmup)
	}
	if cfg.Load {
		cmd += " -load"
	}
	if cfg.Knobs {
		cmd += " -knobs"
	}
	if cfg.Capacities {
		cmd += " -capacities"
	}
	if cfg.Observer {
		cmd += " -observer"
	}
	if cfg.Kinds != nil {
		cmd += " -kinds " + strings.Join(cfg.Kinds, ",")
	}
	return cmd + fmt.Sprintf(" -seed %d", seed)
}

// checkOwnStream checks a model that draws from a stream of its own: for
// seeds 1 to 3, the config with the model (with) draws the same fault kinds
// as the default one, its trace says marker where the default's does not,
// check accepts both results (nil), and it replays byte for byte.
func checkOwnStream(t *testing.T, model string, with func(*Config), marker string, check func(without, with Result) error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Trace = true
	modelled := cfg
	with(&modelled)
	for _, seed := range []uint64{1, 2, 3} {
		a, b := Run(seed, cfg), Run(seed, modelled)
		if !slices.Equal(a.Kinds, b.Kinds) {
			t.Fatalf("seed %d: kinds %v without %s, %v with", seed, a.Kinds, model, b.Kinds)
		}
		if strings.Contains(a.Trace, marker) {
			t.Fatalf("seed %d: %q without %s", seed, marker, model)
		}
		if !strings.Contains(b.Trace, marker) {
			t.Fatalf("seed %d: no %q with %s", seed, marker, model)
		}
		if err := check(a, b); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if again := Run(seed, modelled); again.Trace != b.Trace {
			t.Fatalf("seed %d: a history with %s does not replay", seed, model)
		}
	}
}
