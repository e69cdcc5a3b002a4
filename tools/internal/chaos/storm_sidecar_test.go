package chaos

import (
	"context"
	"strings"
	"testing"
	"time"
)

// stormSidecarOps are the operations TestChaosStormSidecar draws: those
// on the members (each a rinkd with its app), their etcd connections and
// etcd itself.
var stormSidecarOps = []string{
	"kill9", "leave-member", "leave-leader", "join", "join-reused", "sigstop", "partition",
	"cut-all", "etcd-kill", "same-name-replace", "member-key-delete-cut", "app-deaf", "app-deaf",
}

// TestChaosStormSidecar is a short seeded storm whose members are rinkd
// sidecars with their apps (Config.Sidecar): the apps record what rinkd
// tells them, and the checks are theirs. It fails on any safety
// violation, and on any role not held again within StormBound of the heal.
func TestChaosStormSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos storm in -short mode")
	}
	self, dir := runDir(t)
	var out strings.Builder
	cfg := Config{Self: self, Dir: dir, Members: 4, Roles: 16, Duration: 12 * time.Second, Seed: 3,
		TTL: 2 * time.Second, Delay: time.Second, Out: &out, Ops: stormSidecarOps, Sidecar: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Storm(ctx, cfg)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Text())
	if s.Report.Acquisitions == 0 || s.Report.Actions == 0 || len(s.Ops) < 5 {
		t.Fatalf("too little happened: %d acquisitions, %d actions, %d operations", s.Report.Acquisitions, s.Report.Actions, len(s.Ops))
	}
	if vs := s.Violations(); len(vs) > 0 {
		t.Fatalf("%d violations (%d of safety, %d of liveness), first: %v", len(vs), s.SafetyViolations(), s.LivenessViolations(), vs[0])
	}
}
