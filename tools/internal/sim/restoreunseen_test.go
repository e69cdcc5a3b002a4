package sim

import (
	"strings"
	"testing"
)

// TestRestoreUnseenHistories plays histories with restore-unseen (drawn
// only when named): etcd restored from a snapshot while the members that
// saw the history since are cut off, stopped, crashed or leaving, and the
// members behind it come back into the restored history. Seed 358 found
// a leader that shut down gracefully as etcd came back: its hand-over saw
// the map go back, gave up, and revoked its lease, whose restored key was
// what kept its restored slots from a member behind, while a process that
// joined after the snapshot, cut off, still held one of them. (Seed 886,
// before the fault's leavers were replaced, found a fenced member's
// hand-over: see rink's TestHandOverFromFencedIncarnationSendsNothing.)
func TestRestoreUnseenHistories(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Kinds = []string{"restore-unseen", "crash", "join", "leave", "partition"}
	seeds := []uint64{358}
	n := 100
	if testing.Short() {
		n = 20
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		seeds = append(seeds, seed)
	}
	restores := 0
	for _, seed := range seeds {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: go run ./tools/cmd/rink-sim -seed %d -kinds %s)", seed, res.Violation, seed, strings.Join(cfg.Kinds, ","))
		}
		restores += res.Ops["restore-unseen"]
	}
	if restores == 0 {
		t.Fatalf("%d histories drew no restore-unseen", len(seeds))
	}
	t.Logf("%d histories, %d restores unseen", len(seeds), restores)
}
