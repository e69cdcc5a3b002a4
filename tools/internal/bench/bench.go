// Package bench holds the scenarios of cmd/rinkbench: each starts members
// of a rink on an etcd it is given, provokes one kind of change, and
// measures it through the members' events (rink.WithEvents), which report
// acquisitions and releases at the instant they happen.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// Env is what a scenario runs against.
type Env struct {
	Endpoints []string
	// NewProxy, if set, returns the address of a proxy in front of etcd and
	// functions that cut it off and heal it (for the failover scenario).
	NewProxy func() (addr string, cut, heal func(), closeProxy func(), err error)
	// Diag, if set, receives a scenario's diagnosis of a run that missed its
	// target (the rolling scenario's timeline of an outlier).
	Diag io.Writer
}

var rinkSeq atomic.Int64

// Sample is one run's figures, by name.
type Sample map[string]float64

// Result is a scenario's samples over its runs.
type Result struct {
	Scenario string
	Runs     []Sample
}

// Summary is min, median and max of one figure over the runs.
type Summary struct{ Min, Median, Max float64 }

// Summaries summarises every figure of the result.
func (r Result) Summaries() map[string]Summary {
	all := map[string][]float64{}
	for _, s := range r.Runs {
		for k, v := range s {
			all[k] = append(all[k], v)
		}
	}
	out := map[string]Summary{}
	for k, vs := range all {
		slices.Sort(vs)
		out[k] = Summary{vs[0], vs[len(vs)/2], vs[len(vs)-1]}
	}
	return out
}

// Figures lists the result's figure names, sorted.
func (r Result) Figures() []string {
	var names []string
	for k := range r.Summaries() {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// recorder collects events from all members of a run: acquisitions,
// releases and fences, of primaries and of secondaries (see
// rink.WithReplicas), in events; rank changes, rejoins, drains and
// announced moves in others.
type recorder struct {
	mu     sync.Mutex
	events []rink.Event
	others []rink.Event
	// noOthers: others is not kept (a scale run, whose members each
	// change rank at every join while the rink forms: 4.75 million rank
	// changes at 10,000 members, 54 KiB a member of the benchmark's own
	// memory counted as the members').
	noOthers bool
}

func (rec *recorder) observe(e rink.Event) {
	switch e.Kind {
	case rink.EventAcquired, rink.EventReleased, rink.EventFenced, rink.EventSecondaryAcquired, rink.EventSecondaryReleased:
		rec.mu.Lock()
		rec.events = append(rec.events, e)
		rec.mu.Unlock()
	case rink.EventRankChanged, rink.EventRejoined, rink.EventDrained, rink.EventDrainTimedOut, rink.EventIncoming:
		if rec.noOthers {
			return
		}
		rec.mu.Lock()
		rec.others = append(rec.others, e)
		rec.mu.Unlock()
	}
}

// otherEvents returns the rank changes, rejoins, drains and announced
// moves.
func (rec *recorder) otherEvents() []rink.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.others)
}

func (rec *recorder) snapshot() []rink.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.events)
}

// overlaps counts instants at which a slot had two holders, and acquisitions
// whose token did not increase: both must be zero.
func overlaps(events []rink.Event) int {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	holder := map[int]string{}
	last := map[int]int64{}
	bad := 0
	for _, e := range events {
		switch e.Kind {
		case rink.EventAcquired:
			if h, ok := holder[e.Slot]; ok && h != e.Member {
				bad++
			}
			if e.Token <= last[e.Slot] {
				bad++
			}
			holder[e.Slot], last[e.Slot] = e.Member, e.Token
		case rink.EventReleased:
			if holder[e.Slot] == e.Member {
				delete(holder, e.Slot)
			}
		case rink.EventFenced:
			for s, m := range holder {
				if m == e.Member {
					delete(holder, s)
				}
			}
		}
	}
	return bad
}

// moves returns, for acquisitions after since, the gap between the slot's
// previous holder letting go and the new holder starting, per slot move.
func moves(events []rink.Event, since time.Time) []time.Duration {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	holder := map[int]string{}
	ended := map[int]time.Time{}
	var gaps []time.Duration
	for _, e := range events {
		switch e.Kind {
		case rink.EventAcquired:
			if t, ok := ended[e.Slot]; ok && holder[e.Slot] == "" && e.Time.After(since) {
				gaps = append(gaps, e.Time.Sub(t))
			}
			holder[e.Slot] = e.Member
		case rink.EventReleased:
			if holder[e.Slot] == e.Member {
				holder[e.Slot], ended[e.Slot] = "", e.Time
			}
		case rink.EventFenced:
			for s, m := range holder {
				if m == e.Member {
					holder[s], ended[s] = "", e.Time
				}
			}
		}
	}
	return gaps
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// member is one rink member with its own client.
type member struct {
	r   *rink.Rink
	cli *clientv3.Client
}

func (m *member) stop() {
	if m.r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = m.r.Shutdown(ctx)
		cancel()
	}
	m.cli.Close()
}

func join(endpoints []string, rinkName, name string, rec *recorder, opts ...rink.Option) (*member, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	opts = append([]rink.Option{rink.WithMemberName(name), rink.WithEvents(rec.observe)}, opts...)
	r, err := rink.New(cli, rinkName, opts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &member{r: r, cli: cli}, nil
}

// until polls cond for up to d.
func until(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// settled reports whether every member holds exactly the slots the first
// member's map gives it: all members have applied the same map, all are
// ranked in it, and every slot is held.
//
// The members' ranks are read before and after the slots held, and must not
// have changed in between: a member publishes its rank after releasing what
// the map took from it, but before acquiring what the map gave it, so a map
// applied during the check would otherwise pass for settled while the
// slots it moved are still held by their old owners. (When the versions and
// the indexes were read in two passes, about one rolling run in 50 began
// its deploy before the last initial member, ranked when its rebalance
// delay ran out, held its share: the share moved twice, and the run
// counted 1,276 acquisitions instead of 1,024.)
func settled(rec *recorder, ms []*member) func() bool {
	ranks := func() []rink.Rank {
		out := make([]rink.Rank, len(ms))
		for i, m := range ms {
			out[i] = m.r.Rank()
		}
		return out
	}
	return func() bool {
		before := ranks()
		for _, rk := range before {
			if rk.Version != before[0].Version || rk.Index < 0 {
				return false
			}
		}
		if len(heldBy(rec.snapshot())) != rink.DefaultSlots {
			return false
		}
		for i, rk := range ranks() {
			if rk.Version != before[i].Version || rk.Index != before[i].Index {
				return false
			}
		}
		return true
	}
}

func nextRink(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), rinkSeq.Add(1))
}

// holdLoop awaits role on r until ctx ends, holding it each time until the
// holding ends: the loop per role a service runs.
func holdLoop(ctx context.Context, r *rink.Rink, role string) {
	for {
		rctx, err := r.AwaitRoleContext(ctx, role)
		if err != nil {
			return
		}
		select {
		case <-rctx.Done():
		case <-ctx.Done():
			return
		}
	}
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
		}
	}
}
