package chaos

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeChild() // when re-executed as an etcd node or a worker
	os.Exit(m.Run())
}

// runDir returns this test binary's path, which the runs start as
// etcd nodes and workers, and the directory for their data and logs: a
// temporary one, or RINK_CHAOS_DIR to keep the logs for a look after a
// failure.
func runDir(t *testing.T) (self, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if d := os.Getenv("RINK_CHAOS_DIR"); d != "" {
		dir = d
	}
	return self, dir
}

// TestChaos is a short seeded fault-injection run: a 3-node etcd in child
// processes, 5 workers in child processes behind proxies, and one fault of
// every kind. It fails on any violation of the promise, and when a role
// stays unheld longer than the bound.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run in -short mode")
	}
	self, dir := runDir(t)
	var out strings.Builder
	cfg := Config{Self: self, Dir: dir, Members: 5, Roles: 64, Rounds: 1, Seed: 1,
		TTL: 2 * time.Second, Delay: time.Second, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Drive(ctx, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s.Text())
	if len(s.Violations) > 0 {
		t.Fatalf("%d violations, first: %v", len(s.Violations), s.Violations[0])
	}
	if s.Report.Acquisitions == 0 || len(s.Faults) != 7 {
		t.Fatalf("too little happened: %d acquisitions, %d faults", s.Report.Acquisitions, len(s.Faults))
	}
	bound := Bound(cfg)
	kinds := make([]string, 0, len(s.MaxUnheld))
	for k := range s.MaxUnheld {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if s.MaxUnheld[k] > bound {
			t.Errorf("after %s a role was unheld for %v, bound %v", k, s.MaxUnheld[k], bound)
		}
	}
}

// stormLeftOut are the operations TestChaosStorm does not draw, and why.
// The snapshot restore is left out for its time (a restart of the etcd
// cluster); restore_test.go covers it. Put here, with the reason, an
// operation the core is known to fail until its fix lands (the stray keys
// were, until main ignored them). RINK_CHAOS_STORM_ALL=1 draws them all,
// the restore included.
var stormLeftOut = map[string]string{
	"snapshot-restore": "a cluster restart: left out for time",
}

// TestChaosStorm is a short seeded storm (see Storm): operations of every
// kind but those in stormLeftOut, back to back, never waiting for the
// rink to settle; then every fault healed. It fails on any safety violation
// over the whole run, and on any role not held again, by the members' own
// logs, within StormBound of the heal.
func TestChaosStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos storm in -short mode")
	}
	self, dir := runDir(t)
	var out strings.Builder
	var ops []string
	for _, k := range StormOps {
		if why, out := stormLeftOut[k]; out && os.Getenv("RINK_CHAOS_STORM_ALL") == "" {
			t.Logf("left out: %s: %s", k, why)
			continue
		}
		ops = append(ops, k)
	}
	// Members drain their roles and warm up planned moves: the storm checks
	// the promise through those paths too.
	cfg := Config{Self: self, Dir: dir, Members: 5, Roles: 64, Duration: 25 * time.Second, Seed: 3,
		TTL: 2 * time.Second, Delay: time.Second, Out: &out, Ops: ops, Restore: os.Getenv("RINK_CHAOS_STORM_ALL") != "",
		Drain: time.Second, Warmup: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Storm(ctx, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Text())
	if s.Report.Acquisitions == 0 || len(s.Ops) < 10 {
		t.Fatalf("too little happened: %d acquisitions, %d operations", s.Report.Acquisitions, len(s.Ops))
	}
	if vs := s.Violations(); len(vs) > 0 {
		t.Fatalf("%d violations (%d of safety, %d of liveness), first: %v", len(vs), len(s.Report.Violations), s.LivenessViolations(), vs[0])
	}
}
