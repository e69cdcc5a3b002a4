package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/cache/shardcache"
)

// The cache workload of the warm scenario, as in examples/cache: 2,048
// keys over 64 shards, key i requested in proportion to 1/(i+1)^1.1, a
// store that takes 2 ms per read, and heirs that preload the 24 hottest
// keys of each shard coming to them (about 98 % of the requests).
const (
	warmMembers = 4 // before the scale-out
	warmShards  = 64
	warmKeys    = 2048
	warmPreload = 24
	warmSkew    = 1.1 // the Zipf law's exponent
	warmLatency = 2 * time.Millisecond
	warmWorkers = 8
	warmTick    = 8 * time.Millisecond // per worker: 1,000 requests per second in all
	warmUp      = 2 * time.Second      // WithWarmup, when on
	warmDelay   = 3 * time.Second      // the rebalance delay: above the warm-up
	warmTail    = time.Second          // how long a change is counted after it settled
)

// Warm runs the cache workload on a rink of 4 members through a rolling
// deploy (each member replaced by a newcomer that waits and inherits, the
// old one shut down gracefully) and then a scale-out to 5, once with
// warm-up off and once on, with a drain timeout throughout. Requests are
// routed by an Observer to the owner of their key's shard, and routed
// again when they land on a member that does not serve it.
//
// Figures: the hit rate during each change (from its first release until
// a second after it settled), per mode; the switch gap with warm-up on
// (from the old holder's release to the heir's acquisition, per slot
// move of a shard's role in the rolling deploy, whose switches are
// graceful shutdowns as in the handover scenario, p50) and off, the same
// for the scale-out's moves between live members (scaleout_gap_*), and the handover scenario's p50
// (20 handovers) measured beside it, with the ratio gap_warm_to_handover;
// a departure-shaped transaction timed under the same traffic before each
// replacement (depart_txn_p50_ms_loaded) and the warm switch against it
// (gap_warm_to_depart_txn_loaded); the drain waits (EventDrained), drain timeouts, the
// slot moves announced ahead (EventIncoming) per mode, and overlaps.
// announced_warm at 0 means that warm-up took no effect: the warm figures
// are then cold ones too.
func Warm(env Env) (Sample, error) {
	s := Sample{}
	var drains, departTxn []time.Duration
	timeouts, bad := 0, 0
	for _, on := range []bool{false, true} {
		res, err := warmRun(env, on)
		if err != nil {
			return nil, err
		}
		mode := "cold"
		if on {
			mode = "warm"
		}
		s["hit_rate_rollout_"+mode] = res.rollout
		s["hit_rate_scaleout_"+mode] = res.scaleout
		s["handover_gap_p50_ms_"+mode] = ms(percentile(res.gaps, 0.5))
		s["scaleout_gap_p50_ms_"+mode] = ms(percentile(res.scaleGaps, 0.5))
		s["announced_"+mode] = float64(res.incoming)
		drains = append(drains, res.drains...)
		departTxn = append(departTxn, res.departTxn...)
		timeouts += res.timeouts
		bad += res.overlaps
	}
	s["drain_wait_p50_ms"] = ms(percentile(drains, 0.5))
	s["drain_timeouts"] = float64(timeouts)
	// The handover scenario beside it, for the ratio the issue asks for.
	h, err := Handover(env, false, 20)
	if err != nil {
		return nil, err
	}
	s["handover_p50_ms"] = h["handover_p50_ms"]
	s["gap_warm_to_handover"] = s["handover_gap_p50_ms_warm"] / h["handover_p50_ms"]
	s["depart_txn_p50_ms_loaded"] = ms(percentile(departTxn, 0.5))
	s["gap_warm_to_depart_txn_loaded"] = s["handover_gap_p50_ms_warm"] / s["depart_txn_p50_ms_loaded"]
	s["overlaps"] = float64(bad) + h["overlaps"]
	return s, nil
}

// warmResult is one run of the warm scenario, warm-up on or off.
type warmResult struct {
	rollout, scaleout float64         // hit rates
	gaps, drains      []time.Duration // the rollout's switch gaps (graceful shutdowns), the drains
	scaleGaps         []time.Duration // the scale-out's (moves between live members)
	departTxn         []time.Duration // departure-shaped transactions under the traffic
	timeouts          int
	incoming          int
	overlaps          int
}

func warmRun(env Env, on bool) (warmResult, error) {
	var res warmResult
	rec := &recorder{}
	store := newWarmStore()
	warmup := time.Duration(0)
	if on {
		warmup = warmUp
	}
	opts := []rink.Option{rink.WithRebalanceDelay(warmDelay), rink.WithDrainTimeout(time.Second), rink.WithWarmup(warmup),
		rink.WithImbalanceTolerance(0)} // no move by load in the windows
	name, initial, err := cluster(env, rec, "warm", warmMembers, opts...)
	if err != nil {
		return res, err
	}
	caches := &warmCaches{byName: map[string]*shardcache.Cache{}}
	all := slices.Clone(initial)
	defer func() {
		for _, m := range all {
			c := caches.get(m.r.Member())
			m.stop()
			c.Close()
		}
	}()
	attach := func(m *member) error {
		c, err := shardcache.New(m.r, store, shardcache.Config{Shards: warmShards, Preload: warmPreload})
		if err != nil {
			return err
		}
		caches.set(m.r.Member(), c)
		return nil
	}
	for _, m := range initial {
		if err := attach(m); err != nil {
			return res, err
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return res, err
	}
	defer cli.Close()
	ob, err := rink.NewObserver(cli, name)
	if err != nil {
		return res, err
	}
	defer ob.Close()
	tr := &warmTraffic{ob: ob, caches: caches}
	ctx, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopTraffic()
	if err := tr.prefill(ctx, store.keys); err != nil {
		return res, err
	}
	for w := range warmWorkers {
		wg.Go(func() { tr.work(ctx, w) })
	}

	// A transaction shaped like a departure, timed on the same etcd under
	// the same traffic right before each replacement: what the switch
	// costs etcd here (see measureDepart).
	probe, err := newFloorProbe(env)
	if err != nil {
		return res, err
	}
	defer probe.close()

	// The rolling deploy, as in Rolling.
	mark := time.Now()
	for i, o := range initial {
		nm, err := join(env.Endpoints, name, fmt.Sprint("new", i), rec, opts...)
		if err != nil {
			return res, err
		}
		all = append(all, nm)
		if err := attach(nm); err != nil {
			return res, err
		}
		if err := until(10*time.Second, "newcomer waiting", func() bool { return nm.r.Rank().Waiting }); err != nil {
			return res, err
		}
		d, err := probe.measureDepart(4)
		if err != nil {
			return res, err
		}
		res.departTxn = append(res.departTxn, d...)
		c := caches.get(o.r.Member())
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = o.r.Shutdown(sctx)
		cancel()
		if err != nil {
			return res, err
		}
		c.Close()
		o.cli.Close()
		all = slices.DeleteFunc(all, func(m *member) bool { return m == o })
		if err := until(30*time.Second, "settled after a replacement", settled(rec, all)); err != nil {
			return res, err
		}
	}
	if res.rollout, err = tr.window(rec, mark); err != nil {
		return res, fmt.Errorf("rolling deploy: %w", err)
	}

	// The scale-out: a fifth member, ranked after the rebalance delay.
	if err := tr.prefill(ctx, store.keys); err != nil {
		return res, err
	}
	scaleMark := time.Now()
	nm, err := join(env.Endpoints, name, fmt.Sprint("new", warmMembers), rec, opts...)
	if err != nil {
		return res, err
	}
	all = append(all, nm)
	if err := attach(nm); err != nil {
		return res, err
	}
	if err := until(30*time.Second, "settled after the scale-out", func() bool { return nm.r.Rank().Index >= 0 && settled(rec, all)() }); err != nil {
		return res, err
	}
	if res.scaleout, err = tr.window(rec, scaleMark); err != nil {
		return res, fmt.Errorf("scale-out: %w", err)
	}

	events := rec.snapshot()
	// The switch of the shards' roles (slots without a role move too, and
	// after them: the roles in use go first on both sides).
	shardSlot := map[int]bool{}
	for i := 0; i < warmShards; i++ {
		shardSlot[slotOf(fmt.Sprint("shard-", i))] = true
	}
	var shardEvents []rink.Event
	for _, e := range events {
		if shardSlot[e.Slot] || e.Kind == rink.EventFenced {
			shardEvents = append(shardEvents, e)
		}
	}
	res.gaps = movesBetween(shardEvents, mark, scaleMark)
	res.scaleGaps = moves(shardEvents, scaleMark)
	res.overlaps = overlaps(events)
	for _, e := range rec.otherEvents() {
		switch {
		case e.Time.Before(mark):
		case e.Kind == rink.EventDrained:
			res.drains = append(res.drains, e.Wait)
		case e.Kind == rink.EventDrainTimedOut:
			res.timeouts++
		case e.Kind == rink.EventIncoming:
			res.incoming++
		}
	}
	return res, nil
}

// warmStore is the slow store: every read takes warmLatency. It knows each
// shard's keys from the most to the least requested.
type warmStore struct {
	keys []string            // by popularity
	hot  map[string][]string // shard -> its keys by popularity
}

func newWarmStore() *warmStore {
	s := &warmStore{hot: map[string][]string{}}
	for i := range warmKeys {
		k := fmt.Sprint("key-", i)
		s.keys = append(s.keys, k)
		sh := shardcache.ShardOf(k, warmShards)
		s.hot[sh] = append(s.hot[sh], k)
	}
	return s
}

func (s *warmStore) Get(ctx context.Context, key string) (string, error) {
	t := time.NewTimer(warmLatency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.C:
		return key, nil
	}
}

func (s *warmStore) Hot(_ context.Context, shard string, n int) ([]string, error) {
	keys := s.hot[shard]
	return slices.Clone(keys[:min(n, len(keys))]), nil
}

// warmCaches are the members' caches by member name, for routing.
type warmCaches struct {
	mu     sync.Mutex
	byName map[string]*shardcache.Cache
}

func (w *warmCaches) get(name string) *shardcache.Cache {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byName[name]
}

func (w *warmCaches) set(name string, c *shardcache.Cache) {
	w.mu.Lock()
	w.byName[name] = c
	w.mu.Unlock()
}

// warmTraffic issues the requests and keeps their outcomes.
type warmTraffic struct {
	ob     *rink.Observer
	caches *warmCaches

	mu       sync.Mutex
	outcomes []warmOutcome
}

// warmOutcome is a request served: when it was issued, and whether it hit.
type warmOutcome struct {
	at  time.Time
	hit bool
}

// request routes a request for key to its shard's owner, and again while
// it lands where the shard is not served.
func (t *warmTraffic) request(ctx context.Context, key string) (bool, error) {
	role := shardcache.ShardOf(key, warmShards)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := t.ob.State()
		if owner, ok := st.Owner(role); ok {
			if c := t.caches.get(owner); c != nil {
				_, hit, err := c.Get(ctx, key)
				if !errors.Is(err, shardcache.ErrNotOwner) {
					return hit, err
				}
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("%s: not served within 5s", key)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-st.Changed():
		case <-time.After(time.Millisecond):
		}
	}
}

// prefill requests every key once, not counted, so that the caches start
// full.
func (t *warmTraffic) prefill(ctx context.Context, keys []string) error {
	var wg sync.WaitGroup
	errs := make([]error, 2*warmWorkers)
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

// work issues this worker's share of the requests until ctx ends.
func (t *warmTraffic) work(ctx context.Context, w int) {
	zipf := rand.NewZipf(rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano()))), warmSkew, 1, warmKeys-1)
	every(ctx, warmTick, func() {
		at := time.Now()
		hit, err := t.request(ctx, fmt.Sprint("key-", zipf.Uint64()))
		if err != nil {
			return // stopping (a request not served in time shows as fewer requests)
		}
		t.mu.Lock()
		t.outcomes = append(t.outcomes, warmOutcome{at, hit})
		t.mu.Unlock()
	})
}

// window waits warmTail and returns the hit rate of the requests issued
// from the first release after mark until then.
func (t *warmTraffic) window(rec *recorder, mark time.Time) (float64, error) {
	time.Sleep(warmTail) // the misses that follow a move come after it
	end := time.Now()
	from := time.Time{}
	for _, e := range rec.snapshot() {
		if e.Kind == rink.EventReleased && e.Time.After(mark) && (from.IsZero() || e.Time.Before(from)) {
			from = e.Time
		}
	}
	if from.IsZero() {
		return 0, errors.New("no slot released")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	requests, hits := 0, 0
	for _, o := range t.outcomes {
		if !o.at.Before(from) && !o.at.After(end) {
			requests++
			if o.hit {
				hits++
			}
		}
	}
	if requests == 0 {
		return 0, fmt.Errorf("no request served from the first release to %v after the change", warmTail)
	}
	return float64(hits) / float64(requests), nil
}

// movesBetween is moves, counting the acquisitions before until only.
func movesBetween(events []rink.Event, since, until time.Time) []time.Duration {
	var in []rink.Event
	for _, e := range events {
		if e.Time.Before(until) {
			in = append(in, e)
		}
	}
	return moves(in, since)
}
