// Command rink-chaos runs a seeded fault-injection run against rink: a
// 3-node etcd cluster and 5 rink members, each in a process of its own, the
// members reaching etcd through proxies.
//
// In the default mode, rounds, it injects at seeded times graceful stops,
// kill -9 of a member, kill -9 of the etcd leader and its restart with its
// data, partitions and delays between a member and etcd, rolling
// replacements, and SIGSTOP of a member for longer than its TTL, waiting
// for the rink to settle after each. At the end it checks every member's
// log for two members acting on one role, and prints a report.
//
// In storm mode it never waits: operations drawn at random (joins, leaves,
// kills, partitions, pauses, etcd node loss, every member cut off, a
// member's key deleted while it is cut off, a replacement under the same
// name, and an operator's hand on the rink's keys) follow each other with
// gaps of 0 to one TTL; then every fault is undone, and every role must be
// held again, by the members' own logs, within TTL + rebalance delay +
// slack. With -epoch, it stops for such a heal and check after every epoch.
// With -replicas K each slot has K replicas: the members also record the
// roles they hold as secondaries, the run fails when more than K members
// act on a role at once, and after each heal every role must have its K-1
// secondaries again; -zones Z spreads the members over Z zones and adds
// the loss of a whole zone (every member of it killed at once, the zone
// back later with as many members). -keys adds an operator's deletions of
// live members' keys: a member's election key (with its member key, at
// times, and the member, the leader at times, cut off first), any set of
// its member, election, ack and load keys, and the tail. -sidecar makes
// every member a rinkd sidecar with its app, an HTTP/JSON client, in its
// process: the app records what rinkd tells it, and the checks are at the
// app's side; it adds app-deaf, an app that stops reading rinkd's await
// streams for a while and acts on by its grants' validity alone.
//
//	go run ./tools/cmd/rink-chaos -duration 10m -seed 1
//	go run ./tools/cmd/rink-chaos -mode storm -duration 10m -seed 1 [-epoch 1m] [-restore]
//	go run ./tools/cmd/rink-chaos -mode storm -duration 10m -seed 1 -replicas 2 -zones 3
//	go run ./tools/cmd/rink-chaos -mode storm -duration 10m -seed 1 -keys
//	go run ./tools/cmd/rink-chaos -mode storm -duration 10m -seed 1 -sidecar -roles 64
//
// It exits with status 1 on any violation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rink-go/rink/tools/internal/chaos"
)

func main() {
	chaos.MaybeChild() // children of the run are this binary, re-executed
	var cfg chaos.Config
	mode := flag.String("mode", "rounds", "rounds: one fault at a time, settling in between; storm: operations back to back, never settling")
	ops := flag.String("ops", "", "storm: comma-separated kinds of operation to draw from (default all: "+strings.Join(chaos.StormOps, ",")+")")
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to inject faults")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule")
	flag.IntVar(&cfg.Members, "members", 5, "members kept alive")
	flag.IntVar(&cfg.Roles, "roles", 256, "partition roles (plus leader)")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "session TTL")
	flag.DurationVar(&cfg.Delay, "delay", time.Second, "rebalance delay")
	flag.BoolVar(&cfg.Restore, "restore", false, "storm: also restore etcd from a snapshot now and then (restarts the cluster)")
	flag.DurationVar(&cfg.Epoch, "epoch", 0, "storm: heal and check liveness after every epoch of operations (default: once, at the end)")
	flag.DurationVar(&cfg.Slack, "slack", 5*time.Second, "storm: slack added to TTL + delay for the liveness bound")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for etcd data and member logs (default: a new temporary one)")
	flag.DurationVar(&cfg.Drain, "drain", 0, "storm: members run roles under rink.Run with this drain timeout, winding down before each release (0: AwaitRole loops)")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "storm: members warm up planned moves for at most this long (rink.WithWarmup; 0: none)")
	flag.Float64Var(&cfg.Balance, "balance", 0, "storm: members balance by load with this tolerance (e.g. 0.1) and record a skewed load; 0 balances by count")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "storm: replicas per slot (rink.WithReplicas); above 1, members record their secondary holdings, and the run checks that at most this many members act on a role at once and that every role has its secondaries again after each heal")
	flag.IntVar(&cfg.Zones, "zones", 0, "storm: spread the members over this many zones (rink.WithZone) and draw zone-loss, every member of a zone killed at once (0: no zones)")
	flag.BoolVar(&cfg.Keys, "keys", false, "storm: also draw an operator's deletions of live members' keys: election-delete, member-keys-delete, tail-delete (without: every seed deals the deck it dealt before they existed)")
	flag.BoolVar(&cfg.Sidecar, "sidecar", false, "storm: every member is a rinkd sidecar with its app (an HTTP/JSON client) in its process, the app recording what rinkd tells it (GRANTED, RENEWED, REVOKED, its streams' end, the validity): the checks are at the app's side; half the members stop by a drain of their sidecar, half by their app closing its session")
	flag.Parse()
	if *ops != "" {
		cfg.Ops = strings.Split(*ops, ",")
	}
	var err error
	switch *mode {
	case "rounds":
		if cfg.Replicas > 1 || cfg.Zones > 0 || cfg.Keys || cfg.Sidecar {
			err = fmt.Errorf("-replicas, -zones, -keys and -sidecar are for -mode storm")
			break
		}
		err = rounds(cfg)
	case "storm":
		err = storm(cfg)
	default:
		err = fmt.Errorf("unknown -mode %q (rounds or storm)", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rink-chaos:", err)
		os.Exit(1)
	}
}

func prepare(cfg *chaos.Config) (context.Context, context.CancelFunc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cfg.Self, cfg.Out = self, os.Stdout
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "rink-chaos-"); err != nil {
			return nil, nil, err
		}
	}
	fmt.Printf("rink-chaos: seed %d, %v, logs in %s\n", cfg.Seed, cfg.Duration, cfg.Dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx, stop, nil
}

func rounds(cfg chaos.Config) error {
	ctx, stop, err := prepare(&cfg)
	if err != nil {
		return err
	}
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

func storm(cfg chaos.Config) error {
	if cfg.Replicas < 1 || cfg.Zones < 0 {
		return fmt.Errorf("-replicas must be at least 1, -zones at least 0")
	}
	if cfg.Sidecar && (cfg.Replicas > 1 || cfg.Zones > 0 || cfg.Balance > 0 || cfg.Drain > 0 || cfg.Warmup > 0) {
		return fmt.Errorf("-sidecar runs without -replicas, -zones, -balance, -drain and -warmup")
	}
	for _, k := range cfg.Ops {
		if !slices.Contains(chaos.StormOps, k) {
			return fmt.Errorf("unknown operation %q (known: %s)", k, strings.Join(chaos.StormOps, ","))
		}
	}
	if len(cfg.Ops) > 0 && cfg.Zones == 0 && !slices.ContainsFunc(cfg.Ops, func(k string) bool { return k != "zone-loss" }) {
		return fmt.Errorf("zone-loss is drawn only with -zones")
	}
	if len(cfg.Ops) > 0 && !cfg.Keys && slices.ContainsFunc(cfg.Ops, func(k string) bool {
		return k == "election-delete" || k == "member-keys-delete" || k == "tail-delete"
	}) {
		return fmt.Errorf("election-delete, member-keys-delete and tail-delete are drawn only with -keys")
	}
	if len(cfg.Ops) > 0 && !cfg.Sidecar && slices.Contains(cfg.Ops, "app-deaf") {
		return fmt.Errorf("app-deaf is drawn only with -sidecar")
	}
	ctx, stop, err := prepare(&cfg)
	if err != nil {
		return err
	}
	defer stop()
	s, err := chaos.Storm(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(s.Text())
	if n := len(s.Violations()); n > 0 {
		return fmt.Errorf("%d violations (%d of safety, %d of liveness)", n, s.SafetyViolations(), s.LivenessViolations())
	}
	return nil
}
