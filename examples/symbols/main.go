// Command symbols gives each trading pair (BTC/ETH, ETH/USDT, …) to one
// member. Orders for a pair reach any member; it routes them with Owner to
// the member that owns the pair, which keeps the pair's order book in memory
// and persists it to etcd with writes fenced by the role's token, so that a
// member that lost a pair can never overwrite its successor's state. Each
// member runs package trader, the code to copy into a service (see
// README.md).
//
//	go run ./examples/symbols
//	go run ./examples/symbols -members 4 -orders 400
//
// Midway one member shuts down: its pairs move, their new owners claim them
// and load the persisted books, and a write the old owner attempts
// afterwards is refused.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type config struct {
	endpoints string
	members   int
	orders    int
	pairs     []string
}

func main() {
	var cfg config
	pairs := flag.String("pairs", "BTC/ETH,ETH/USDT,BTC/USDT,SOL/USDC,ETH/BTC,XRP/USDT,ADA/USDT,DOT/USDT", "trading pairs, comma-separated")
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.members, "members", 3, "members (at least 2)")
	flag.IntVar(&cfg.orders, "orders", 200, "orders to send")
	flag.Parse()
	cfg.pairs = strings.Split(*pairs, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "symbols:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.members < 2:
		return fmt.Errorf("-members %d: want at least 2", c.members)
	case c.orders < 1:
		return fmt.Errorf("-orders %d: want at least 1", c.orders)
	}
	for _, p := range c.pairs {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("-pairs: empty pair name")
		}
	}
	return nil
}
