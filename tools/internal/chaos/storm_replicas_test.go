package chaos

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// stormReplicaOps are the operations TestChaosStormReplicas draws: those
// on members, where replicas and zones make a difference, so that a short
// storm deals each of them, the loss of a zone included.
var stormReplicaOps = []string{
	"zone-loss", "kill9", "leave-member", "leave-leader", "join", "join-reused",
	"sigstop", "partition", "same-name-replace", "member-key-delete-cut", "etcd-kill", "map-rewrite",
}

// TestChaosStormReplicas is a short seeded storm in the replicas-and-zones
// mode (see Config.Replicas): two replicas per slot, members in three
// zones, and among the operations the loss of a whole zone. It fails on
// any safety violation (the primaries' checks, and more than two members
// acting on a role at once), on any role not held again within StormBound
// of the heal, and on any role without its secondary by then.
// RINK_CHAOS_STORM_ALL=1 draws every kind of operation, the restore
// included.
func TestChaosStormReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos storm in -short mode")
	}
	self, dir := runDir(t)
	var out strings.Builder
	ops, all := stormReplicaOps, os.Getenv("RINK_CHAOS_STORM_ALL") != ""
	if all {
		ops = StormOps
	}
	cfg := Config{Self: self, Dir: dir, Members: 5, Roles: 64, Duration: 15 * time.Second, Seed: 5,
		TTL: 2 * time.Second, Delay: time.Second, Out: &out, Ops: ops, Restore: all,
		Drain: time.Second, Warmup: time.Second, Replicas: 2, Zones: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Storm(ctx, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Text())
	if s.Report.Acquisitions == 0 || s.Holders.SecondaryAcquisitions == 0 || s.Holders.SecondaryActions == 0 || len(s.Ops) < 10 {
		t.Fatalf("too little happened: %d acquisitions, %d secondary acquisitions, %d secondary actions, %d operations",
			s.Report.Acquisitions, s.Holders.SecondaryAcquisitions, s.Holders.SecondaryActions, len(s.Ops))
	}
	if !all && !slices.ContainsFunc(s.Ops, func(f Fault) bool { return f.Kind == "zone-loss" }) {
		t.Fatal("no zone was lost")
	}
	if vs := s.Violations(); len(vs) > 0 {
		t.Fatalf("%d violations (%d of safety, %d of liveness), first: %v", len(vs), s.SafetyViolations(), s.LivenessViolations(), vs[0])
	}
}
