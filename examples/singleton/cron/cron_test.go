package cron

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

// stoppedCtx is a role context as a process sees it when it resumes after
// being stopped (SIGSTOP, a long stall) past its lease's fence deadline: the
// role is lost, and the role context's Err says so, but the goroutine that
// will close Done has not run yet.
type stoppedCtx struct {
	context.Context
	stopped atomic.Bool
}

func (c *stoppedCtx) Err() error {
	if c.stopped.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

// TestNoActAfterStop stops the process (as seen by the role context) right
// after one run of the job, with ticks pending: the job must not run again.
// (The old job acted on every tick and looked only at Done: it ran on.)
func TestNoActAfterStop(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	r, err := rink.New(cli, "stop", rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	roleCtx, err := r.AwaitRoleContext(context.Background(), Role)
	if err != nil {
		t.Fatal(err)
	}
	ctx := &stoppedCtx{Context: roleCtx}

	var acts, late atomic.Int32
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		lead(ctx, Job{Every: time.Millisecond, Act: func(actx context.Context) error {
			if actx.Err() != nil {
				late.Add(1)
				return nil
			}
			if acts.Add(1) == 3 {
				ctx.stopped.Store(true) // the process stops here, and resumes past its deadline
				time.Sleep(5 * time.Millisecond)
			}
			return nil
		}}, zap.NewNop())
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		_ = r.Shutdown(context.Background()) // ends the role for real, so that lead returns
		<-returned
		t.Fatalf("the job ran on for 10s with a lost role (%d runs after the loss)", late.Load())
	}
	if n := late.Load(); n > 0 {
		t.Fatalf("the job ran %d times after its role context reported the role lost", n)
	}
	if n := acts.Load(); n != 3 {
		t.Fatalf("the job ran %d times before the stop, want 3", n)
	}
}

// TestNoActAfterLoss makes the member lose the role (its lease is revoked:
// a fence) while the job is running, with ticks pending when it returns; it
// must not run again under that role context, and must run again once the
// member holds the role anew. (The old job's select could pick the pending
// tick over the ended context, half of the time.)
func TestNoActAfterLoss(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()

	const rounds = 16
	var late atomic.Int32
	acting := make(chan context.Context)
	release := make(chan struct{})
	stop := make(chan struct{})
	var last int64
	act := func(ctx context.Context) error {
		if ctx.Err() != nil {
			late.Add(1)
			return nil
		}
		token, _ := rink.Token(ctx)
		if token == last {
			return nil
		}
		last = token // the first run under this holding: let the test end it
		select {
		case acting <- ctx:
		case <-stop:
			return nil
		}
		select {
		case <-release:
		case <-stop:
		}
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() {
		returned <- Run(ctx, cli, "loss", Job{Every: time.Millisecond, Act: act},
			rink.WithMemberName("a"), rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
	}()
	defer func() {
		close(stop)
		cancel()
		if err := <-returned; err != nil {
			t.Error(err)
		}
	}()

	for round := 0; round < rounds; round++ {
		var roleCtx context.Context
		select {
		case roleCtx = <-acting:
		case err := <-returned:
			t.Fatalf("round %d: Run returned: %v", round, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the job did not run within 30s", round)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := extest.RevokeMember(rctx, cli, "loss", "a")
		rcancel()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-roleCtx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the role did not end within 10s of the revocation", round)
		}
		if cause := context.Cause(roleCtx); !errors.Is(cause, rink.ErrFenced) {
			t.Fatalf("round %d: cause %v, want %v", round, cause, rink.ErrFenced)
		}
		time.Sleep(5 * time.Millisecond) // a tick is pending when the job returns
		release <- struct{}{}
	}
	if n := late.Load(); n > 0 {
		t.Fatalf("the job ran %d times with its role context already ended, over %d losses", n, rounds)
	}
}

func TestBadJob(t *testing.T) {
	for _, job := range []Job{
		{Every: 0, Act: func(context.Context) error { return nil }},
		{Every: time.Second},
	} {
		if err := Run(context.Background(), nil, "x", job); err == nil {
			t.Errorf("%+v accepted", job)
		}
	}
}
