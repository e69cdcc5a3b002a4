package rink

import (
	"context"
	"flag"
	"fmt"
	"github.com/rink-go/rink/internal/testutil"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/internal/wire"
)

// The tests share one embedded etcd, started by TestMain on loopback ports
// chosen at run time. Each test uses rinks of its own names.
//
// The package's tests spend most of their time waiting on etcd and on
// timers (about 70 s of CPU in 430 s, under -race): the long ones that
// neither cut a member off through a proxy nor delay its traffic run in
// parallel (t.Parallel), after the others, eight at a time (TestMain). A test that times a member's
// traffic stays sequential, so that the others' load does not shift its
// timing.
var testEndpoint string

func TestMain(m *testing.M) {
	flag.Parse()
	testutil.Parallel(8)                                          // (the parallel tests wait; they do not compute)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true}) // tests measure rink, not the disk
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting etcd:", err)
		os.Exit(2)
	}
	testEndpoint = srv.Endpoint()
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// freeURL returns a loopback URL on a port that was free a moment ago.
func freeURL() url.URL {
	u, err := embedetcd.FreeURL()
	if err != nil {
		panic(err)
	}
	return u
}

// newClient connects to endpoint (the shared etcd by default) and closes
// the client when the test ends.
func newClient(t testing.TB, endpoint ...string) *clientv3.Client {
	t.Helper()
	if len(endpoint) == 0 {
		endpoint = []string{testEndpoint}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoint,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var rinkSeq atomic.Int64

// rinkName returns a rink name no other test uses.
func rinkName(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s-%d", name, rinkSeq.Add(1))
}

// join creates a member and shuts it down when the test ends.
func join(t testing.TB, cli *clientv3.Client, name string, opts ...Option) *Rink {
	t.Helper()
	opts = append([]Option{WithSessionTTL(2 * time.Second), WithRebalanceDelay(0), WithLogger(zaptest.NewLogger(t, zaptest.Level(testLogLevel)))}, opts...)
	r, err := New(cli, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil && ctx.Err() != nil {
			t.Errorf("shutdown of %s: %v", r.Member(), err)
		}
	})
	return r
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitSettled waits until every member says that the rink is at rest
// (Rank.Settled) with the same map.
func waitSettled(t testing.TB, ms ...*Rink) {
	t.Helper()
	eventually(t, 20*time.Second, "the rink at rest", func() bool {
		for _, m := range ms {
			if rk := m.Rank(); !rk.Settled || rk.Version != ms[0].Rank().Version {
				return false
			}
		}
		return true
	})
}

// history records every acquisition, release and fence of every member, at
// the instant it happens inside the library, and checks the promise.
type history struct {
	mu     sync.Mutex
	events []Event
}

func (h *history) hook() Option {
	return WithEvents(func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	})
}

func (h *history) snapshot() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// holders returns, per slot, the members holding it at the end of the
// history.
func (h *history) holders() map[int][]string { return holdersIn(h.snapshot()) }

// holdersIn returns, per slot, the members holding it at the end of evs.
func holdersIn(evs []Event) map[int][]string {
	open := map[int]map[string]bool{}
	for _, e := range evs {
		switch e.Kind {
		case EventAcquired:
			if open[e.Slot] == nil {
				open[e.Slot] = map[string]bool{}
			}
			open[e.Slot][e.Member] = true
		case EventReleased:
			delete(open[e.Slot], e.Member)
		case EventFenced:
			for _, m := range open {
				delete(m, e.Member)
			}
		}
	}
	out := map[int][]string{}
	for s, m := range open {
		for name := range m {
			out[s] = append(out[s], name)
		}
		sort.Strings(out[s])
	}
	return out
}

// heldAsMapped reports whether every slot of m is held by exactly its
// owner in m, as of the end of the history.
func (h *history) heldAsMapped(m *wire.Map) bool {
	if m == nil {
		return false
	}
	held := h.holders()
	for s := 0; s < m.Slots; s++ {
		if got := held[s]; len(got) != 1 || got[0] != m.Owner(s) {
			return false
		}
	}
	return true
}

// check fails the test on the first violation of the promise: a slot (and
// so every role in it) held by two members at one instant, or a fencing
// token that does not increase across successive holdings of a slot.
func (h *history) check(t testing.TB) {
	t.Helper()
	if err := checkHistory(h.snapshot()); err != nil {
		t.Fatal(err)
	}
}

func checkHistory(events []Event) error {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	holder := map[int]string{} // slot -> member holding it
	lastToken := map[int]int64{}
	for _, e := range events {
		switch e.Kind {
		case EventAcquired:
			if h, ok := holder[e.Slot]; ok && h != e.Member {
				return fmt.Errorf("overlap: %s acquired slot %d at %v while %s held it", e.Member, e.Slot, e.Time.Format(time.StampMicro), h)
			}
			if e.Token <= lastToken[e.Slot] {
				return fmt.Errorf("token: %s acquired slot %d with token %d after token %d", e.Member, e.Slot, e.Token, lastToken[e.Slot])
			}
			holder[e.Slot], lastToken[e.Slot] = e.Member, e.Token
		case EventReleased:
			if holder[e.Slot] == e.Member {
				delete(holder, e.Slot)
			}
		case EventFenced:
			for s, m := range holder {
				if m == e.Member {
					delete(holder, s)
				}
			}
		}
	}
	return nil
}

// TestCheckerCatchesViolations shows the checker can fail.
func TestCheckerCatchesViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	overlap := []Event{
		{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
		{Kind: EventAcquired, Member: "b", Slot: 1, Token: 6, Time: at(1)},
		{Kind: EventReleased, Member: "a", Slot: 1, Time: at(2)},
	}
	if err := checkHistory(overlap); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("overlap not caught: %v", err)
	}
	stale := []Event{
		{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
		{Kind: EventFenced, Member: "a", Slot: -1, Time: at(1)},
		{Kind: EventAcquired, Member: "b", Slot: 1, Token: 5, Time: at(2)},
	}
	if err := checkHistory(stale); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("stale token not caught: %v", err)
	}
	fine := []Event{
		{Kind: EventAcquired, Member: "a", Slot: 1, Token: 5, Time: at(0)},
		{Kind: EventFenced, Member: "a", Slot: -1, Time: at(1)},
		{Kind: EventAcquired, Member: "b", Slot: 1, Token: 9, Time: at(2)},
		{Kind: EventReleased, Member: "a", Slot: 1, Time: at(3)},
		{Kind: EventReleased, Member: "b", Slot: 1, Time: at(4)},
		{Kind: EventAcquired, Member: "a", Slot: 1, Token: 10, Time: at(5)},
	}
	if err := checkHistory(fine); err != nil {
		t.Fatal(err)
	}
}

// newProxy puts an etcd proxy (pkg/v3/proxy) in front of the shared etcd,
// so that a test can cut or slow one member's connection.
func newProxy(t testing.TB) proxy.Server {
	t.Helper()
	from := freeURL()
	from.Scheme = "tcp"
	to := url.URL{Scheme: "tcp", Host: testEndpoint}
	p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: to})
	select {
	case <-p.Ready():
	case err := <-p.Error():
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// proxyClient connects to etcd through p, with keep-alives that notice a
// cut connection within seconds; it is closed when the test ends.
func proxyClient(t testing.TB, p proxy.Server) *clientv3.Client {
	t.Helper()
	cp, err := clientv3.New(clientv3.Config{
		Endpoints:            []string{strings.TrimPrefix(p.From(), "tcp://")},
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Close() })
	return cp
}

// testLogLevel is the level of the members' logs in test output; RINK_TEST_LOG=debug shows more.
var testLogLevel = func() zapcore.Level {
	if l, err := zapcore.ParseLevel(os.Getenv("RINK_TEST_LOG")); err == nil && os.Getenv("RINK_TEST_LOG") != "" {
		return l
	}
	return zapcore.WarnLevel
}()

// holdLoop awaits role on m until ctx ends, holding it each time until the
// holding ends: the loop per role a service runs.
func holdLoop(ctx context.Context, m *Rink, role string) {
	for {
		rctx, err := m.AwaitRoleContext(ctx, role)
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

// ownersNow returns a copy of the map r publishes to its API (see Owner),
// for a test to read at leisure: the run goroutine may write the
// published table in place (see applyInPlace).
func (r *Rink) ownersNow() *wire.Map {
	r.ownersMu.RLock()
	defer r.ownersMu.RUnlock()
	m := r.owners.Load()
	if m == nil {
		return nil
	}
	c := *m
	c.Table, c.Members = slices.Clone(m.Table), slices.Clone(m.Members)
	return &c
}

// tableOf is a slot table with the given entries.
func tableOf(entries ...int) wire.SlotTable {
	t := make(wire.SlotTable, len(entries))
	for i, e := range entries {
		t[i] = int32(e)
	}
	return t
}
