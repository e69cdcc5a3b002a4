package rink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// simulateSuspend replaces the fence clock for the rest of the test and
// returns a function that moves it forward by d, as CLOCK_BOOTTIME moves
// over a host suspend while Go's monotonic clock and its timers stand
// still. Call it before starting the test's members: its cleanup must run
// after theirs.
func simulateSuspend(t *testing.T) (suspend func(d time.Duration)) {
	t.Helper()
	var skew atomic.Int64
	real := fenceClock
	fenceClock = func() int64 { return real() + skew.Load() }
	t.Cleanup(func() { fenceClock = real })
	return func(d time.Duration) { skew.Add(int64(d)) }
}

// TestHostSuspend: after a host suspend longer than the TTL the server has
// expired the lease and handed the roles on. A held role context must say
// so at once (its Err), and the keeper must fence on its next wakeup,
// although renewals still succeed here (the simulated suspend does not stop
// etcd's lease clock) and Go's timers did not see the time pass.
func TestHostSuspend(t *testing.T) {
	const ttl = 2 * time.Second
	t.Run("Err", func(t *testing.T) {
		suspend := simulateSuspend(t)
		h := &history{}
		r := join(t, newClient(t), rinkName(t), WithMemberName("a"), WithSessionTTL(ttl), h.hook())
		ctx, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader")
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := Token(ctx)
		suspend(ttl + time.Second)
		if err := ctx.Err(); err == nil {
			t.Fatal("role context trusted after a suspend longer than the TTL")
		}
		if !errors.Is(context.Cause(ctx), ErrFenced) {
			t.Fatalf("cause = %v, want ErrFenced", context.Cause(ctx))
		}
		// The member rejoins and holds the role again, under a new token.
		again, err := r.AwaitRoleContext(ctxTimeout(t, 15*time.Second), "leader")
		if err != nil {
			t.Fatal(err)
		}
		if tok2, _ := Token(again); tok2 <= tok {
			t.Fatalf("token went from %d to %d", tok, tok2)
		}
		h.check(t)
	})
	t.Run("keeper", func(t *testing.T) {
		suspend := simulateSuspend(t)
		r := join(t, newClient(t), rinkName(t), WithMemberName("a"), WithSessionTTL(ttl))
		ctx, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader")
		if err != nil {
			t.Fatal(err)
		}
		suspend(ttl + time.Second)
		// Nobody calls Err: the keeper wakes for its next renewal (a third
		// of the TTL) and must see that the deadline has passed.
		select {
		case <-ctx.Done():
		case <-time.After(ttl):
			t.Fatal("keeper did not fence after a suspend longer than the TTL")
		}
		if !errors.Is(context.Cause(ctx), ErrFenced) {
			t.Fatalf("cause = %v, want ErrFenced", context.Cause(ctx))
		}
	})
}

// setDeadline sets the fence deadline to t, a time on Go's clock.
func (inc *incarnation) setDeadline(t time.Time) {
	inc.deadline.Store(fenceClock() + int64(time.Until(t)))
}

// A join retries what an overloaded etcd answers, and nothing else.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrTooManyRequests, true},
		{fmt.Errorf("rink: granting lease: %w", rpctypes.ErrTooManyRequests), true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrNoLeader, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{rpctypes.ErrLeaseNotFound, false},
		{rpctypes.ErrPermissionDenied, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("other"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
