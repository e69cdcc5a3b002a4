// Command partitions is a partitioned task queue on etcd, done safely.
// Producers put tasks under 256 partition prefixes; workers are rink members
// that own "partition:N" roles and process the tasks of the partitions they
// hold, deleting each task in a transaction that also checks the
// partition's fencing token. A worker that lost a partition — paused,
// partitioned from etcd, or merely slow — can therefore never process a task
// its successor processes: every task is processed exactly once. Each
// worker runs package worker, the code to copy into a service (see
// README.md).
//
//	go run ./examples/partitions
//	go run ./examples/partitions -workers 4 -tasks 5000
//
// While tasks flow, one worker is replaced (rolling deploy) and another
// crashes; the report counts how often each task was processed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type config struct {
	endpoints  string
	workers    int
	partitions int
	tasks      int
	ttl        time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.workers, "workers", 3, "workers (at least 2)")
	flag.IntVar(&cfg.partitions, "partitions", 256, "partitions")
	flag.IntVar(&cfg.tasks, "tasks", 2000, "tasks to produce")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL: how soon a crashed worker's partitions move")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "partitions:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.workers < 2:
		return fmt.Errorf("-workers %d: want at least 2", c.workers)
	case c.partitions < 1 || c.partitions > 100000:
		return fmt.Errorf("-partitions %d: want 1 to 100000", c.partitions)
	case c.tasks < 1:
		return fmt.Errorf("-tasks %d: want at least 1", c.tasks)
	case c.ttl < 2*time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("-ttl %v: want whole seconds, at least 2s", c.ttl)
	}
	return nil
}
