package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// requestCounts reads, from the embedded etcd's metrics in this process,
// the requests started per gRPC method and the lease renewals.
func requestCounts() (map[string]float64, error) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "grpc_server_started_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "grpc_method" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		case "etcd_debugging_lease_renewed_total":
			out["renewals"] = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return out, nil
}

// SteadyLoadInterval is the load interval of the steady-cost scenario's
// members, and SteadyLoadWindow their load window.
const (
	SteadyLoadInterval = time.Second
	SteadyLoadWindow   = 5 * time.Second
)

// SteadyCost runs 8 members holding 10,000 roles (every member awaits every
// role, as an application would) for the given time, and reports etcd
// requests per second by kind, lease renewals per member per TTL, and the
// keys under the rink's prefix: all of which grow with members, not roles.
// Every member also records load for the roles it holds (a skewed load:
// role i gets 1/(1+i%100) units every 10 ms), with a load interval of
// SteadyLoadInterval, and the scenario reports how often members wrote
// their load summaries: load_writes_per_member_per_interval (at most 1).
// It measures once the leader's load rounds are done (settle_s after every
// role is held), and its maps in the time measured: maps_per_s.
func SteadyCost(env Env, hold time.Duration) (Sample, error) {
	const members, nroles = 8, 10000
	ttl := rink.DefaultSessionTTL
	rec := &recorder{}
	name, ms, err := cluster(env, rec, "steady", members, rink.WithRebalanceDelay(0),
		rink.WithLoadInterval(SteadyLoadInterval), rink.WithLoadWindow(SteadyLoadWindow))
	if err != nil {
		return nil, err
	}
	defer func() { stopAll(ms) }()
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() { cancel(); loops.Wait() }()
	rs := roles(nroles)
	for _, m := range ms {
		for _, role := range rs {
			loops.Add(1)
			go func() {
				defer loops.Done()
				holdLoop(ctx, m.r, role)
			}()
		}
	}
	for _, m := range ms {
		loops.Add(1)
		go func() {
			defer loops.Done()
			every(ctx, 10*time.Millisecond, func() {
				for i, role := range rs {
					m.r.AddLoad(role, 1/float64(1+i%100)) // dropped where m does not hold the role
				}
			})
		}()
	}
	loadWrites := func() (float64, error) {
		resp, err := ms[0].cli.Get(context.Background(), "rink/"+name+"/.load/", clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		n := 0.0
		for _, kv := range resp.Kvs {
			n += float64(kv.Version)
		}
		return n, nil
	}
	if err := until(time.Minute, "every role held", func() bool {
		for _, role := range rs {
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
	// Steady: the load rounds are done (no new map for five load
	// intervals, or two minutes gone), so that what follows is the cost
	// of a rink at rest: keep-alives and load summaries.
	settleFrom := time.Now()
	last, lastAt := ms[0].r.Rank().Version, time.Now()
	for time.Since(lastAt) < 5*SteadyLoadInterval && time.Since(settleFrom) < 2*time.Minute {
		time.Sleep(100 * time.Millisecond)
		if v := ms[0].r.Rank().Version; v != last {
			last, lastAt = v, time.Now()
		}
	}
	settle := lastAt.Sub(settleFrom).Seconds()
	before, err := requestCounts()
	if err != nil {
		return nil, err
	}
	writesBefore, err := loadWrites()
	if err != nil {
		return nil, err
	}
	began, versionBefore := time.Now(), ms[0].r.Rank().Version
	time.Sleep(hold)
	after, err := requestCounts()
	if err != nil {
		return nil, err
	}
	writesAfter, err := loadWrites()
	if err != nil {
		return nil, err
	}
	secs := time.Since(began).Seconds()
	maps := float64(ms[0].r.Rank().Version-versionBefore) / secs
	resp, err := ms[0].cli.Get(context.Background(), "rink/"+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	s := Sample{"keys": float64(resp.Count), "settle_s": settle, "maps_per_s": maps}
	total := 0.0
	for k, v := range after {
		rate := (v - before[k]) / secs
		if rate == 0 || k == "renewals" {
			continue
		}
		total += rate
		s[strings.ToLower(k)+"_per_s"] = rate
	}
	s["requests_per_s"] = total
	s["renewals_per_member_per_ttl"] = (after["renewals"] - before["renewals"]) / secs / members * ttl.Seconds()
	s["overlaps"] = float64(overlaps(rec.snapshot()))
	s["load_writes_per_member_per_interval"] = (writesAfter - writesBefore) / members / (secs / SteadyLoadInterval.Seconds())
	// A member key, an ack key, an election key and a load key per member;
	// the map, the whole map beside it (protocol 3), the acknowledgement
	// floor and the tail (the newest joiner's election key).
	if s["keys"] > 4*members+4 {
		return s, fmt.Errorf("%v keys for %d members", s["keys"], members)
	}
	return s, nil
}
