package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMemberClockDrifts: a process's clock runs at 1+e of the world's from
// when it was made, and a timer set on it fires once that much has passed
// on it, at most a nanosecond of the world's late, never early.
func TestMemberClockDrifts(t *testing.T) {
	t.Parallel()
	for _, e := range []float64{-0.3, -0.02, -1e-9, 0, 0.013, 0.3} {
		w := NewWorld(1, 1)
		w.RunUntil(3 * time.Second)
		env := &memberEnv{w: w, t0: w.now, e: e}
		start := env.Clock()
		if start != int64(3*time.Second) {
			t.Fatalf("e %v: the clock reads %v when the process is made, not the world's time", e, time.Duration(start))
		}
		for _, d := range []time.Duration{0, 1, 7, time.Millisecond, 1234567891} {
			set, fired := env.Clock(), int64(-1)
			env.After(d, func() { fired = env.Clock() })
			at := w.now
			for fired < 0 {
				w.Step()
			}
			if fired-set < int64(d) {
				t.Fatalf("e %v: a timer of %v fired after %v on the member's clock", e, d, time.Duration(fired-set))
			}
			if d > 0 {
				if early := env.local(w.now-1) - env.local(at); early >= d {
					t.Fatalf("e %v: a timer of %v fired later than it had to", e, d)
				}
			}
		}
		w.RunUntil(w.now + 10*time.Second)
		got := float64(env.Clock()-start) / float64(w.now-3*time.Second)
		if diff := got - (1 + e); diff > 1e-9 || diff < -1e-9 {
			t.Fatalf("e %v: the clock ran at %v of the world's rate", e, got)
		}
	}
}

// TestDriftDrawsItsOwnStream: with Config.Drift a seed draws the same fault
// kinds as without (the clocks come from a stream of their own), its
// processes' clocks are off the world's within the bound, and it replays
// byte for byte.
func TestDriftDrawsItsOwnStream(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Trace = true
	drifted := cfg
	drifted.Drift = DriftBound
	for _, seed := range []uint64{1, 2, 3} {
		a, b := Run(seed, cfg), Run(seed, drifted)
		if !slices.Equal(a.Kinds, b.Kinds) {
			t.Fatalf("seed %d: kinds %v without drift, %v with", seed, a.Kinds, b.Kinds)
		}
		if a.Trace == b.Trace || strings.Contains(a.Trace, "world's rate") || !strings.Contains(b.Trace, "off the world's rate") {
			t.Fatalf("seed %d: the clocks did not drift", seed)
		}
		if c := Run(seed, drifted); c.Trace != b.Trace {
			t.Fatalf("seed %d with drift played two histories", seed)
		}
	}
}

// TestRinkDriftHistories plays seeded histories whose members' clocks
// drift by up to DriftBound (2%) from etcd's, within what the fence margin
// covers, and requires no violation: histories with key faults, and
// histories of a rink with two replicas per slot in three zones, every
// fault kind drawn.
func TestRinkDriftHistories(t *testing.T) {
	t.Parallel()
	keyed := DefaultConfig()
	keyed.KeyFaults, keyed.Drift = true, DriftBound
	rep := DefaultConfig()
	rep.Members, rep.Replicas, rep.Zones, rep.Kinds, rep.Drift = 6, 2, 3, FaultKinds, DriftBound
	runs := []struct {
		cfg    Config
		seeds  uint64
		replay string
	}{
		{keyed, 400, "-keys"},
		{rep, 100, "-members 6 -replicas 2 -zones 3 -kinds " + strings.Join(FaultKinds, ",")},
	}
	if *rinkSeed != 0 {
		for _, r := range runs {
			if res := Run(*rinkSeed, r.cfg); res.Violation != "" {
				t.Errorf("seed %d: %s (replay: go run ./tools/cmd/rink-sim %s -drift %g -seed %d)", *rinkSeed, res.Violation, r.replay, DriftBound, *rinkSeed)
			}
		}
		return
	}
	began := time.Now()
	n, steps := 0, 0
	for _, r := range runs {
		seeds := r.seeds
		if testing.Short() {
			seeds /= 10
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			res := Run(seed, r.cfg)
			n, steps = n+1, steps+res.MemberSteps
			if res.Violation != "" {
				t.Errorf("seed %d: %s (replay: go run ./tools/cmd/rink-sim %s -drift %g -seed %d)", seed, res.Violation, r.replay, DriftBound, seed)
			}
		}
	}
	t.Logf("%d histories with drift up to %g, %d member-steps in %v", n, DriftBound, steps, time.Since(began))
}

// TestDriftBeyondTheMarginIsFound: the simulator can fail for want of the
// fence margin. With clocks up to 30% off etcd's, a member whose clock is
// slow by more than 1/8 trusts its lease after etcd expired it: cut off,
// it still acts on its slots while others hold them (at seed 1, as it
// comes back and applies the maps it missed).
func TestDriftBeyondTheMarginIsFound(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Drift = 0.3
	for seed := uint64(1); seed <= 50; seed++ {
		res := Run(seed, cfg)
		if res.Violation == "" {
			continue
		}
		if strings.HasPrefix(res.Violation, "liveness") {
			t.Fatalf("seed %d: %s, not a safety violation", seed, res.Violation)
		}
		t.Logf("seed %d: %s", seed, res.Violation)
		return
	}
	t.Fatal("no violation in 50 seeds with clocks up to 30% off etcd's")
}
