// Command worker is a rink member for fault-injection runs: it awaits a set
// of roles and records, in its own log file, every acquisition (fsynced
// before it acts), every action it takes while holding a role (it checks the
// role context first), and every release. internal/chaos checks the logs of
// all members together.
//
//	go run ./internal/chaos/worker -endpoints 127.0.0.1:2379 -name w1 -log /tmp/w1.log
//
// SIGTERM (or Ctrl-C) shuts it down gracefully; kill -9 is a crash.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/chaos"
)

type config struct {
	endpoints string
	rink      string
	name      string
	roles     int
	ttl       time.Duration
	delay     time.Duration
	every     time.Duration
	log       string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	flag.StringVar(&cfg.rink, "rink", "chaos", "rink name")
	flag.StringVar(&cfg.name, "name", "", "member name (required)")
	flag.IntVar(&cfg.roles, "roles", 256, "partition roles partition:0 .. partition:N-1, plus leader")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL")
	flag.DurationVar(&cfg.delay, "delay", time.Second, "rebalance delay")
	flag.DurationVar(&cfg.every, "every", 50*time.Millisecond, "how often to act on each held role")
	flag.StringVar(&cfg.log, "log", "", "log file to append records to (required)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run is the member's life: join, hold roles and record, until ctx ends.
func run(ctx context.Context, cfg config) error {
	if cfg.name == "" || cfg.log == "" || cfg.roles < 0 || cfg.every <= 0 {
		return fmt.Errorf("-name and -log are required; -roles >= 0; -every > 0")
	}
	log, err := chaos.Create(cfg.log)
	if err != nil {
		return err // e.g. the log directory cannot be written
	}
	defer log.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cfg.endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	r, err := rink.New(cli, cfg.rink, rink.WithMemberName(cfg.name), rink.WithSessionTTL(cfg.ttl), rink.WithRebalanceDelay(cfg.delay))
	if err != nil {
		return err
	}
	roles := []string{"leader"}
	for i := 0; i < cfg.roles; i++ {
		roles = append(roles, fmt.Sprint("partition:", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(roles))
	for _, role := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hold(r, log, cfg, role); err != nil {
				errs <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	case <-r.Done(): // the client was closed under us
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ttl)
	defer cancel()
	serr := r.Shutdown(sctx)
	wg.Wait()
	return errors.Join(err, serr)
}

// hold runs one role: await it, record the acquisition durably, act while
// the role context says it is held, record the release.
func hold(r *rink.Rink, log *chaos.Log, cfg config, role string) error {
	for {
		ctx := r.AwaitRole(role)
		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
			return nil
		}
		token, _ := rink.Token(ctx)
		if err := log.Write(cfg.name, chaos.Acquire, role, token); err != nil {
			return err
		}
		t := time.NewTicker(cfg.every)
		for ctx.Err() == nil {
			select {
			case <-t.C:
				if ctx.Err() != nil { // checked right before acting
					continue
				}
				if err := log.Write(cfg.name, chaos.Act, role, token); err != nil {
					t.Stop()
					return err
				}
			case <-ctx.Done():
			}
		}
		t.Stop()
		if err := log.Write(cfg.name, chaos.Release, role, token); err != nil {
			return err
		}
	}
}
