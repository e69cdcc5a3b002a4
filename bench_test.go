package rink

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Benchmarks of handover, failover and rolling deploys against the shared
// embedded etcd (fsync off). Each iteration is one event; the figures are
// reported as min/median/max metrics. Run, for example:
//
//	go test -run '^$' -bench 'Handover|Failover|Rolling' -benchtime 5x .

func report(b *testing.B, unit string, scale time.Duration, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		b.Fatal("no samples")
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	f := func(d time.Duration) float64 { return float64(d) / float64(scale) }
	b.ReportMetric(f(s[0]), "min-"+unit)
	b.ReportMetric(f(s[len(s)/2]), "median-"+unit)
	b.ReportMetric(f(s[len(s)-1]), "max-"+unit)
	b.ReportMetric(0, "ns/op") // wall time per iteration includes setup; not a figure
}

// BenchmarkHandover measures the gap between the holder's release and the
// successor's acquisition when the holder shuts down gracefully.
func BenchmarkHandover(b *testing.B) {
	for _, leads := range []bool{false, true} {
		b.Run(fmt.Sprintf("holder_leads=%v", leads), func(b *testing.B) {
			var all []time.Duration
			for i := 0; i < b.N; i++ {
				h := &history{}
				first, second := "b", "a"
				if leads {
					first, second = "a", "b"
				}
				a, bm, _ := pair(b, h, first, second)
				settle(b, h, a, bm)
				role := roleOf(b, a)
				mark := time.Now()
				if err := a.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				if _, err := bm.AwaitRoleContext(ctxTimeout(b, 10*time.Second), role); err != nil {
					b.Fatal(err)
				}
				h.check(b)
				all = append(all, gaps(h.snapshot(), wire.SlotOf(role, DefaultSlots), mark)...)
				bm.Shutdown(context.Background())
			}
			report(b, "ms", time.Millisecond, all)
		})
	}
}

// BenchmarkCrashFailover measures, at TTL 2 s, the time from a holder's
// crash (its client closed, the lease left to expire) to its successor
// holding the role. The crash comes at a random point of the holder's
// renewal cycle (every TTL/3), as a real one would.
func BenchmarkCrashFailover(b *testing.B) {
	var all []time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < b.N; i++ {
		h := &history{}
		a, bm, ca := pair(b, h, "a", "b")
		settle(b, h, a, bm)
		role := roleOf(b, a)
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second / 3))))
		crash := time.Now()
		ca.Close()
		if _, err := bm.AwaitRoleContext(ctxTimeout(b, 15*time.Second), role); err != nil {
			b.Fatal(err)
		}
		all = append(all, time.Since(crash))
		h.check(b)
		bm.Shutdown(context.Background())
	}
	report(b, "s", time.Second, all)
}

// BenchmarkRollingDeploy replaces 4 members × 64 roles one by one and
// reports role moves per deploy (64 means each role moved exactly once)
// and the worst gap per role move in each deploy.
func BenchmarkRollingDeploy(b *testing.B) {
	roles := partitions(64)
	var worst []time.Duration
	total := 0
	for i := 0; i < b.N; i++ {
		h := &history{}
		_, mark := rollingDeploy(b, h, func(*Rink) {})
		h.check(b)
		moves, g := roleMoves(h, roles, mark)
		for _, n := range moves {
			total += n
		}
		slices.Sort(g)
		worst = append(worst, g[len(g)-1])
	}
	b.ReportMetric(float64(total)/float64(b.N), "moves/deploy")
	report(b, "worst-gap-ms", time.Millisecond, worst)
}

// BenchmarkOwner is the routing fast path: no allocation, no lock.
func BenchmarkOwner(b *testing.B) {
	r := join(b, newClient(b), rinkName(b), WithMemberName("solo"))
	eventually(b, 10*time.Second, "ranked", func() bool { return r.Rank().Index == 0 })
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := r.Owner("BTC/ETH"); !ok {
			b.Fatal("no owner")
		}
	}
}

// BenchmarkGet is the non-blocking "do I hold it?" check.
func BenchmarkGet(b *testing.B) {
	r := join(b, newClient(b), rinkName(b), WithMemberName("solo"))
	if _, err := r.AwaitRoleContext(ctxTimeout(b, 10*time.Second), "BTC/ETH"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := r.Get("BTC/ETH"); !ok {
			b.Fatal("not held")
		}
	}
}

// BenchmarkTakeOverHalf measures what a member does on the path of a
// handover when a departure from a rink of two gives it the other half of
// 1,024 slots in a whole map: apply it, reconcile, and start the slots.
func BenchmarkTakeOverHalf(b *testing.B) {
	const S = 1024
	half, all := make([]int, S), make([]int, S)
	for s := range half {
		half[s] = s % 2
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m := newBare(b, "b", S, 5)
		m.put(memberKV("a", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
		m.put(mapKV(twoSlots(1, []string{"a", "b"}, half...), 10, 10), memberKV("a", 3, 11, 1, 10))
		next := mapKV(twoSlots(2, []string{"b"}, all...), 10, 12)
		next.Value = wire.WithTransition(next.Value, wire.Transition{View: 11, From: 1, Gone: []string{"a"}})
		b.StartTimer()
		m.r.onWatch(watchBatch{wide: true, rev: 12, events: []*clientv3.Event{
			{Type: clientv3.EventTypePut, Kv: next},
			{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(newKeys("bare").Member("a")), ModRevision: 12}},
		}})
		m.r.tryAcquire()
		b.StopTimer()
		if !m.held(0) {
			b.Fatal("slot 0 not taken over")
		}
		m.r.cancel()
		b.StartTimer()
	}
}
