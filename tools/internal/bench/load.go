package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// Settings of the load scenario's members: short intervals, so that a run
// takes seconds rather than minutes. Rounds happen once per interval.
const (
	LoadInterval  = time.Second
	LoadWindow    = 3 * time.Second
	LoadTolerance = 0.1
)

// loadSeed numbers the load scenario's runs: each run draws other hot roles.
var loadSeed atomic.Uint64

// NextLoadSeed returns the seed of the next load run.
func NextLoadSeed() uint64 { return loadSeed.Add(1) }

// zipfWeights returns n role weights following a Zipf law of exponent
// 1.1, the hottest role being a seeded random one.
func zipfWeights(seed uint64, n int) []float64 {
	rng := rand.New(rand.NewPCG(seed, 13))
	w := make([]float64, n)
	for rank, i := range rng.Perm(n) {
		w[i] = 1 / math.Pow(float64(rank+1), 1.1)
	}
	return w
}

// LoadBalance runs 8 members with the given capacities (nil: all 1),
// nroles roles (10,000 in the figures) awaited by every member, each with a seeded Zipf load that
// its holder records with AddLoad, and the leader balancing by load
// (WithImbalanceTolerance(LoadTolerance)). It reports, from the true loads
// of the roles: the imbalance balanced by count (once all members are
// ranked, before any load round), after the rounds converge, and the bound
// the hottest slot sets; how many rounds (map versions) it took to come
// within max(1 + tolerance, bound), and how many it made in all; how many
// slots moved, the share of the load that moved, and overlaps.
func LoadBalance(env Env, caps []float64, nroles int, seed uint64) (Sample, error) {
	const members = 8
	if caps == nil {
		caps = []float64{1, 1, 1, 1, 1, 1, 1, 1}
	}
	rs := roles(nroles)
	w := zipfWeights(seed, nroles)
	rec := &recorder{}
	name := nextRink("load")
	opts := []rink.Option{rink.WithRebalanceDelay(0), rink.WithImbalanceTolerance(LoadTolerance),
		rink.WithLoadInterval(LoadInterval), rink.WithLoadWindow(LoadWindow)}
	var ms []*member
	defer func() { stopAll(ms) }()
	for i := 0; i < members; i++ {
		m, err := join(env.Endpoints, name, fmt.Sprintf("m%d", i), rec, append(opts, rink.WithCapacity(caps[i]))...)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
		if i == 0 {
			if err := until(10*time.Second, "first member ranked", func() bool { return m.r.Rank().Index == 0 }); err != nil {
				return nil, err
			}
		}
	}
	ob, err := rink.NewObserver(ms[0].cli, name, rink.WithLogger(zap.NewNop()))
	if err != nil {
		return nil, err
	}
	defer ob.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() { cancel(); loops.Wait() }()
	for _, m := range ms {
		for _, role := range rs {
			loops.Add(1)
			go func() {
				defer loops.Done()
				for {
					rctx, err := m.r.AwaitRoleContext(ctx, role)
					if err != nil {
						return
					}
					select {
					case <-rctx.Done():
					case <-ctx.Done():
						return
					}
				}
			}()
		}
		loops.Add(1)
		go func() {
			defer loops.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				for i, role := range rs {
					m.r.AddLoad(role, 1000*w[i]) // counted by the holder only
				}
			}
		}()
	}

	// The load per member, from the roles' true weights and the owners.
	imb := func(s rink.State) float64 {
		load := map[string]float64{}
		total, capSum, worst := 0.0, 0.0, 0.0
		for i, role := range rs {
			if o, ok := s.Owner(role); ok {
				load[o] += w[i]
			}
			total += w[i]
		}
		for _, m := range s.Members {
			capSum += m.Capacity
		}
		for _, m := range s.Members {
			worst = max(worst, load[m.Name]/m.Capacity)
		}
		return worst / (total / capSum)
	}
	if err := until(time.Minute, "every member ranked and every role held", func() bool {
		s := ob.State()
		if len(s.Members) != members || len(s.Waiting) > 0 || len(s.Joining) > 0 {
			return false
		}
		for _, role := range rs[:100] {
			held := false
			for _, m := range ms {
				if _, ok := m.r.Get(role); ok {
					held = true
					break
				}
			}
			if !held {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	start := ob.State()
	began := time.Now()
	s := Sample{"imbalance_by_count": imb(start)}

	// The bound: the hottest slot on the member with the most capacity.
	slotLoad := make([]float64, rink.DefaultSlots)
	total, hot := 0.0, 0.0
	for i, role := range rs {
		slotLoad[slotOf(role)] += w[i]
		total += w[i]
	}
	capSum, top := 0.0, 0.0
	for _, c := range caps {
		capSum += c
		top = max(top, c)
	}
	for _, x := range slotLoad {
		hot = max(hot, x)
	}
	s["imbalance_bound"] = max(1, (hot/top)/(total/capSum))

	// Settled: no new map for four load intervals (or a minute gone). The
	// rounds to converge are the maps until the imbalance first came within
	// the target, max(1 + tolerance, bound); rounds_total counts them all.
	target := max(1+LoadTolerance, s["imbalance_bound"]) * 1.005
	last, lastAt, rounds := start.Version, time.Now(), 0.0
	if imb(start) <= target {
		rounds = 0
	} else {
		rounds = -1
	}
	for time.Since(lastAt) < 4*LoadInterval && time.Since(began) < time.Minute {
		time.Sleep(100 * time.Millisecond)
		if st := ob.State(); st.Version != last {
			last, lastAt = st.Version, time.Now()
			if rounds < 0 && imb(st) <= target {
				rounds = float64(st.Version - start.Version)
			}
		}
	}
	end := ob.State()
	s["imbalance_after"] = imb(end)
	s["rounds"] = rounds // -1: never within the target
	s["rounds_total"] = float64(end.Version - start.Version)
	moved, movedLoad := 0, 0.0
	for _, e := range rec.snapshot() {
		if e.Kind == rink.EventAcquired && e.Time.After(began) {
			moved++
			movedLoad += slotLoad[e.Slot]
		}
	}
	s["slots_moved"] = float64(moved)
	s["load_moved_fraction"] = movedLoad / total
	s["overlaps"] = float64(overlaps(rec.snapshot()))
	return s, nil
}
