package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	lr, err := startLoadRink(env, caps, nroles, zipfWeights(seed, nroles), LoadInterval, LoadWindow)
	if err != nil {
		return nil, err
	}
	defer lr.stop()
	ob, rec, rs, w, imb := lr.ob, lr.rec, lr.roles, *lr.weights.Load(), lr.imbalance
	caps = lr.caps
	if err := until(time.Minute, "every member ranked and every role held", lr.settled); err != nil {
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
	// rounds to converge are the leader's load rounds that moved slots
	// until the imbalance first came within the target, max(1 +
	// tolerance, bound); rounds_total counts them all. (A map that only
	// says the rink is now balanced by load is not a round.)
	target := max(1+LoadTolerance, s["imbalance_bound"]) * 1.005
	last, lastAt := start.Version, time.Now()
	var within time.Time
	if imb(start) <= target {
		within = began
	}
	for time.Since(lastAt) < 4*LoadInterval && time.Since(began) < time.Minute {
		time.Sleep(100 * time.Millisecond)
		if st := ob.State(); st.Version != last {
			last, lastAt = st.Version, time.Now()
			if within.IsZero() && imb(st) <= target {
				within = lastAt
			}
		}
	}
	end := ob.State()
	rounds, all := lr.movingRounds(began, within), lr.movingRounds(began, time.Now())
	if within.IsZero() {
		rounds = -1
	}
	s["imbalance_after"] = imb(end)
	s["rounds"] = float64(rounds) // -1: never within the target
	s["rounds_total"] = float64(all)
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

// movingRounds counts the leaders' load rounds that moved slots between
// from and to.
func (lr *loadRink) movingRounds(from, to time.Time) int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	n := 0
	for _, e := range lr.rounds {
		if e.Moved > 0 && !e.Time.Before(from) && !e.Time.After(to) {
			n++
		}
	}
	return n
}

// loadRink is the load scenarios' rink: 8 members balancing by load, every
// role awaited by every member, and a load recorded by the holders from
// weights that can change.
type loadRink struct {
	ms      []*member
	ob      *rink.Observer
	rec     *recorder
	roles   []string
	caps    []float64
	weights atomic.Pointer[[]float64]
	stop    func()

	mu     sync.Mutex
	rounds []rink.Event // the leaders' EventLoadBalanced
}

func startLoadRink(env Env, caps []float64, nroles int, w []float64, interval, window time.Duration) (*loadRink, error) {
	const members = 8
	if caps == nil {
		caps = []float64{1, 1, 1, 1, 1, 1, 1, 1}
	}
	lr := &loadRink{rec: &recorder{}, roles: roles(nroles), caps: caps}
	lr.weights.Store(&w)
	name := nextRink("load")
	opts := []rink.Option{rink.WithRebalanceDelay(0), rink.WithImbalanceTolerance(LoadTolerance),
		rink.WithLoadInterval(interval), rink.WithLoadWindow(window)}
	var cleanups []func()
	lr.stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	cleanups = append(cleanups, func() { stopAll(lr.ms) })
	for i := 0; i < members; i++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			lr.stop()
			return nil, err
		}
		events := func(e rink.Event) {
			lr.rec.observe(e)
			if e.Kind == rink.EventLoadBalanced {
				lr.mu.Lock()
				lr.rounds = append(lr.rounds, e)
				lr.mu.Unlock()
			}
		}
		r, err := rink.New(cli, name, append(opts, rink.WithMemberName(fmt.Sprintf("m%d", i)), rink.WithCapacity(caps[i]), rink.WithEvents(events))...)
		if err != nil {
			cli.Close()
			lr.stop()
			return nil, err
		}
		m := &member{r: r, cli: cli}
		lr.ms = append(lr.ms, m)
		if i == 0 {
			if err := until(10*time.Second, "first member ranked", func() bool { return m.r.Rank().Index == 0 }); err != nil {
				lr.stop()
				return nil, err
			}
		}
	}
	ob, err := rink.NewObserver(lr.ms[0].cli, name, rink.WithLogger(zap.NewNop()))
	if err != nil {
		lr.stop()
		return nil, err
	}
	lr.ob = ob
	cleanups = append(cleanups, func() { ob.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	cleanups = append(cleanups, func() { cancel(); loops.Wait() })
	for _, m := range lr.ms {
		for _, role := range lr.roles {
			loops.Add(1)
			go func() {
				defer loops.Done()
				holdLoop(ctx, m.r, role)
			}()
		}
		loops.Add(1)
		go func() {
			defer loops.Done()
			// Each role's load is 10,000 × its weight units a second, added
			// for the time since the last addition: a ticker drops ticks
			// when the machine is busy (as it is while the members start),
			// and adding a tick's worth per tick then gave the rink less
			// load than the weights say, by member, and the leader figures
			// the bench took for wrong.
			d := min(100*time.Millisecond, interval/5)
			last := time.Now()
			every(ctx, d, func() {
				now := time.Now()
				dt := now.Sub(last).Seconds()
				last = now
				w := *lr.weights.Load()
				for i, role := range lr.roles {
					m.r.AddLoad(role, 10000*w[i]*dt) // counted by the holder only
				}
			})
		}()
	}
	return lr, nil
}

// imbalance is the most loaded member's load per capacity over the mean,
// from the roles' true weights and the owners in s.
func (lr *loadRink) imbalance(s rink.State) float64 {
	w := *lr.weights.Load()
	load := map[string]float64{}
	total, capSum, worst := 0.0, 0.0, 0.0
	for i, role := range lr.roles {
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

// settled reports whether every member is ranked and a sample of roles is
// held.
func (lr *loadRink) settled() bool {
	s := lr.ob.State()
	if len(s.Members) != len(lr.ms) || len(s.Waiting) > 0 || len(s.Joining) > 0 {
		return false
	}
	for _, role := range lr.roles[:min(100, len(lr.roles))] {
		held := false
		for _, m := range lr.ms {
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
}

// The load-shift scenario's members follow load faster: a hot set that
// changes at once is found within about a second.
const (
	ShiftInterval = 250 * time.Millisecond
	ShiftWindow   = time.Second
)

// LoadShift runs the load rink with the hot set drawn anew every period,
// shifts times, and reports: the 95th percentile over time of the true
// imbalance (sampled every 250 ms), the most slots a round moved, how
// often a slot moved back to an owner it had left within 3 rounds of the
// leader (oscillations), and overlaps.
func LoadShift(env Env, nroles int, period time.Duration, shifts int, seed uint64) (Sample, error) {
	lr, err := startLoadRink(env, nil, nroles, zipfWeights(seed, nroles), ShiftInterval, ShiftWindow)
	if err != nil {
		return nil, err
	}
	defer lr.stop()
	if err := until(time.Minute, "every member ranked and every role held", lr.settled); err != nil {
		return nil, err
	}
	// One role per slot, to follow each slot's owner by version.
	bySlot := map[int]string{}
	for _, role := range lr.roles {
		if _, ok := bySlot[slotOf(role)]; !ok {
			bySlot[slotOf(role)] = role
		}
	}
	type move struct {
		round    int
		from, to string
	}
	rounds := func() int {
		lr.mu.Lock()
		defer lr.mu.Unlock()
		return len(lr.rounds)
	}
	last := map[int]move{}
	owner := map[int]string{}
	for s, role := range bySlot {
		owner[s], _ = lr.ob.Owner(role)
	}
	version := lr.ob.State().Version
	var samples []float64
	oscillations := 0
	began := time.Now()
	end := began.Add(time.Duration(shifts) * period)
	next := began.Add(period)
	for shift := 1; time.Now().Before(end); {
		time.Sleep(250 * time.Millisecond)
		if time.Now().After(next) && shift < shifts {
			w := zipfWeights(seed*1000+uint64(shift), nroles)
			lr.weights.Store(&w)
			shift++
			next = next.Add(period)
		}
		st := lr.ob.State()
		samples = append(samples, lr.imbalance(st))
		if st.Version == version {
			continue
		}
		version = st.Version
		round := rounds()
		for s, role := range bySlot {
			o, _ := st.Owner(role)
			if o == owner[s] {
				continue
			}
			if m, ok := last[s]; ok && m.from == o && round-m.round <= 3 {
				oscillations++
			}
			last[s] = move{round: round, from: owner[s], to: o}
			owner[s] = o
		}
	}
	slices.Sort(samples)
	maxMoved := 0
	lr.mu.Lock()
	for _, e := range lr.rounds {
		maxMoved = max(maxMoved, e.Moved)
	}
	lr.mu.Unlock()
	return Sample{
		"imbalance_p95":             samples[min(len(samples)-1, int(0.95*float64(len(samples))))],
		"slots_moved_per_round_max": float64(maxMoved),
		"oscillations":              float64(oscillations),
		"overlaps":                  float64(overlaps(lr.rec.snapshot())),
	}, nil
}
