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
	playRestores(t, cfg, "restore-unseen", 358, 100, 20, "")
}

// playRestores plays seed first, then seeds 1 to n (1 to short with
// -short), of cfg, and requires no violation and some fault of kind
// drawn; replay is the rink-sim flags beside -kinds that replay one.
func playRestores(t *testing.T, cfg Config, kind string, first uint64, n, short int, replay string) {
	t.Helper()
	seeds := []uint64{first}
	if testing.Short() {
		n = short
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		seeds = append(seeds, seed)
	}
	restores := 0
	for _, seed := range seeds {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: go run ./tools/cmd/rink-sim -seed %d %s-kinds %s)", seed, res.Violation, seed, replay, strings.Join(cfg.Kinds, ","))
		}
		restores += res.Ops[kind]
	}
	if restores == 0 {
		t.Fatalf("%d histories drew no %s", len(seeds), kind)
	}
	t.Logf("%d histories, %d faults %s", len(seeds), restores, kind)
}

// TestRestoreUnseenRankedKeylessGap replays a history the library did not
// survive before a leader in its quiet time kept gone members ranked
// (withRanked in rink's proclaim.go). Member m0 fenced
// and was still rejoining, keyless while the map ranked it, when the
// snapshot was saved; after it, a restarted m6 took m0's slot 5. Etcd is
// restored while m6 is stopped (its lease, granted after the snapshot, is
// gone, and it acts until its deadline) and every other process is cut
// off, stopped, crashed or leaving; m4, stopped since the snapshot, never
// applied a map the restore erased and so notices nothing. It resumes,
// fences, rejoins, leads, moves m0's slots to itself in a map put after
// its rebinding, which its quiet time after the rejoin spares (hushSpares),
// and starts slot 5 12 ms later: two holders. Nothing in the restored keys
// tells m4 of m6; a member that never fenced, given the slot instead, would
// start it as soon.
func TestRestoreUnseenRankedKeylessGap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Kinds = []string{"restore-unseen", "leave", "pause", "etcd-errors"}
	if res := Run(1458, cfg); res.Violation != "" {
		t.Fatalf("seed 1458: %s (replay: go run ./tools/cmd/rink-sim -seed 1458 -kinds %s)", res.Violation, strings.Join(cfg.Kinds, ","))
	}
}

// TestRestoreUnseenLagHistories plays histories with restore-unseen-lag:
// the processes left alone at the restore hear of it through their
// watches only after a lag, while their requests are answered by the
// restored etcd (a ghost's lease granted after the snapshot is gone
// there). It kills ghosts-end-before-restore-check (seed 725), which
// plain restore-unseen never did.
func TestRestoreUnseenLagHistories(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeyFaults = true
	cfg.Kinds = []string{"restore-unseen-lag", "duplicate", "member-keys-delete", "partition", "join", "crash"}
	playRestores(t, cfg, "restore-unseen-lag", 725, 60, 15, "-keys ")
}
