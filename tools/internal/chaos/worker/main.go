// Command worker is a rink member for fault-injection runs: it awaits a set
// of roles and records, in its own log file, every acquisition (fsynced
// before it acts), every action it takes while holding a role (it checks the
// role context first), and every release; with -replicas above 1, the same
// for the roles it holds as a secondary. internal/chaos checks the logs of
// all members together.
//
//	go run ./tools/internal/chaos/worker -endpoints 127.0.0.1:2379 -name w1 -log /tmp/w1.log
//
// SIGTERM (or Ctrl-C) shuts it down gracefully; kill -9 is a crash.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rink-go/rink/tools/internal/chaos"
)

func main() {
	var cfg chaos.WorkerConfig
	flag.StringVar(&cfg.Endpoints, "endpoints", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	flag.StringVar(&cfg.Rink, "rink", "chaos", "rink name")
	flag.StringVar(&cfg.Name, "name", "", "member name (required)")
	flag.IntVar(&cfg.Roles, "roles", 256, "partition roles partition:0 .. partition:N-1, plus leader")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "session TTL")
	flag.DurationVar(&cfg.Delay, "delay", time.Second, "rebalance delay")
	flag.DurationVar(&cfg.Every, "every", 50*time.Millisecond, "how often to act on each held role")
	flag.StringVar(&cfg.Log, "log", "", "log file to append records to (required)")
	flag.DurationVar(&cfg.Drain, "drain", 0, "run roles under rink.Run with this drain timeout (0: AwaitRole loops)")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "warm up planned moves for at most this long (0: none)")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "replicas per slot (rink.WithReplicas); above 1 the worker also records the roles it holds as a secondary")
	flag.StringVar(&cfg.Zone, "zone", "", "this member's zone (rink.WithZone; empty: none)")
	flag.Float64Var(&cfg.Balance, "balance", 0, "balance by load with this tolerance, recording a skewed load (0: by count)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := chaos.RunWorker(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
