// Command replicated runs a primary/secondary service on a rink with
// replicas per slot and zones: each tenant's page counters are a role; the
// role's primary applies the writes, fenced with its token, and its
// secondaries (in other zones) follow them into warm copies. Each member
// runs package counters, the code to copy into a service (see README.md).
//
//	go run ./examples/replicated
//	go run ./examples/replicated -members 9 -zones 3 -replicas 3 -tenants 32
//
// While a writer adds page views, one member crashes (its etcd client
// closes, as with kill -9: its lease expires) and then a whole zone is
// lost (every member in it crashes at once). Each time, the story prints
// who took each lost tenant over and how many updates its copy already
// held, and checks that no tenant ever had two primaries at once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rink-go/rink"
)

type config struct {
	endpoints string
	members   int
	zones     int
	replicas  int
	tenants   int
	rate      int
	ttl       time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.members, "members", 6, "members, spread over the zones in turn (at least 2 per zone)")
	flag.IntVar(&cfg.zones, "zones", 3, "zones: zone-a, zone-b, … (at least 2)")
	flag.IntVar(&cfg.replicas, "replicas", 2, "replicas per slot: a primary and replicas-1 secondaries (2 to -zones)")
	flag.IntVar(&cfg.tenants, "tenants", 16, "tenants, one role each")
	flag.IntVar(&cfg.rate, "rate", 200, "writes per second")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL: how soon a crashed member's tenants move (in production: 10s)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "replicated:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.zones < 2 || c.zones > 26:
		return fmt.Errorf("-zones %d: want 2 to 26", c.zones)
	case c.members < 2*c.zones:
		return fmt.Errorf("-members %d: want at least 2 per zone (%d)", c.members, 2*c.zones)
	case c.replicas < 2 || c.replicas > c.zones || c.replicas > rink.MaxReplicas:
		return fmt.Errorf("-replicas %d: want 2 to -zones (%d), at most %d", c.replicas, c.zones, rink.MaxReplicas)
	case c.tenants < 1 || c.tenants > 1000:
		return fmt.Errorf("-tenants %d: want 1 to 1000", c.tenants)
	case c.rate < 10 || c.rate > 10000:
		return fmt.Errorf("-rate %d: want 10 to 10000", c.rate)
	case c.ttl < 2*time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("-ttl %v: want whole seconds, at least 2s", c.ttl)
	}
	return nil
}
