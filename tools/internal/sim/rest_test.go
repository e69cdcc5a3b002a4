package sim

import "testing"

// TestRejoinedMembersFenceForAReason plays histories of process, network
// and etcd faults, in which members fence, resume and rejoin, and
// requires no violation: checkFence (a rejoined member fences only when
// its lease is in doubt or its key gone) and the end's check that the
// leader's floor counts every member's acknowledgement (unacked) hold
// for the library as it is.
func TestRejoinedMembersFenceForAReason(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"partition", "pause", "etcd-errors", "crash", "restart", "join", "leave"}
	n := uint64(150)
	if testing.Short() {
		n = 20
	}
	checked := 0
	for seed := uint64(1); seed <= n; seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s)", seed, res.Violation, replayCommand(cfg, seed))
		}
		checked += res.FencesChecked
	}
	if checked == 0 {
		t.Fatalf("%d histories: no fence of a rejoined member checked", n)
	}
	t.Logf("%d histories: %d fences of rejoined members checked", n, checked)
}
