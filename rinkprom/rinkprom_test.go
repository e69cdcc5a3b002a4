package rinkprom_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rtest "github.com/rink-go/rink/internal/testutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/rinkprom"
)

// TestMetricsAfterHandover scrapes the registry after a handover.
func TestMetricsAfterHandover(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := client(), client()
	defer ca.Close()
	defer cb.Close()

	m := rinkprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	opts := []rink.Option{rink.WithEvents(m.Observe), rink.WithRebalanceDelay(0), rink.WithSessionTTL(2 * time.Second)}
	a, err := rink.New(ca, "metrics", append(opts, rink.WithMemberName("a"))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AwaitRoleContext(context.Background(), "leader"); err != nil {
		t.Fatal(err)
	}
	b, err := rink.New(cb, "metrics", append(opts, rink.WithMemberName("b"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	rtest.Eventually(t, 10*time.Second, "b ranked", func() bool { return b.Rank().Index == 1 })
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rtest.Eventually(t, 10*time.Second, "b holds every slot", func() bool {
		// b holds every slot once the hand-over map arrives, and leads once
		// its campaign wins, a moment later.
		return gauge(t, reg, "rink_slots_held", "b") == rink.DefaultSlots && gauge(t, reg, "rink_member_leader", "b") == 1
	})
	rtest.Eventually(t, 10*time.Second, "b sees the rink at rest", func() bool { return gauge(t, reg, "rink_settled", "b") == 1 })

	checks := []struct {
		metric, member string
		want           float64
	}{
		{"rink_slots_held", "a", 0},
		{"rink_settled", "a", 0},
		{"rink_member_index", "b", 0},
		{"rink_size", "b", 1},
		{"rink_member_leader", "b", 1},
		{"rink_member_waiting", "b", 0},
		{"rink_fences_total", "b", 0},
		{"rink_acquisitions_total", "a", rink.DefaultSlots},
		{"rink_releases_total", "a", rink.DefaultSlots},
		// One replica per slot: the replicas' series exist, at 0.
		{"rink_secondary_slots_held", "b", 0},
		{"rink_secondary_acquisitions_total", "a", 0},
		{"rink_secondary_releases_total", "a", 0},
		{"rink_promotions_total", "b", 0},
	}
	for _, c := range checks {
		if got := gauge(t, reg, c.metric, c.member); got != c.want {
			t.Errorf("%s{member=%q} = %v, want %v", c.metric, c.member, got, c.want)
		}
	}
	// b took a's half when a left; the half it took when it joined counts
	// too if b saw the map from before it was ranked.
	if got := gauge(t, reg, "rink_handovers_total", "b"); got != rink.DefaultSlots/2 && got != rink.DefaultSlots {
		t.Errorf("rink_handovers_total{member=\"b\"} = %v, want %d or %d", got, rink.DefaultSlots/2, rink.DefaultSlots)
	}
	if n, err := testutil.GatherAndCount(reg, "rink_handover_wait_seconds", "rink_map_apply_seconds"); err != nil || n != 4 {
		t.Errorf("histogram series: %d, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rink_member_leader 1 while this member is the rink's leader.
# TYPE rink_member_leader gauge
rink_member_leader{member="a",rink="metrics"} 0
rink_member_leader{member="b",rink="metrics"} 1
`), "rink_member_leader"); err != nil {
		t.Error(err)
	}
	if got := gauge(t, reg, "rink_member_index", "a"); got != -1 {
		t.Errorf("index of a after Shutdown = %v, want -1", got)
	}
	m.Forget("metrics", "a")
	if got := gauge(t, reg, "rink_acquisitions_total", "a"); got != -42 {
		t.Errorf("a's series still exported after Forget: %v", got)
	}
}

// gauge reads one series' value (gauge or counter) from the registry.
func gauge(t *testing.T, reg *prometheus.Registry, name, member string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "member" && lp.GetValue() == member {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -42
}

// TestLoadGauges: a load summary sets the member's load and awaited roles.
func TestLoadGauges(t *testing.T) {
	m := rinkprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Observe(rink.Event{Kind: rink.EventRankChanged, Rink: "r", Member: "a", Slot: -1, Rank: rink.Rank{Index: 0, Size: 1}})
	if got := gauge(t, reg, "rink_member_load", "a"); got != 0 {
		t.Errorf("rink_member_load before any summary = %v, want 0", got)
	}
	m.Observe(rink.Event{Kind: rink.EventLoadReported, Rink: "r", Member: "a", Slot: -1, Load: 12.5, Roles: 3})
	if got := gauge(t, reg, "rink_member_load", "a"); got != 12.5 {
		t.Errorf("rink_member_load = %v, want 12.5", got)
	}
	if got := gauge(t, reg, "rink_member_awaited_roles", "a"); got != 3 {
		t.Errorf("rink_member_awaited_roles = %v, want 3", got)
	}
	m.Observe(rink.Event{Kind: rink.EventLoadBalanced, Rink: "r", Member: "a", Slot: -1, Imbalance: 1.04, Moved: 7})
	m.Observe(rink.Event{Kind: rink.EventLoadBalanced, Rink: "r", Member: "a", Slot: -1, Imbalance: 1.02})
	for _, c := range []struct {
		metric string
		want   float64
	}{{"rink_load_imbalance", 1.02}, {"rink_load_rounds_total", 2}, {"rink_load_moves_total", 7}} {
		if got := gauge(t, reg, c.metric, "a"); got != c.want {
			t.Errorf("%s = %v, want %v", c.metric, got, c.want)
		}
	}
}

// TestDrainMetrics: drains feed the histogram, and timed-out ones the
// counter.
func TestDrainMetrics(t *testing.T) {
	m := rinkprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Observe(rink.Event{Kind: rink.EventDrained, Rink: "r", Member: "a", Slot: 3, Wait: 20 * time.Millisecond})
	m.Observe(rink.Event{Kind: rink.EventDrainTimedOut, Rink: "r", Member: "a", Slot: 4, Wait: time.Second})
	if got := gauge(t, reg, "rink_drain_timeouts_total", "a"); got != 1 {
		t.Errorf("rink_drain_timeouts_total = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "rink_drain_seconds" {
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
				t.Errorf("rink_drain_seconds has %d samples, want 2", n)
			}
			return
		}
	}
	t.Error("no rink_drain_seconds")
}

// TestReplicaMetrics: with two replicas per slot and two members, each
// holds as a secondary what the other holds as primary; when one leaves,
// the other is promoted to every slot it held as a secondary, and the
// leaver's secondaries are released.
func TestReplicaMetrics(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	m := rinkprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	const slots = 64
	members := map[string]*rink.Rink{}
	for i, name := range []string{"a", "b"} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		r, err := rink.New(cli, "replicated", rink.WithMemberName(name), rink.WithReplicas(2), rink.WithSlots(slots),
			rink.WithZone(fmt.Sprint("zone-", i)), rink.WithEvents(m.Observe), rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Shutdown(context.Background())
		members[name] = r
	}
	rtest.Eventually(t, 10*time.Second, "at rest, each slot held by both, once as primary", func() bool {
		ra, rb := members["a"].Rank(), members["b"].Rank()
		return ra.Settled && rb.Settled && ra.Version == rb.Version && gauge(t, reg, "rink_slots_held", "a")+gauge(t, reg, "rink_slots_held", "b") == slots &&
			gauge(t, reg, "rink_secondary_slots_held", "a") == gauge(t, reg, "rink_slots_held", "b") &&
			gauge(t, reg, "rink_secondary_slots_held", "b") == gauge(t, reg, "rink_slots_held", "a") &&
			gauge(t, reg, "rink_slots_held", "a") > 0 && gauge(t, reg, "rink_slots_held", "b") > 0
	})
	// (b may have been promoted already, when it was ranked: a slot it held
	// as a secondary a moment before moved to it warm.)
	warm, promoted := gauge(t, reg, "rink_secondary_slots_held", "b"), gauge(t, reg, "rink_promotions_total", "b")
	if got := gauge(t, reg, "rink_secondary_acquisitions_total", "b"); got < warm+promoted {
		t.Errorf("b holds %v secondaries and was promoted to %v, acquired %v", warm, promoted, got)
	}
	if err := members["a"].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rtest.Eventually(t, 10*time.Second, "b holds every slot, as primary", func() bool {
		return gauge(t, reg, "rink_slots_held", "b") == slots && gauge(t, reg, "rink_secondary_slots_held", "b") == 0
	})
	for _, c := range []struct {
		metric, member string
		want           float64
	}{
		{"rink_promotions_total", "b", promoted + warm}, // every slot b held warm
		{"rink_secondary_slots_held", "a", 0},
		{"rink_secondary_releases_total", "a", gauge(t, reg, "rink_secondary_acquisitions_total", "a")},
		{"rink_secondary_releases_total", "b", gauge(t, reg, "rink_secondary_acquisitions_total", "b")},
	} {
		if got := gauge(t, reg, c.metric, c.member); got != c.want {
			t.Errorf("%s{member=%q} = %v, want %v", c.metric, c.member, got, c.want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rink_secondary_slots_held Slots this member holds as a secondary, keeping their roles warm for their primary on another member.
# TYPE rink_secondary_slots_held gauge
rink_secondary_slots_held{member="a",rink="replicated"} 0
rink_secondary_slots_held{member="b",rink="replicated"} 0
`), "rink_secondary_slots_held"); err != nil {
		t.Error(err)
	}
}

// TestSecondaryEvents: the replicas' metrics follow the events alone.
func TestSecondaryEvents(t *testing.T) {
	m := rinkprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for s := range 3 {
		m.Observe(rink.Event{Kind: rink.EventSecondaryAcquired, Rink: "r", Member: "a", Slot: s})
	}
	m.Observe(rink.Event{Kind: rink.EventSecondaryReleased, Rink: "r", Member: "a", Slot: 0, Cause: rink.ErrRoleMoved})
	m.Observe(rink.Event{Kind: rink.EventSecondaryReleased, Rink: "r", Member: "a", Slot: 1, Cause: rink.ErrPromoted})
	m.Observe(rink.Event{Kind: rink.EventAcquired, Rink: "r", Member: "a", Slot: 1, Token: 9})
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{"rink_secondary_slots_held", 1},
		{"rink_secondary_acquisitions_total", 3},
		{"rink_secondary_releases_total", 2},
		{"rink_promotions_total", 1},
		{"rink_slots_held", 1},
		{"rink_acquisitions_total", 1},
	} {
		if got := gauge(t, reg, c.metric, "a"); got != c.want {
			t.Errorf("%s = %v, want %v", c.metric, got, c.want)
		}
	}
}
