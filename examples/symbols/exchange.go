package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

const rinkName = "symbols"

// book is a pair's state: what its owner keeps in memory and persists.
type book struct {
	Orders int     `json:"orders"`
	Volume float64 `json:"volume"`
	Token  int64   `json:"token"` // fencing token of the last write
}

// errStale is returned when a write carries an older token than the last.
var errStale = errors.New("stale owner: write refused")

// member is one replica: a rink member with the books of the pairs it holds.
type member struct {
	name  string
	cli   *clientv3.Client
	r     *rink.Rink
	mu    sync.Mutex
	books map[string]*book // pairs held now
	owned map[string]int   // orders handled per pair, for the report
	left  bool             // shut down (set and read by the order loop only)
}

func stateKey(pair string) string { return "symbols/books/" + pair }

// load reads a pair's persisted book when this member takes the pair over.
func (m *member) load(ctx context.Context, pair string) (*book, error) {
	resp, err := m.cli.Get(ctx, stateKey(pair))
	if err != nil {
		return nil, err
	}
	b := &book{}
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// save persists a book, fenced by token: the write succeeds only if no
// holder with a newer token has written since. The token is stored as a
// zero-padded string so that etcd's byte-wise comparison orders it
// numerically.
func (m *member) save(ctx context.Context, pair string, b book, token int64) error {
	b.Token = token
	val, _ := json.Marshal(b)
	fence := "symbols/fence/" + pair
	mine := fmt.Sprintf("%020d", token)
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fence), ">", mine)).
		Else(clientv3.OpPut(fence, mine), clientv3.OpPut(stateKey(pair), string(val))).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded { // the fence holds a newer token
		return errStale
	}
	return nil
}

// order handles one order for a pair this member holds.
func (m *member) order(ctx context.Context, pair string, qty float64) error {
	roleCtx, ok := m.r.Get(pair)
	if !ok {
		return fmt.Errorf("%s does not hold %s", m.name, pair)
	}
	token, _ := rink.Token(roleCtx)
	m.mu.Lock()
	b, ok := m.books[pair]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s has no book for %s yet", m.name, pair)
	}
	next := *b
	next.Orders++
	next.Volume += qty
	if err := m.save(roleCtx, pair, next, token); err != nil {
		return err
	}
	m.mu.Lock()
	*b = next
	m.owned[pair]++
	m.mu.Unlock()
	return nil
}

// hold is the member's loop for one pair: load the book on taking the pair,
// drop it when the role ends.
func (m *member) hold(pair string) {
	for {
		ctx := m.r.AwaitRole(pair)
		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
			return
		}
		b, err := m.load(ctx, pair)
		if err != nil {
			continue // the role was lost meanwhile, or etcd failed: await again
		}
		m.mu.Lock()
		m.books[pair] = b
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
		delete(m.books, pair)
		m.mu.Unlock()
	}
}

type exchange struct {
	out     io.Writer
	cfg     config
	members []*member
	loops   sync.WaitGroup
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
		owner, ok := at.r.Owner(pair)
		if ok {
			if m := x.byName(owner); m != nil {
				if err := m.order(ctx, pair, qty); err == nil {
					return owner, nil
				} else if attempt > 200 {
					return "", err
				}
			}
		}
		// The owner is taking over (waiting for the previous one to let go,
		// or loading the book): try again shortly.
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
			m.r.Shutdown(context.Background())
		}
		x.loops.Wait()
		for _, m := range x.members {
			m.cli.Close()
		}
	}()
	for i := 0; i < cfg.members; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: first.GetLogger()})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("trader-%d", i)
		r, err := rink.New(cli, rinkName, rink.WithMemberName(name), rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
		if err != nil {
			cli.Close()
			return err
		}
		m := &member{name: name, cli: cli, r: r, books: map[string]*book{}, owned: map[string]int{}}
		x.members = append(x.members, m)
		for _, pair := range cfg.pairs {
			x.loops.Add(1)
			go func() {
				defer x.loops.Done()
				m.hold(pair)
			}()
		}
	}
	fmt.Fprintf(out, "%d members, %d pairs\n", cfg.members, len(cfg.pairs))

	rng := rand.New(rand.NewPCG(1, 2))
	var staleCtx context.Context
	var stalePair string
	for i := 0; i < cfg.orders; i++ {
		if i == cfg.orders/2 {
			// A member leaves midway; remember one of its pairs and its token.
			gone := x.members[0]
			for pair := range gone.books {
				if c, ok := gone.r.Get(pair); ok {
					staleCtx, stalePair = c, pair
					break
				}
			}
			fmt.Fprintf(out, "%s leaves: its pairs move to the others\n", gone.name)
			if err := gone.r.Shutdown(ctx); err != nil {
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

	// The departed member tries to write with its old token: refused.
	if staleCtx != nil {
		token, _ := rink.Token(staleCtx)
		err := x.members[0].save(context.Background(), stalePair, book{Orders: -1}, token)
		fmt.Fprintf(out, "late write to %s by %s with token %d: %v\n", stalePair, x.members[0].name, token, err)
	}
	return x.report(ctx)
}

func (x *exchange) report(ctx context.Context) error {
	total := 0
	sort.Strings(x.cfg.pairs)
	for _, pair := range x.cfg.pairs {
		resp, err := x.members[len(x.members)-1].cli.Get(ctx, stateKey(pair))
		if err != nil {
			return err
		}
		var b book
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
