// Package cron runs a job on exactly one replica of a service: every replica
// calls Run, the replica that holds the rink's "leader" role runs the job at
// every tick, and when it loses the role another replica takes over. It is
// the part of the singleton example to copy into a service, and imports only
// rink, the etcd client, zap and the standard library.
package cron

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// Role is the role whose holder runs the job.
const Role = "leader"

// Job is what to run, and how often.
type Job struct {
	// Every is the time between two runs of Act.
	Every time.Duration
	// Act runs the job once. Its context is the leader role's context:
	// pass it to every call Act makes, so that they stop when the role is
	// lost, and fence writes with rink.Token(ctx). Act is called only
	// while ctx.Err() is nil, checked just before. Its error is logged; the
	// job runs again at the next tick.
	Act func(ctx context.Context) error
	// Log receives a line when this member starts and stops leading, and
	// Act's errors (default: none).
	Log *zap.Logger
}

// Run joins the rink called name on cli, with opts, and runs the job while
// this member holds Role, until ctx ends. It then leaves the rink, which
// cancels the role's context and hands the role to another replica at once,
// and returns Shutdown's error. It also returns when the rink stops by
// itself (its etcd client was closed).
func Run(ctx context.Context, cli *clientv3.Client, name string, job Job, opts ...rink.Option) error {
	if job.Every <= 0 {
		return fmt.Errorf("cron: interval %v: want > 0", job.Every)
	}
	if job.Act == nil {
		return errors.New("cron: nil Act")
	}
	log := job.Log
	if log == nil {
		log = zap.NewNop()
	}
	r, err := rink.New(cli, name, opts...)
	if err != nil {
		return err
	}
	log = log.With(zap.String("member", r.Member()))
	log.Info("joined; waiting for the leader role")

	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			roleCtx := r.AwaitRole(Role)
			if errors.Is(context.Cause(roleCtx), rink.ErrShutdown) {
				return
			}
			lead(roleCtx, job, log)
		}
	}()

	select {
	case <-ctx.Done():
	case <-r.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = r.Shutdown(sctx)
	<-done
	log.Info("left")
	return err
}

// lead runs the job at every tick until the role's context ctx ends.
func lead(ctx context.Context, job Job, log *zap.Logger) {
	token, _ := rink.Token(ctx)
	log.Info("leading", zap.Int64("token", token))
	t := time.NewTicker(job.Every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		// Check the role right before acting. A tick and the end of the
		// role can be ready together, and select picks either. And after
		// the process was stopped (SIGSTOP, a long stall) past its lease,
		// the role is already lost while ctx.Done is not closed yet: the
		// role context's Err checks the fence deadline on the spot.
		if ctx.Err() != nil {
			log.Info("stopped leading", zap.Int64("token", token), zap.NamedError("cause", context.Cause(ctx)))
			return
		}
		if err := job.Act(ctx); err != nil {
			log.Warn("job failed", zap.Error(err))
		}
	}
}
