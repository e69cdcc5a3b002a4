// Command cache runs a read-through cache sharded by role over the members
// of a rink, in front of a slow store, through a rolling deploy and a
// scale-out, twice: once with warm-up off, once on. It prints the cache's
// hit rate during each change. Each member runs package shardcache, the
// code to copy into a service (see README.md).
//
//	go run ./examples/cache
//	go run ./examples/cache -members 5 -rate 2000 -warmup 3s
//
// A load generator issues requests by key, popular keys far more often
// than the rest (a Zipf law). It maps each key to its shard's role and
// routes the request with an Observer to the member that owns the shard;
// a request that lands on a member that no longer serves the shard (it
// has just moved) is routed again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/cache/shardcache"
	"github.com/rink-go/rink/internal/embedetcd"
)

type config struct {
	endpoints string
	members   int
	shards    int
	keys      int
	preload   int
	rate      int
	latency   time.Duration
	warmup    time.Duration
	drain     time.Duration
	delay     time.Duration
	tail      time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.members, "members", 4, "members (at least 2)")
	flag.IntVar(&cfg.shards, "shards", 64, "shards, one role each (at least 1)")
	flag.IntVar(&cfg.keys, "keys", 2048, "keys (at least -shards); key i is requested in proportion to 1/(i+1)^1.1")
	flag.IntVar(&cfg.preload, "preload", 24, "keys per shard that warm-up reads ahead (the shard's hottest)")
	flag.IntVar(&cfg.rate, "rate", 1000, "requests per second")
	flag.DurationVar(&cfg.latency, "latency", 2*time.Millisecond, "the store's latency per read")
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "warm-up time of the second run (rink.WithWarmup)")
	flag.DurationVar(&cfg.drain, "drain", time.Second, "drain timeout (rink.WithDrainTimeout)")
	flag.DurationVar(&cfg.delay, "delay", 3*time.Second, "rebalance delay: above the warm-up, so that a newcomer in the rolling deploy still waits when its predecessor leaves")
	flag.DurationVar(&cfg.tail, "tail", time.Second, "how long the hit rate is still counted after a change has settled")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "cache:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.members < 2:
		return fmt.Errorf("-members %d: want at least 2", c.members)
	case c.shards < 1:
		return fmt.Errorf("-shards %d: want at least 1", c.shards)
	case c.keys < c.shards:
		return fmt.Errorf("-keys %d: want at least -shards (%d)", c.keys, c.shards)
	case c.preload < 1:
		return fmt.Errorf("-preload %d: want at least 1", c.preload)
	case c.rate < 10 || c.rate > 100000:
		return fmt.Errorf("-rate %d: want 10 to 100000", c.rate)
	case c.latency < 0 || c.drain < 0 || c.tail < 0:
		return errors.New("-latency, -drain and -tail must not be negative")
	case c.warmup <= 0:
		return fmt.Errorf("-warmup %v: want more than 0", c.warmup)
	case c.delay <= c.warmup:
		return fmt.Errorf("-delay %v: want more than -warmup (%v)", c.delay, c.warmup)
	}
	return nil
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
	var misses [2]int
	for i, warm := range []time.Duration{0, cfg.warmup} {
		if misses[i], err = pass(ctx, out, cfg, first, warm); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "misses during the changes: %d with warm-up off, %d with warm-up on\n", misses[0], misses[1])
	return nil
}

// member is one replica of the service: a rink member and its cache.
type member struct {
	cli   *clientv3.Client
	r     *rink.Rink
	cache *shardcache.Cache
}

// stop leaves the rink (the shards are drained and handed over) and then
// closes the cache.
func (m *member) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.r.Shutdown(ctx)
	m.cache.Close()
	m.cli.Close()
}

// pass runs one rink through a rolling deploy and a scale-out under
// traffic, with the given warm-up (0: off), prints the hit rate during
// each, and returns the misses counted during both.
func pass(ctx context.Context, out io.Writer, cfg config, first *clientv3.Client, warm time.Duration) (int, error) {
	label := "warm-up off"
	if warm > 0 {
		label = fmt.Sprintf("warm-up on (%v)", warm)
	}
	name := fmt.Sprint("cache-", time.Now().UnixNano())
	store := newStore(cfg)
	ev := &eventLog{}
	opts := []rink.Option{
		// Short, so that the story runs in seconds; see README.md for
		// settings fit for production.
		rink.WithRebalanceDelay(cfg.delay),
		rink.WithDrainTimeout(cfg.drain),
		rink.WithWarmup(warm),
		// Balanced by slot count only: no load moves during the story.
		rink.WithImbalanceTolerance(0),
		rink.WithEvents(ev.observe),
	}
	var mu sync.Mutex
	members := map[string]*member{}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	start := func(n string) (*member, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: first.Endpoints(), DialTimeout: 5 * time.Second, Logger: first.GetLogger()})
		if err != nil {
			return nil, err
		}
		r, err := rink.NewContext(ctx, cli, name, append(opts, rink.WithMemberName(n))...)
		if err != nil {
			cli.Close()
			return nil, err
		}
		c, err := shardcache.New(r, store, shardcache.Config{Shards: cfg.shards, Preload: cfg.preload})
		if err != nil {
			_ = r.Shutdown(context.Background())
			cli.Close()
			return nil, err
		}
		m := &member{cli: cli, r: r, cache: c}
		mu.Lock()
		members[n] = m
		mu.Unlock()
		return m, nil
	}
	var gone, reported int64 // keys preloaded by members that left; by the last report
	leave := func(n string) {
		mu.Lock()
		m := members[n]
		mu.Unlock()
		// Routable until it has left: with a warm-up, Shutdown keeps
		// serving while the heirs prepare, and the map still names it.
		m.stop()
		mu.Lock()
		delete(members, n)
		mu.Unlock()
		gone += m.cache.Stats().Preloaded
	}
	preloaded := func() int64 { // since the last call
		total := gone
		mu.Lock()
		for _, m := range members {
			total += m.cache.Stats().Preloaded
		}
		mu.Unlock()
		defer func() { reported = total }()
		return total - reported
	}
	lookup := func(n string) *shardcache.Cache {
		mu.Lock()
		defer mu.Unlock()
		if m := members[n]; m != nil {
			return m.cache
		}
		return nil
	}

	var old []string
	for i := range cfg.members {
		n := fmt.Sprint("m", i)
		if _, err := start(n); err != nil {
			return 0, err
		}
		old = append(old, n)
	}
	ob, err := rink.NewObserver(first, name)
	if err != nil {
		return 0, err
	}
	defer ob.Close()
	settled := func(n int) func() bool {
		return func() bool {
			s := ob.State()
			if len(s.Members) != n || len(s.Waiting) > 0 || len(s.Joining) > 0 {
				return false
			}
			for _, role := range shardcache.Roles(cfg.shards) {
				o, ok := s.Owner(role)
				if c := lookup(o); !ok || c == nil || !c.Serves(role) {
					return false
				}
			}
			return true
		}
	}
	if err := until(ctx, 30*time.Second, "the members serve every shard", settled(cfg.members)); err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "%s: %d members serve %d shards of %d keys\n", label, cfg.members, cfg.shards, cfg.keys)

	tr := &traffic{ob: ob, lookup: lookup, shards: cfg.shards}
	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopTraffic()
	if err := tr.prefill(tctx, store.keys); err != nil {
		return 0, err
	}
	tr.start(tctx, &wg, cfg)

	// The rolling deploy: each member is replaced by a newcomer that joins,
	// waits, and inherits its shards when it leaves.
	mark := time.Now()
	for i, o := range old {
		nm, err := start(fmt.Sprint("new", i))
		if err != nil {
			return 0, err
		}
		if err := until(ctx, 10*time.Second, "the newcomer waits", func() bool { return nm.r.Rank().Waiting }); err != nil {
			return 0, err
		}
		leave(o)
		if err := until(ctx, 30*time.Second, "the newcomer serves", settled(cfg.members)); err != nil {
			return 0, err
		}
	}
	missed, err := report(ctx, out, fmt.Sprintf("%s, rolling deploy (%d members replaced)", label, cfg.members), cfg, tr, ev, preloaded, mark)
	if err != nil {
		return 0, err
	}

	// The scale-out: one more member, ranked after the rebalance delay,
	// takes its share of the shards from the others.
	if err := tr.prefill(tctx, store.keys); err != nil {
		return 0, err
	}
	mark = time.Now()
	if _, err := start(fmt.Sprint("new", cfg.members)); err != nil {
		return 0, err
	}
	if err := until(ctx, 30*time.Second, "the rink serves every shard with one more member", settled(cfg.members+1)); err != nil {
		return 0, err
	}
	m, err := report(ctx, out, fmt.Sprintf("%s, scale-out %d → %d", label, cfg.members, cfg.members+1), cfg, tr, ev, preloaded, mark)
	return missed + m, err
}

// report waits cfg.tail and prints the hit rate from the change's first
// release (after mark) until then, with the drains, the announcements and
// the keys preloaded since mark.
func report(ctx context.Context, out io.Writer, what string, cfg config, tr *traffic, ev *eventLog, preloaded func() int64, mark time.Time) (int, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(cfg.tail): // the misses that follow a move come after it
	}
	end := time.Now()
	from := ev.firstRelease(mark)
	if from.IsZero() {
		from = mark
	}
	requests, misses := tr.count(from, end)
	if requests == 0 {
		return 0, fmt.Errorf("%s: no request served between the first move and %v after the change settled", what, cfg.tail)
	}
	drains, longest, incoming := ev.since(mark)
	fmt.Fprintf(out, "%s: hit rate %.3f (%d requests, %d misses, %d routed again) over %v; %d slots drained (longest %v), %d moves announced ahead, %d keys preloaded\n",
		what, 1-float64(misses)/float64(requests), requests, misses, tr.rerouted.Swap(0),
		end.Sub(from).Round(time.Millisecond), drains, longest.Round(10*time.Microsecond), incoming, preloaded())
	return misses, nil
}

// until polls cond every few milliseconds until it holds, for at most d.
func until(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// eventLog keeps what the members report that the story shows: when slots
// were released, how long drains took, and the moves announced ahead.
type eventLog struct {
	mu       sync.Mutex
	released []time.Time
	drained  []rink.Event
	incoming []time.Time
}

func (l *eventLog) observe(e rink.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case rink.EventReleased:
		l.released = append(l.released, e.Time)
	case rink.EventDrained, rink.EventDrainTimedOut:
		l.drained = append(l.drained, e)
	case rink.EventIncoming:
		l.incoming = append(l.incoming, e.Time)
	}
}

// firstRelease is the first slot release after t (zero if none).
func (l *eventLog) firstRelease(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, at := range l.released {
		if at.After(t) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// since counts the drains and announcements after t, with the longest
// drain.
func (l *eventLog) since(t time.Time) (drains int, longest time.Duration, incoming int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.drained {
		if e.Time.After(t) {
			drains++
			longest = max(longest, e.Wait)
		}
	}
	for _, at := range l.incoming {
		if at.After(t) {
			incoming++
		}
	}
	return drains, longest, incoming
}

// store is the slow store: every read costs its latency. It knows each
// shard's keys from the most to the least requested, as a store's access
// statistics would.
type store struct {
	latency time.Duration
	keys    []string            // by popularity, most requested first
	hot     map[string][]string // shard -> its keys, most requested first
}

func newStore(cfg config) *store {
	s := &store{latency: cfg.latency, hot: map[string][]string{}}
	for i := range cfg.keys {
		k := fmt.Sprint("key-", i)
		s.keys = append(s.keys, k)
		sh := shardcache.ShardOf(k, cfg.shards)
		s.hot[sh] = append(s.hot[sh], k)
	}
	return s
}

func (s *store) Get(ctx context.Context, key string) (string, error) {
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.C:
		return "value of " + key, nil
	}
}

func (s *store) Hot(_ context.Context, shard string, n int) ([]string, error) {
	keys := s.hot[shard]
	return slices.Clone(keys[:min(n, len(keys))]), nil
}

// traffic issues requests, routes them and keeps their outcomes.
type traffic struct {
	ob       *rink.Observer
	lookup   func(member string) *shardcache.Cache
	shards   int
	rerouted atomic.Int64

	mu       sync.Mutex
	outcomes []outcome
}

// outcome is one request served: when it was issued, and whether it hit.
type outcome struct {
	at  time.Time
	hit bool
}

// request routes a request for key to the owner of its shard and routes it
// again until a member serves it.
func (t *traffic) request(ctx context.Context, key string) (bool, error) {
	role := shardcache.ShardOf(key, t.shards)
	for {
		st := t.ob.State()
		if owner, ok := st.Owner(role); ok {
			if c := t.lookup(owner); c != nil {
				_, hit, err := c.Get(ctx, key)
				if !errors.Is(err, shardcache.ErrNotOwner) {
					return hit, err
				}
			}
		}
		// Not served there: the shard has just moved, and the map that says
		// so, or the heir's start, is a moment away.
		t.rerouted.Add(1)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-st.Changed():
		case <-time.After(time.Millisecond):
		}
	}
}

// prefill requests every key once, so that the caches start full.
func (t *traffic) prefill(ctx context.Context, keys []string) error {
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for w := range errs {
		wg.Go(func() {
			for i := w; i < len(keys); i += len(errs) {
				if _, err := t.request(ctx, keys[i]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// start issues cfg.rate requests per second from a few workers until ctx
// ends, each for a key drawn from a Zipf law over the keys.
func (t *traffic) start(ctx context.Context, wg *sync.WaitGroup, cfg config) {
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			zipf := rand.NewZipf(rng, 1.1, 1, uint64(cfg.keys-1))
			tick := time.NewTicker(time.Second * workers / time.Duration(cfg.rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				at := time.Now()
				hit, err := t.request(ctx, fmt.Sprint("key-", zipf.Uint64()))
				if err != nil {
					continue // the traffic is stopping
				}
				t.mu.Lock()
				t.outcomes = append(t.outcomes, outcome{at, hit})
				t.mu.Unlock()
			}
		})
	}
}

// count returns the requests issued in [from, to] and the misses among
// them.
func (t *traffic) count(from, to time.Time) (requests, misses int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.outcomes {
		if !o.at.Before(from) && !o.at.After(to) {
			requests++
			if !o.hit {
				misses++
			}
		}
	}
	return requests, misses
}
