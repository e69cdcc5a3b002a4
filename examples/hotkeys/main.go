// Command hotkeys serves a skewed workload — a few keys carry most of the
// requests, as tenants, trading pairs or partitions do — on a rink of
// members running package shard, twice: once balanced by slot count, once
// balanced by load (shard.Config.Tolerance, rink.WithImbalanceTolerance).
// It prints the share of the work each member served at the end of each
// run. Package shard is the code to copy into a service (see README.md).
//
//	go run ./examples/hotkeys
//	go run ./examples/hotkeys -members 6 -keys 500 -seconds 15
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/hotkeys/shard"
	"github.com/rink-go/rink/internal/embedetcd"
)

type config struct {
	endpoints string
	members   int
	keys      int
	seconds   int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.members, "members", 4, "members (at least 2)")
	flag.IntVar(&cfg.keys, "keys", 200, "keys (at least 1); key i carries load 1/(i+1)^1.1")
	flag.IntVar(&cfg.seconds, "seconds", 8, "seconds of traffic per run (at least 3)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hotkeys:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, cfg config) error {
	switch {
	case cfg.members < 2:
		return fmt.Errorf("-members %d: want at least 2", cfg.members)
	case cfg.keys < 1:
		return fmt.Errorf("-keys %d: want at least 1", cfg.keys)
	case cfg.seconds < 3:
		return fmt.Errorf("-seconds %d: want at least 3", cfg.seconds)
	}
	first, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, tol := range []float64{-1, 0.1} {
		if err := serve(ctx, out, cfg, first, tol); err != nil {
			return err
		}
	}
	return nil
}

// serve runs one rink of cfg.members members with the given tolerance
// (negative: balanced by count) under the skewed traffic, and prints each member's
// share of the work in the last two seconds.
func serve(ctx context.Context, out io.Writer, cfg config, first *clientv3.Client, tol float64) error {
	name, how := "hotkeys-count", "balanced by slot count"
	if tol > 0 {
		name, how = "hotkeys-load", fmt.Sprintf("balanced by load (tolerance %.0f %%)", 100*tol)
	}
	name += fmt.Sprint("-", time.Now().UnixNano())
	var members []*shard.Shard
	var clients []*clientv3.Client
	defer func() {
		for i, s := range members {
			_ = s.Shutdown(context.Background())
			clients[i].Close()
		}
	}()
	for i := 0; i < cfg.members; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: first.Endpoints(), DialTimeout: 5 * time.Second, Logger: first.GetLogger()})
		if err != nil {
			return err
		}
		// Short intervals and no rebalance delay, so that the story runs in
		// seconds; see README.md for settings fit for production.
		s, err := shard.Start(cli, shard.Config{Rink: name, Tolerance: tol, LoadInterval: 500 * time.Millisecond, LoadWindow: 2 * time.Second},
			rink.WithMemberName(fmt.Sprint("m", i)), rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
		if err != nil {
			cli.Close()
			return err
		}
		members, clients = append(members, s), append(clients, cli)
	}
	byName := map[string]*shard.Shard{}
	for _, s := range members {
		byName[s.Name()] = s
	}
	weights := make([]float64, cfg.keys)
	for i := range weights {
		weights[i] = 1 / math.Pow(float64(i+1), 1.1)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", rng.IntN(1_000_000)) // the hottest keys land where they land
	}

	// Traffic: every 10 ms, each key's weight in work, sent to a random
	// member and routed from there to the key's owner.
	served := map[string]float64{}
	end := time.Now().Add(time.Duration(cfg.seconds) * time.Second)
	measureFrom := end.Add(-2 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for i, key := range keys {
			entry := members[rng.IntN(len(members))]
			owner, ok := entry.Owner(key)
			if !ok {
				continue
			}
			if err := byName[owner].Serve(key, weights[i]); err == nil && time.Now().After(measureFrom) {
				served[owner] += weights[i]
			}
		}
	}
	total := 0.0
	var names []string
	for _, s := range members {
		names = append(names, s.Name())
		total += served[s.Name()]
	}
	sort.Strings(names)
	var shares []string
	worst := 0.0
	for _, n := range names {
		shares = append(shares, fmt.Sprintf("%s %4.1f%%", n, 100*served[n]/total))
		worst = max(worst, served[n])
	}
	fmt.Fprintf(out, "%s: %s; the most loaded member serves %.2f× the mean\n", how, strings.Join(shares, ", "), worst/(total/float64(len(names))))
	return nil
}
