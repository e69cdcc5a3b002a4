// Command rink-chaos runs a seeded fault-injection run against rink: a
// 3-node etcd cluster and 5 rink members, each in a process of its own, the
// members reaching etcd through proxies; then, at seeded times, graceful
// stops, kill -9 of a member, kill -9 of the etcd leader and its restart
// with its data, partitions and delays between a member and etcd, rolling
// replacements, and SIGSTOP of a member for longer than its TTL. At the end
// it checks every member's log for two members acting on one role, and
// prints a report.
//
//	go run ./cmd/rink-chaos -duration 10m -seed 1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rink-go/rink/internal/chaos"
)

func main() {
	chaos.MaybeChild() // children of the run are this binary, re-executed
	var cfg chaos.Config
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to inject faults")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule")
	flag.IntVar(&cfg.Members, "members", 5, "members kept alive")
	flag.IntVar(&cfg.Roles, "roles", 256, "partition roles (plus leader)")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "session TTL")
	flag.DurationVar(&cfg.Delay, "delay", time.Second, "rebalance delay")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for etcd data and member logs (default: a new temporary one)")
	flag.Parse()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "rink-chaos:", err)
		os.Exit(1)
	}
}

func run(cfg chaos.Config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Self, cfg.Out = self, os.Stdout
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "rink-chaos-"); err != nil {
			return err
		}
	}
	fmt.Printf("rink-chaos: seed %d, %v, logs in %s\n", cfg.Seed, cfg.Duration, cfg.Dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := chaos.Drive(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(s.Text())
	fmt.Printf("unheld-time bound: %v\n", chaos.Bound(cfg))
	if len(s.Violations) > 0 {
		for _, v := range s.Violations {
			fmt.Println("VIOLATION", v)
		}
		return fmt.Errorf("%d violations", len(s.Violations))
	}
	for k, d := range s.MaxUnheld {
		if d > chaos.Bound(cfg) {
			return fmt.Errorf("after %s a role was unheld for %v (bound %v)", k, d, chaos.Bound(cfg))
		}
	}
	return nil
}
