package rink

import (
	"testing"

	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
)

// Helpers of internal/plan's tests that this package's tests use too
// (a test package cannot import another's test files).

// planReplicated plans a first map of members names (zones by index, if
// given) with k replicas per slot over slots slots.
func planReplicated(k, slots int, names []string, zones map[string]string) wire.Map {
	cur := wire.Map{Schema: wire.SchemaReplicas, Slots: slots}
	ready := map[string]bool{}
	for _, n := range names {
		ready[n] = true
	}
	next := plan.PlanMap(cur, plan.Input{Live: names, Ready: ready, Replicas: k, Zones: zones})
	next.Schema, next.Version = wire.SchemaReplicas, 1
	return next
}

// checkReplicated fails t unless m is a usable map of k replicas per slot
// whose every slot names min(k, members) distinct members.
func checkReplicated(t testing.TB, m wire.Map, k int) {
	t.Helper()
	if err := m.UsableBy(wire.Geometry{Slots: m.Slots, Replicas: k}); err != nil {
		t.Fatalf("planned map unusable: %v", err)
	}
	for s := range m.Slots {
		if names := m.ReplicaNames(s); len(names) != min(k, len(m.Members)) {
			t.Fatalf("slot %d: replicas %v, want %d", s, names, min(k, len(m.Members)))
		}
	}
}

// ownersMoved counts the slots whose owner differs between a and b.
func ownersMoved(a, b wire.Map) (n int) {
	for s := range a.Slots {
		if a.Owner(s) != b.Owner(s) {
			n++
		}
	}
	return n
}
