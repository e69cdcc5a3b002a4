package sim

import "testing"

// TestOldFloorPutBack plays histories in which an operator puts back a
// floor of an earlier map lineage (floor-old, drawn only when named):
// members ignore it, the leader writes its own again, and nothing else
// goes wrong. rink-mutate's floor-other-lineage needs these histories.
func TestOldFloorPutBack(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"map-delete", "floor-old", "join", "leave", "crash", "partition"}
	n := 150
	if testing.Short() {
		n = 30
	}
	put := opsOver(t, cfg, n, "floor-old")
	if put == 0 {
		t.Fatalf("%d histories put back no old floor", n)
	}
	t.Logf("%d histories, %d old floors put back", n, put)
}

// TestKeysEditedByHand plays histories in which an operator damages the
// value of any of the rink's keys by hand (key-edit, drawn only when
// named): members refuse or ignore what they cannot read, write their own
// keys back, the leader writes a whole map over a damaged one, and every
// history ends healed. It found three outages, each until a person wrote a
// usable value: a damaged map made every member leave, an edited member
// key left its member unranked, and an election key renamed made a ghost
// of a live member.
func TestKeysEditedByHand(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"key-edit", "join", "leave", "crash", "partition", "etcd-errors"}
	n := 150
	if testing.Short() {
		n = 30
	}
	edits := opsOver(t, cfg, n, "key-edit")
	if edits == 0 {
		t.Fatalf("%d histories edited no key", n)
	}
	t.Logf("%d histories, %d keys edited", n, edits)
}

// opsOver plays seeds 1 to n of cfg, fails on the first violation, and
// returns how many times the histories did fault kind k.
func opsOver(t *testing.T, cfg Config, n int, k string) int {
	t.Helper()
	ops := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s)", seed, res.Violation, replayCommand(cfg, seed))
		}
		ops += res.Ops[k]
	}
	return ops
}
