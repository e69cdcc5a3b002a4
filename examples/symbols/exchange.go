package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/symbols/trader"
	"github.com/rink-go/rink/internal/embedetcd"
)

const rinkName = "symbols"

// member is one replica, running trader.Trader, the code to copy.
type member struct {
	name  string
	cli   *clientv3.Client
	t     *trader.Trader
	owned map[string]int // orders acknowledged per pair, for the report (the order loop's only)
	left  bool           // shut down (set and read by the order loop only)
}

type exchange struct {
	out     io.Writer
	cfg     config
	members []*member
}

func (x *exchange) byName(name string) *member {
	for _, m := range x.members {
		if m.name == name && !m.left {
			return m
		}
	}
	return nil
}

// route sends an order that arrived at member `at` to the pair's owner.
func (x *exchange) route(ctx context.Context, at *member, pair string, qty float64) (string, error) {
	for attempt := 0; ; attempt++ {
		owner, ok := at.t.Rink().Owner(pair)
		if ok {
			if m := x.byName(owner); m != nil {
				_, err := m.t.Order(ctx, pair, qty)
				if err == nil {
					m.owned[pair]++
					return owner, nil
				}
				if !errors.Is(err, trader.ErrNotHeld) && !errors.Is(err, trader.ErrStale) || attempt > 200 {
					return "", err
				}
			}
		}
		// The owner is taking over (waiting for the previous one to let go,
		// or claiming the pair): try again shortly.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func run(ctx context.Context, out io.Writer, cfg config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	first, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return err
	}
	defer closeAll()
	endpoints := first.Endpoints()

	x := &exchange{out: out, cfg: cfg}
	defer func() {
		for _, m := range x.members {
			_ = m.t.Shutdown(context.Background())
			m.cli.Close()
		}
	}()
	for i := 0; i < cfg.members; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: first.GetLogger()})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("trader-%d", i)
		// A short TTL and no rebalance delay, so that the story runs in a
		// few seconds; see README.md for settings fit for production.
		t, err := trader.Start(cli, trader.Config{Rink: rinkName, Pairs: cfg.pairs},
			rink.WithMemberName(name), rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
		if err != nil {
			cli.Close()
			return err
		}
		x.members = append(x.members, &member{name: name, cli: cli, t: t, owned: map[string]int{}})
	}
	fmt.Fprintf(out, "%d members, %d pairs\n", cfg.members, len(cfg.pairs))

	rng := rand.New(rand.NewPCG(1, 2))
	var staleToken int64
	var stalePair string
	for i := 0; i < cfg.orders; i++ {
		if i == cfg.orders/2 {
			// A member leaves midway; remember one of its pairs and its token.
			gone := x.members[0]
			for _, pair := range cfg.pairs {
				if c, ok := gone.t.Rink().Get(pair); ok {
					staleToken, _ = rink.Token(c)
					stalePair = pair
					break
				}
			}
			fmt.Fprintf(out, "%s leaves: its pairs move to the others\n", gone.name)
			if err := gone.t.Shutdown(ctx); err != nil {
				return err
			}
			gone.left = true
		}
		at := x.members[rng.IntN(len(x.members))]
		if at.left {
			at = x.members[len(x.members)-1]
		}
		pair := x.cfg.pairs[rng.IntN(len(x.cfg.pairs))]
		if _, err := x.route(ctx, at, pair, float64(1+rng.IntN(9))); err != nil {
			return fmt.Errorf("order %d for %s: %w", i, pair, err)
		}
	}

	// The departed member tries to write with its old token: refused, since
	// the pair's new holder claimed it when it took it over.
	if stalePair != "" {
		err := trader.Save(ctx, x.members[0].cli, stalePair, trader.Book{Orders: -1}, staleToken)
		fmt.Fprintf(out, "late write to %s by %s with token %d: %v\n", stalePair, x.members[0].name, staleToken, err)
		if !errors.Is(err, trader.ErrStale) {
			return fmt.Errorf("a stale write was not refused: %v", err)
		}
	}
	return x.report(ctx)
}

func (x *exchange) report(ctx context.Context) error {
	total := 0
	sort.Strings(x.cfg.pairs)
	for _, pair := range x.cfg.pairs {
		resp, err := x.members[len(x.members)-1].cli.Get(ctx, trader.BookKey(pair))
		if err != nil {
			return err
		}
		var b trader.Book
		if len(resp.Kvs) > 0 {
			_ = json.Unmarshal(resp.Kvs[0].Value, &b)
		}
		var by []string
		for _, m := range x.members {
			if n := m.owned[pair]; n > 0 {
				by = append(by, fmt.Sprintf("%s:%d", m.name, n))
			}
		}
		total += b.Orders
		fmt.Fprintf(x.out, "  %-9s %4d orders, volume %6.0f, token %d, handled by %v\n", pair, b.Orders, b.Volume, b.Token, by)
	}
	fmt.Fprintf(x.out, "orders persisted: %d of %d sent\n", total, x.cfg.orders)
	if total != x.cfg.orders {
		return fmt.Errorf("persisted %d orders, sent %d", total, x.cfg.orders)
	}
	return nil
}
