package rink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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

// A name taken by another process's key: the join waits for it to go,
// and fails with ErrMemberExists when its time is up. (A key of this
// member's own, left by an attempt whose answer was lost, is taken away at
// once: see internal/core's TestJoinerTakesBackItsOwnKey.)
func TestJoinWaitsForTheName(t *testing.T) {
	cli := newClient(t)
	r := &Rink{opts: options{member: "a", ttl: 2 * time.Second}, log: zap.NewNop(), keys: newKeys(rinkName(t)), cli: cli}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer func() { r.cancel(); r.wg.Wait() }()
	g, err := cli.Grant(ctxTimeout(t, 5*time.Second), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), r.keys.Member("a"), wire.MemberValue(1), clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.join(ctxTimeout(t, 500*time.Millisecond)); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("join with the name taken: %v, want ErrMemberExists", err)
	}
	// Once the key goes, the waiting join goes on.
	done := make(chan error, 1)
	go func() {
		inc, err := r.join(ctxTimeout(t, 10*time.Second))
		if err == nil && inc.Lease == int64(g.ID) {
			err = errors.New("joined on the other process's lease")
		}
		done <- err
	}()
	if _, err := cli.Revoke(ctxTimeout(t, 5*time.Second), g.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("join once the name's key went: %v", err)
	}
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), r.keys.Member("a"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == int64(g.ID) {
		t.Fatalf("member key %v (err %v), want it on a new lease", resp.Kvs, err)
	}
}
