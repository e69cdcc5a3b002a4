package core

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestKeeperSteps drives the lease keeper's state machine alone: renewals
// every third of the TTL, the deadline from a renewal's send time, a
// failed renewal retried soon, and a fence when the deadline passes, the
// lease is gone, or the host slept past both.
func TestKeeperSteps(t *testing.T) {
	const ttl = 3 * time.Second
	s := int64(time.Second)
	k := NewKeeper(ttl, 0, DeadlineAfter(0, 3, ttl))
	if why, renew, wake := k.Next(0); why != "" || renew || wake != s {
		t.Fatalf("at 0: %q %v %v", why, renew, wake)
	}
	if _, renew, by := k.Next(s); !renew || by != k.Deadline {
		t.Fatalf("a third of the TTL in: renew %v, answer by %v; want a renewal answered by the deadline %v", renew, time.Duration(by), time.Duration(k.Deadline))
	}
	// Granted 3 s at 1 s: trusted until 4 s less the margin.
	if why := k.Renewed(3, nil, s+int64(10*time.Millisecond)); why != "" || k.Deadline != 4*s-int64(ttl/8) {
		t.Fatalf("renewed: %q, deadline %v", why, time.Duration(k.Deadline))
	}
	// A failure is retried within 200 ms; a deadline passed fences.
	k.Next(2 * s)
	if why := k.Renewed(0, errors.New("unavailable"), 2*s); why != "" || k.tickAt != 2*s+int64(200*time.Millisecond) {
		t.Fatalf("failed renewal: %q, next at %v", why, time.Duration(k.tickAt))
	}
	// A renewal that fails at the deadline fences; so does the deadline
	// passing with no tick due.
	k.Next(k.tickAt)
	if why := k.Renewed(0, errors.New("timeout"), k.Deadline); why != FenceLate {
		t.Fatalf("failed at the deadline: %q", why)
	}
	if why, _, _ := (&Keeper{Deadline: 5, tickAt: 9}).Next(6); why != FenceLate {
		t.Fatalf("past the deadline: %q", why)
	}
	k.Next(k.tickAt)
	if why := k.Renewed(0, rpctypes.ErrLeaseNotFound, k.tickAt); why != FenceExpired {
		t.Fatalf("lease not found: %q", why)
	}
	// Asleep past both the tick and the deadline.
	k = NewKeeper(ttl, 0, DeadlineAfter(0, 3, ttl))
	if why, _, _ := k.Next(10 * s); why != FenceSuspended {
		t.Fatalf("after a suspend: %q", why)
	}
}
