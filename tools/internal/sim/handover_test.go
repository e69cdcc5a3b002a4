package sim

import (
	"strings"
	"testing"
)

// TestDuplicateLeavesWithoutHandingOver replays a history in which a
// process started under a live member's name (duplicate: the first, cut
// off, acts until its deadline) left gracefully after an operator wrote
// the map back without its leases: with no lease recorded for the name,
// the departure handed over the slots the map gives the name, which the
// first process held, and their heir m0 started slot 8 at once (seed 212,
// found while looking for a history that kills the mutant
// ghosts-forget-candidates). A process that an earlier incarnation of its
// name may still act beside hands nothing over.
func TestDuplicateLeavesWithoutHandingOver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeyFaults = true
	cfg.Kinds = []string{"map-unleased", "pause", "partition", "crash", "leave", "member-keys-delete", "duplicate"}
	if res := Run(212, cfg); res.Violation != "" {
		t.Fatalf("seed 212: %s (replay: go run ./tools/cmd/rink-sim -seed 212 -keys -kinds %s)", res.Violation, strings.Join(cfg.Kinds, ","))
	}
}
