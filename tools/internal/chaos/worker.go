package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rink-go/rink"
)

// WorkerConfig configures a member of a fault-injection run.
type WorkerConfig struct {
	Endpoints string
	Rink      string
	Name      string
	Roles     int
	TTL       time.Duration
	Delay     time.Duration
	Every     time.Duration
	Log       string
	// RetryJoin makes the worker call rink.New again (every 500 ms) when
	// it fails, until ctx ends, instead of exiting: in a storm etcd may be
	// unreachable, or the member's name still held by its predecessor.
	RetryJoin bool
	// Announce makes the worker print JoinedLine on its standard output
	// the moment rink.New returns, for a driver that acts on it.
	Announce bool
	// Verbose sends rink's own log (Info and above) to standard error,
	// each line stamped with CLOCK_MONOTONIC in seconds since Origin (the
	// driver's start), so that it lines up with the driver's operations.
	Verbose bool
	Origin  int64
	// Balance, if above zero, makes the member balance by load with this
	// tolerance (rink.WithImbalanceTolerance, load interval 500 ms, window
	// 2 s) and record a skewed load on every action (see roleWeight).
	Balance float64
	// Drain, if above zero, runs each role under rink.Run with
	// rink.WithDrainTimeout(Drain): a holding logs its release only after
	// a short wind-down once its context ends, and the heir must start
	// after it. Warmup, if above zero, sets rink.WithWarmup(Warmup) and
	// watches every role with a Handler whose Warm takes a moment.
	Drain, Warmup time.Duration
	// Replicas, if above 1, sets rink.WithReplicas(Replicas), and the
	// member records the roles it holds as a secondary (see
	// holdSecondary). Zone, if set, is its rink.WithZone.
	Replicas int
	Zone     string
	// Sidecar makes the member a rinkd.Server in this process and the
	// worker its app, an HTTP/JSON client that records what rinkd tells it
	// (see runSidecarWorker); SidecarStop (SidecarDrain or SidecarClose)
	// is how it stops when told to. Balance, Drain, Warmup and Replicas do
	// not apply.
	Sidecar     bool
	SidecarStop string
}

// roleWeight is the load a worker records per action on a role when
// balancing by load: partition:i weighs 64/(1+i%64), the rest 1.
func roleWeight(role string) float64 {
	var i int
	if _, err := fmt.Sscanf(role, "partition:%d", &i); err == nil && i >= 0 {
		return 64 / float64(1+i%64)
	}
	return 1
}

// JoinedLine is what a worker with Announce prints when rink.New returns.
const JoinedLine = "rink-chaos-worker: joined"

// RunWorker is a member's life: join, hold roles and record, until ctx ends.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if cfg.Name == "" || cfg.Log == "" || cfg.Roles < 0 || cfg.Every <= 0 {
		return fmt.Errorf("-name and -log are required; -roles >= 0; -every > 0")
	}
	log, err := Create(cfg.Log)
	if err != nil {
		return err // e.g. the log directory cannot be written
	}
	defer log.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cfg.Endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	if cfg.Sidecar {
		var logger *zap.Logger
		if cfg.Verbose {
			logger = verboseLogger(cfg)
		}
		return runSidecarWorker(ctx, cfg, log, cli, logger)
	}
	opts := []rink.Option{rink.WithMemberName(cfg.Name), rink.WithSessionTTL(cfg.TTL), rink.WithRebalanceDelay(cfg.Delay)}
	if cfg.Balance > 0 {
		opts = append(opts, rink.WithImbalanceTolerance(cfg.Balance), rink.WithLoadInterval(500*time.Millisecond), rink.WithLoadWindow(2*time.Second))
	} else {
		opts = append(opts, rink.WithImbalanceTolerance(0))
	}
	if cfg.Drain > 0 {
		opts = append(opts, rink.WithDrainTimeout(cfg.Drain))
	}
	if cfg.Warmup > 0 {
		opts = append(opts, rink.WithWarmup(cfg.Warmup))
	}
	if cfg.Replicas > 1 {
		opts = append(opts, rink.WithReplicas(cfg.Replicas))
	}
	if cfg.Zone != "" {
		opts = append(opts, rink.WithZone(cfg.Zone))
	}
	if cfg.Verbose {
		opts = append(opts, rink.WithLogger(verboseLogger(cfg)))
	}
	var r *rink.Rink
	for {
		r, err = rink.New(cli, cfg.Rink, opts...)
		if err == nil || !cfg.RetryJoin {
			break
		}
		fmt.Fprintf(os.Stderr, "worker %s: New: %v (trying again)\n", cfg.Name, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	if err := log.Write(cfg.Name, Joined, "-", 0); err != nil {
		return err
	}
	if cfg.Announce {
		fmt.Println(JoinedLine)
	}
	roles := []string{"leader"}
	for i := 0; i < cfg.Roles; i++ {
		roles = append(roles, fmt.Sprint("partition:", i))
	}
	secErr := make(chan error, 1) // a secondary holding's error, the first
	if cfg.Warmup > 0 || cfg.Replicas > 1 {
		h := rink.Handler{Assigned: func(context.Context, string) {}}
		if cfg.Warmup > 0 {
			h.Warm = warmUp
		}
		if cfg.Replicas > 1 {
			var n atomic.Int64 // the secondary holdings, numbered
			h.Secondary = func(ctx context.Context, role string) {
				if err := holdSecondary(ctx, log, cfg, role, n.Add(1)); err != nil {
					select {
					case secErr <- err:
					default: // the worker is stopping on an error already
					}
				}
			}
		}
		set, err := r.Watch(h, roles...)
		if err != nil {
			_ = r.Shutdown(context.Background())
			return err
		}
		defer set.Close() // (it waits for the Secondary calls)
	}
	holdFn := hold
	if cfg.Drain > 0 {
		holdFn = holdRun
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(roles))
	for _, role := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := holdFn(r, log, cfg, role); err != nil {
				errs <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	case err = <-secErr:
	case <-r.Done(): // the client was closed under us
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.TTL)
	defer cancel()
	serr := r.Shutdown(sctx)
	wg.Wait()
	return errors.Join(err, serr)
}

// verboseLogger logs Info and above to standard error, each line stamped
// with CLOCK_MONOTONIC in seconds since cfg.Origin.
func verboseLogger(cfg WorkerConfig) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = func(_ time.Time, e zapcore.PrimitiveArrayEncoder) { e.AppendString(secs(cfg.Origin, Now())) }
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.InfoLevel))
}

// warmUp is the workers' warm-up: a moment's work, or less if cancelled.
func warmUp(ctx context.Context, _ string) {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// holdRun runs one role under rink.Run: like hold, but the holding winds
// down for a moment after its context ends before it logs its release and
// returns, and a drain makes the heir wait for that.
func holdRun(r *rink.Rink, log *Log, cfg WorkerConfig, role string) error {
	err := r.Run(context.Background(), role, func(ctx context.Context) error {
		token, _ := rink.Token(ctx)
		if err := log.Write(cfg.Name, Acquire, role, token); err != nil {
			return err
		}
		if err := act(ctx, r, log, cfg, role, token); err != nil {
			return err
		}
		wind := time.NewTimer(10 * time.Millisecond)
		<-wind.C
		return log.Write(cfg.Name, Release, role, token)
	})
	if errors.Is(err, rink.ErrShutdown) {
		return nil
	}
	return err
}

// act acts on a held role every cfg.Every until ctx ends.
func act(ctx context.Context, r *rink.Rink, log *Log, cfg WorkerConfig, role string, token int64) error {
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-t.C:
			// Checked right before acting, under the log's lock.
			held, err := log.WriteHeld(ctx, cfg.Name, role, token)
			if err != nil {
				return err
			}
			if held && cfg.Balance > 0 {
				r.AddLoad(role, roleWeight(role))
			}
		case <-ctx.Done():
		}
	}
	return nil
}

// hold runs one role: await it, record the acquisition durably, act while
// the role context says it is held, record the release.
func hold(r *rink.Rink, log *Log, cfg WorkerConfig, role string) error {
	for {
		ctx := r.AwaitRole(role)
		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
			return nil
		}
		token, _ := rink.Token(ctx)
		if err := log.Write(cfg.Name, Acquire, role, token); err != nil {
			return err
		}
		if err := act(ctx, r, log, cfg, role, token); err != nil {
			return err
		}
		if err := log.Write(cfg.Name, Release, role, token); err != nil {
			return err
		}
	}
}

// holdSecondary is one holding of a role as a secondary, numbered n in
// this process: it records the acquisition (stamped now, after the
// holding began: Handler.Secondary is called once it has), acts every
// cfg.Every while the Handler.Secondary context says the holding lives
// (each action stamped right before that check; see
// Log.WriteHeldSecondary), and records the release once it ended.
func holdSecondary(ctx context.Context, log *Log, cfg WorkerConfig, role string, n int64) error {
	if err := log.Write(cfg.Name, AcquireSecondary, role, n); err != nil {
		return err
	}
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-t.C:
			if _, err := log.WriteHeldSecondary(ctx, cfg.Name, role, n); err != nil {
				return err
			}
		case <-ctx.Done():
		}
	}
	return log.Write(cfg.Name, ReleaseSecondary, role, n)
}
