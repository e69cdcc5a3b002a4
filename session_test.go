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

// A join whose transaction failed unanswered may have created the member
// key; if the revoke failed too, the next attempt finds its own key in the
// name's place. It takes it away and joins, rather than wait a TTL for it
// and blame a live member (ErrMemberExists).
func TestJoinTakesBackItsOwnKey(t *testing.T) {
	cli := newClient(t)
	r := &Rink{opts: options{member: "a", ttl: 2 * time.Second}, log: zap.NewNop(), keys: newKeys(rinkName(t)), cli: cli}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer func() { r.cancel(); r.wg.Wait() }()
	orphan := func() clientv3.LeaseID {
		t.Helper()
		g, err := cli.Grant(ctxTimeout(t, 5*time.Second), 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctxTimeout(t, 5*time.Second), r.keys.Member("a"), wire.MemberValue(1), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	// Another process's key (not a lease this member tried): it waits.
	other := orphan()
	if _, err := r.joinAfter(ctxTimeout(t, 500*time.Millisecond), nil); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("join with the name taken: %v, want ErrMemberExists", err)
	}
	if _, err := cli.Revoke(ctxTimeout(t, 5*time.Second), other); err != nil {
		t.Fatal(err)
	}
	// Its own: it takes it away at once.
	own := orphan()
	inc, err := r.joinAfter(ctxTimeout(t, 5*time.Second), []clientv3.LeaseID{own})
	if err != nil {
		t.Fatalf("join after its own lost attempt: %v", err)
	}
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), r.keys.Member("a"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != inc.Lease || inc.Lease == int64(own) {
		t.Fatalf("member key %v (err %v), want it on the new lease %x", resp.Kvs, err, inc.Lease)
	}
	if ttl, err := cli.TimeToLive(ctxTimeout(t, 5*time.Second), own); err != nil || ttl.TTL != -1 {
		t.Fatalf("the lost attempt's lease: %v %v, want it revoked", ttl, err)
	}
}
