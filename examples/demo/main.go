// Command demo plays a short story on an embedded etcd: members join a rink,
// a newcomer waits and is promoted during a rolling replacement, a member
// crashes, and the rink scales out after the rebalance delay. A live view
// shows every member's index, the leader, the roles each holds, and a log
// of handovers with their gap and fencing token. Each member runs package
// holder, the code to copy into a service (see README.md).
//
//	go run ./examples/demo            # live view
//	go run ./examples/demo -plain     # one line per event, for logs and CI
//
// It exits by itself when the story ends; Ctrl-C shuts it down cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	cfg := config{}
	flag.IntVar(&cfg.members, "members", 4, "members at the start (at least 2)")
	flag.IntVar(&cfg.roles, "roles", 32, "roles (partition:0 .. partition:N-1)")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL (whole seconds, at least 2s)")
	flag.DurationVar(&cfg.delay, "delay", 3*time.Second, "rebalance delay")
	flag.BoolVar(&cfg.plain, "plain", false, "print one line per event instead of redrawing the screen")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "interrupted: shut down cleanly")
			return
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type config struct {
	members int
	roles   int
	ttl     time.Duration
	delay   time.Duration
	plain   bool
}

func (c config) validate() error {
	switch {
	case c.members < 2:
		return fmt.Errorf("-members %d: want at least 2", c.members)
	case c.roles < 1:
		return fmt.Errorf("-roles %d: want at least 1", c.roles)
	case c.ttl < 2*time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("-ttl %v: want whole seconds, at least 2s", c.ttl)
	case c.delay < 0:
		return fmt.Errorf("-delay %v: want >= 0", c.delay)
	}
	return nil
}

// run plays the story, writing the view to out.
func run(ctx context.Context, out io.Writer, cfg config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	d, err := newDemo(out, cfg)
	if err != nil {
		return err
	}
	defer d.close()

	n := cfg.members
	steps := []struct {
		title string
		act   func() error
	}{
		{fmt.Sprintf("%d members join: the first is ranked at once, the others wait %v and are then ranked together", n, cfg.delay), func() error {
			for i := 0; i < n; i++ {
				if err := d.join(ctx); err != nil {
					return err
				}
			}
			return d.until(ctx, "all ranked and every role held", d.settled(n))
		}},
		{"rolling replacement: a newcomer joins and waits; then m1 leaves and the newcomer takes its index and roles at once", func() error {
			if err := d.join(ctx); err != nil {
				return err
			}
			if err := d.pause(ctx, time.Second); err != nil {
				return err
			}
			d.leave("m1")
			return d.until(ctx, "newcomer ranked in m1's place", d.settled(n))
		}},
		{fmt.Sprintf("crash: m2 dies without a goodbye; its roles move when its lease expires (TTL %v)", cfg.ttl), func() error {
			d.crash("m2")
			return d.until(ctx, "m2's roles held by the survivors", d.settled(n-1))
		}},
		{fmt.Sprintf("scale-out: a new member joins; after the %v rebalance delay it takes its share from the others", cfg.delay), func() error {
			if err := d.join(ctx); err != nil {
				return err
			}
			return d.until(ctx, "new member ranked with its share", d.settled(n))
		}},
	}
	for i, s := range steps {
		d.step(fmt.Sprintf("%d/%d %s", i+1, len(steps), s.title))
		if err := s.act(); err != nil {
			return err
		}
		if err := d.pause(ctx, time.Second); err != nil {
			return err
		}
	}
	d.step("the end: every member leaves")
	d.shutdownAll()
	d.summary()
	return nil
}
