package rink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rink-go/rink/internal/wire"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// startGRPCProxy runs etcd's own gRPC proxy (the one 'etcd grpc-proxy
// start' runs, from server/v3/proxy/grpcproxy) inside the test process, in
// front of the shared etcd, on a loopback port chosen at run time, and
// returns its address. It is built as etcdmain builds it, less what rink
// does not use (the metrics interceptors, namespacing, leasing, endpoint
// registration, and the Election and Lock services: rink campaigns with
// clientv3/concurrency over KV and Watch). The proxy stops when the test
// ends, after the members started later (cleanups run last first).
func startGRPCProxy(t testing.TB) string {
	t.Helper()
	backend, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{testEndpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lg := zap.NewNop()
	kvp, _ := grpcproxy.NewKvProxy(backend)
	watchp, watchDone := grpcproxy.NewWatchProxy(ctx, lg, backend)
	clusterp, _ := grpcproxy.NewClusterProxy(lg, backend, "", "")
	leasep, leaseDone := grpcproxy.NewLeaseProxy(ctx, backend)
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(math.MaxUint32))
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterWatchServer(srv, watchp)
	pb.RegisterClusterServer(srv, clusterp)
	pb.RegisterLeaseServer(srv, leasep)
	pb.RegisterMaintenanceServer(srv, grpcproxy.NewMaintenanceProxy(backend))
	pb.RegisterAuthServer(srv, grpcproxy.NewAuthProxy(backend))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		backend.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		<-served
		cancel()
		for what, done := range map[string]<-chan struct{}{"watch": watchDone, "lease": leaseDone} {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("the proxy's %s service did not stop", what)
			}
		}
		backend.Close()
	})
	return lis.Addr().String()
}

// leaseOf returns the lease of member's key in rink name, read directly
// from etcd.
func leaseOf(t testing.TB, cli *clientv3.Client, name, member string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), newKeys(name).Member(member))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("member key of %s: %v %v", member, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// proxyFolded reads etcd_grpc_proxy_events_coalescing_total, the events
// the gRPC proxies of this process delivered to a client watch from a
// watch on etcd that served another one too.
func proxyFolded(t testing.TB) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_grpc_proxy_events_coalescing_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestGRPCProxy runs a rink through etcd's gRPC proxy, which folds the
// watches of its clients on one range into one watch on etcd and renews
// leases for them with a keep-alive loop of its own. a and c (and every
// newcomer) connect through the proxy, b directly. Each member in turn is
// replaced the way a rolling deploy does it (a newcomer joins and waits,
// the old member leaves gracefully), then the leader crashes (its client
// closes; its lease must expire on its own, and the proxy must not keep it
// alive). After each step every role the members await is held by exactly
// one of them, and the history of every member shows no slot held twice at
// one instant and fencing tokens that only increase.
func TestGRPCProxy(t *testing.T) {
	const ttl = 2 * time.Second // join's
	addr := startGRPCProxy(t)
	direct := newClient(t)
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithRebalanceDelay(2 * time.Second), h.hook()} // newcomers wait for a departure, as in a rolling deploy
	roles := partitions(48)

	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() {
		cancel()
		loops.Wait()
	}()
	clients := map[*Rink]*clientv3.Client{}
	start := func(member string, cli *clientv3.Client) *Rink {
		m := join(t, cli, name, append([]Option{WithMemberName(member)}, opts...)...)
		clients[m] = cli
		for _, role := range roles {
			loops.Add(1)
			go func() {
				defer loops.Done()
				holdLoop(ctx, m, role)
			}()
		}
		return m
	}
	// step settles the live members and checks that each role is held by
	// exactly one of them.
	step := func(what string, live []*Rink) {
		t.Helper()
		settle(t, h, live...)
		for _, role := range roles {
			eventually(t, 5*time.Second, what+": "+role+" held once", func() bool { return len(holding(role, live...)) == 1 })
		}
		h.check(t)
	}

	began, folded := time.Now(), proxyFolded(t)
	a := start("a", newClient(t, addr))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := start("b", direct)
	c := start("c", newClient(t, addr))
	live := []*Rink{a, b, c}
	eventually(t, 10*time.Second, "all ranked", func() bool {
		for _, m := range live {
			if rk := m.Rank(); rk.Index < 0 || rk.Size != len(live) {
				return false
			}
		}
		return true
	})
	step("start", live)
	if l := a.Rank().Leader; l != "a" {
		t.Fatalf("leader is %q, want a (through the proxy)", l)
	}

	// A rolling replacement, newcomers through the proxy: every role moves
	// once, to the newcomer that takes its holder's place.
	mark := time.Now()
	for i, old := range slices.Clone(live) {
		n := start(fmt.Sprint("new", i), newClient(t, addr))
		live = append(live, n)
		eventually(t, 10*time.Second, n.Member()+" listed as waiting", func() bool { return n.Rank().Waiting })
		want := ownedBy(old.ownersNow(), old.Member())
		if err := old.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatalf("shutdown of %s: %v", old.Member(), err)
		}
		live = slices.DeleteFunc(live, func(r *Rink) bool { return r == old })
		eventually(t, 10*time.Second, n.Member()+" ranked", func() bool { return n.Rank().Index == i })
		step("replacing "+old.Member(), live)
		if got := ownedBy(n.ownersNow(), n.Member()); len(got) != len(want) {
			t.Fatalf("%s owns %d slots, its predecessor %s had %d", n.Member(), len(got), old.Member(), len(want))
		}
	}
	folded = proxyFolded(t) - folded
	if folded == 0 {
		t.Error("the proxy folded no watches: this test does not exercise it")
	}
	moves, _ := roleMoves(h, roles, mark)
	for _, role := range roles {
		if moves[role] != 1 {
			t.Errorf("%s (slot %d) acquired %d times during the replacement, want 1", role, wire.SlotOf(role, DefaultSlots), moves[role])
		}
	}

	// The leader crashes: its client closes without revoking its lease.
	var leader *Rink
	for _, m := range live {
		if m.Member() == live[0].Rank().Leader {
			leader = m
		}
	}
	if leader == nil {
		t.Fatalf("no live member leads: %q", live[0].Rank().Leader)
	}
	lease := leaseOf(t, direct, name, leader.Member())
	crash := time.Now()
	clients[leader].Close()
	live = slices.DeleteFunc(live, func(r *Rink) bool { return r == leader })
	// Through the proxy as directly, the lease lives at most a TTL after
	// the last renewal the member asked for, which came before the crash
	// (plus etcd's expiry check, every 500 ms, and slack for -race). The
	// proxy renews a lease itself, on its own client, for as long as a
	// client's keep-alive stream stays open (up to a TTL after its last
	// request); a closed client closes the stream, and the proxy stops.
	var expired time.Duration
	eventually(t, ttl+3*time.Second, "the crashed leader's lease expired", func() bool {
		resp, err := direct.TimeToLive(ctxTimeout(t, time.Second), lease)
		if err == nil && resp.TTL < 0 {
			expired = time.Since(crash)
			return true
		}
		return false
	})
	if expired > ttl+1500*time.Millisecond {
		t.Errorf("the crashed leader's lease expired %v after the crash, TTL %v: something kept it alive", expired, ttl)
	}
	eventually(t, 10*time.Second, "a new leader", func() bool {
		l := live[0].Rank().Leader
		return l != "" && l != leader.Member()
	})
	step("after the crash of "+leader.Member(), live)
	select {
	case <-leader.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the crashed member did not stop")
	}
	if err := leader.Shutdown(ctxTimeout(t, 5*time.Second)); !errors.Is(err, ErrClientClosed) {
		t.Errorf("Shutdown after client close: %v", err)
	}
	// Renewals through the proxy kept every other member's session.
	for _, e := range h.snapshot() {
		if (e.Kind == EventFenced || e.Kind == EventRejoined) && e.Member != leader.Member() {
			t.Errorf("%s lost its session (%v, cause %v): only the crashed member may", e.Member, e.Kind, e.Cause)
		}
	}
	t.Logf("through the gRPC proxy: 3 members, 3 replacements, leader %s crashed (lease gone %v after); %v in all; %v events delivered from shared watches before the crash",
		leader.Member(), expired.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), folded)
	cancel()
	loops.Wait()
	h.check(t)
}
