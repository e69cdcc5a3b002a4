package rinkd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var endpoint string

func TestMain(m *testing.M) {
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	endpoint = srv.Endpoint()
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

const testTTL = 2 * time.Second

var rinkSeq atomic.Int64

func rinkName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), rinkSeq.Add(1))
}

// startServer runs a rinkd for member of rinkName; it is shut down when the
// test ends.
func startServer(t *testing.T, rinkName, member string, opts ...rink.Option) *Server {
	t.Helper()
	return startServerOn(t, endpoint, rinkName, member, opts...)
}

// startServerOn is startServer on the etcd at ep.
func startServerOn(t *testing.T, ep, rinkName, member string, opts ...rink.Option) *Server {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := New(context.Background(), Config{Client: cli, Rink: rinkName, Member: member, TTL: testTTL,
		Options: append([]rink.Option{rink.WithRebalanceDelay(0)}, opts...), Logger: zaptest.NewLogger(t).Named(member)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown of %s: %v", member, err)
		}
	})
	return s
}

// app is the test's app: an HTTP/JSON client of one rinkd, as a program
// in another language would be.
type app struct {
	t    *testing.T
	base string
	tr   *http.Transport
	hc   *http.Client

	session string
	ranks   <-chan map[string]json.RawMessage // session events after opened
	mu      sync.Mutex
	bodies  []io.Closer
}

func newApp(t *testing.T, s *Server) *app {
	tr := &http.Transport{}
	a := &app{t: t, base: "http://" + s.Addrs().HTTP, tr: tr, hc: &http.Client{Transport: tr}}
	t.Cleanup(a.crash)
	return a
}

// crash ends every connection of the app at once: what rinkd sees when the
// app is killed.
func (a *app) crash() {
	a.mu.Lock()
	for _, b := range a.bodies {
		b.Close()
	}
	a.bodies = nil
	a.mu.Unlock()
	a.tr.CloseIdleConnections()
}

// call posts (or gets, with a nil body) and returns the status and body.
func (a *app) call(method, path string, body any) (int, string) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.base+path, rd)
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stream posts body to path and sends each JSON line's result (or error)
// on the returned channel, closed at the end of the stream.
func (a *app) stream(path string, body any) <-chan map[string]json.RawMessage {
	a.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := a.hc.Post(a.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		a.t.Fatalf("POST %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.t.Fatalf("POST %s: %s %s", path, resp.Status, msg)
	}
	a.mu.Lock()
	a.bodies = append(a.bodies, resp.Body)
	a.mu.Unlock()
	ch := make(chan map[string]json.RawMessage, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var line map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				ch <- line
			}
		}
	}()
	return ch
}

// open opens the app's session and waits for its opened event.
func (a *app) open() {
	a.t.Helper()
	ch := a.stream("/v1/session", map[string]any{})
	select {
	case line, ok := <-ch:
		var ev struct {
			Opened struct{ Session string } `json:"opened"`
		}
		if !ok || json.Unmarshal(line["result"], &ev) != nil || ev.Opened.Session == "" {
			a.t.Fatalf("no opened event: %s", line)
		}
		a.session = ev.Opened.Session
	case <-time.After(15 * time.Second):
		a.t.Fatal("the session did not open")
	}
	a.ranks = ch
}

type roleEvent struct {
	Kind       string `json:"kind"`
	Role       string `json:"role"`
	Token      int64  `json:"token,string"`
	ValidUntil int64  `json:"valid_until_unix_ms,string"`
	ValidFor   int64  `json:"valid_for_ms,string"`
	Reason     string `json:"reason"`
	Owner      string `json:"owner"`
	at         time.Time
	err        string
}

// await streams the app's events for role.
func (a *app) await(role string) <-chan roleEvent {
	a.t.Helper()
	lines := a.stream("/v1/await", map[string]any{"session": a.session, "role": role})
	ch := make(chan roleEvent, 64)
	go func() {
		defer close(ch)
		for line := range lines {
			ev := roleEvent{at: time.Now()}
			if r, ok := line["result"]; ok {
				_ = json.Unmarshal(r, &ev)
			} else {
				ev.err = string(line["error"])
			}
			ch <- ev
		}
	}()
	return ch
}

// drainAsync asks rinkd to drain; the channel is closed when it answered.
func (a *app) drainAsync() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := a.hc.Post(a.base+"/v1/drain", "application/json", strings.NewReader("{}")); err == nil {
			resp.Body.Close()
		}
	}()
	return done
}

func (a *app) release(role string, token int64) {
	a.t.Helper()
	if code, body := a.call("POST", "/v1/release", map[string]any{"session": a.session, "role": role, "token": fmt.Sprint(token)}); code != 200 {
		a.t.Fatalf("release: %d %s", code, body)
	}
}

// next returns the next event of kind, failing after d.
func next(t *testing.T, ch <-chan roleEvent, kind string, d time.Duration) roleEvent {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", kind)
			}
			if ev.Kind == kind {
				return ev
			}
			if ev.err != "" {
				t.Fatalf("stream error waiting for %s: %s", kind, ev.err)
			}
		case <-deadline:
			t.Fatalf("no %s within %v", kind, d)
		}
	}
}

// side is one member: its rinkd, its app, and the app's await stream.
type side struct {
	s    *Server
	a    *app
	evs  <-chan roleEvent
	seen []string // kinds of the events stableHolder read from evs
}

// stableHolder starts two rinkds of one rink with an app each, waits until
// the rink has settled with both ranked (so that nothing moves after), has
// both apps await role, and returns the holder first, with its grant.
func stableHolder(t *testing.T, role string, opts ...rink.Option) (holder, other side, grant roleEvent) {
	t.Helper()
	name := rinkName(t)
	var sides [2]side
	for i := range sides {
		s := startServer(t, name, fmt.Sprintf("m%d", i), opts...)
		a := newApp(t, s)
		a.open()
		sides[i] = side{s: s, a: a}
	}
	settled(t, sides[:]...)
	for i := range sides {
		sides[i].evs = sides[i].a.await(role)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-sides[0].evs:
			sides[0].seen = append(sides[0].seen, ev.Kind)
			if ev.Kind == "GRANTED" {
				return sides[0], sides[1], ev
			}
		case ev := <-sides[1].evs:
			sides[1].seen = append(sides[1].seen, ev.Kind)
			if ev.Kind == "GRANTED" {
				return sides[1], sides[0], ev
			}
		case <-deadline:
			t.Fatal("nobody was granted the role")
		}
	}
}

// settled waits until every member is ranked and at rest.
func settled(t *testing.T, sides ...side) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := 0
		for _, sd := range sides {
			code, body := sd.a.call("GET", "/v1/rank?session="+sd.a.session, nil)
			if code == 200 && strings.Contains(body, `"settled":true`) && strings.Contains(body, fmt.Sprintf(`"size":%d`, len(sides))) {
				n++
			}
		}
		if n == len(sides) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the rink did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHandoverWaitsForTheRelease(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "leader")
	if g.Token <= 0 || g.ValidFor <= 0 || g.ValidFor > testTTL.Milliseconds() {
		t.Fatalf("grant %+v: want a token and a validity within the TTL", g)
	}
	drained := h.a.drainAsync()
	defer func() { <-drained }()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	if rev.Token != g.Token || rev.Reason != "drained" {
		t.Fatalf("revocation %+v of grant %+v", rev, g)
	}
	// The app takes its time to stop; the heir must wait for it.
	for wait := time.After(300 * time.Millisecond); ; {
		select {
		case ev := <-o.evs:
			if ev.Kind == "WAITING" {
				continue
			}
			t.Fatalf("the heir got %+v before the holder released", ev)
		case <-wait:
		}
		break
	}
	released := time.Now()
	h.a.release("leader", rev.Token)
	g2 := next(t, o.evs, "GRANTED", 10*time.Second)
	if g2.at.Before(released) || g2.Token <= g.Token {
		t.Fatalf("heir's grant %+v at %v, release at %v, first token %d", g2, g2.at, released, g.Token)
	}
}

func TestUnreleasedRoleWaitsForValidity(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "leader")
	drained := h.a.drainAsync()
	defer func() { <-drained }()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	// The app never releases (a stopped process): the heir waits until
	// the last validity sent has passed.
	g2 := next(t, o.evs, "GRANTED", 2*testTTL)
	if until := time.UnixMilli(rev.ValidUntil); g2.at.Before(until) {
		t.Fatalf("heir granted at %v, before the holder's grant lapsed at %v", g2.at, until)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
}

func TestAppGoneHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "leader")
	// Renewed after the crash, the grant would be valid until about now +
	// TTL: a heir granted before then proves nothing waited for it.
	until := time.Now().Add(time.Duration(g.ValidFor) * time.Millisecond)
	h.a.crash()
	g2 := next(t, o.evs, "GRANTED", 10*time.Second)
	if !g2.at.Before(until) {
		t.Fatalf("heir granted at %v, only after the crashed app's grant lapsed at %v", g2.at, until)
	}
}

func TestRenewalsExtendTheGrant(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	s := startServer(t, name, "m0")
	a := newApp(t, s)
	a.open()
	evs := a.await("r")
	g := next(t, evs, "GRANTED", 10*time.Second)
	until := g.ValidUntil
	for until < g.ValidUntil+testTTL.Milliseconds() {
		ev := next(t, evs, "RENEWED", testTTL)
		if ev.Token != g.Token || ev.ValidUntil <= until {
			t.Fatalf("renewal %+v after validity %d", ev, until)
		}
		until = ev.ValidUntil
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	a := newApp(t, s)
	a.open()
	cases := []struct {
		method, path string
		body         any
		code         int
	}{
		{"POST", "/v1/session", map[string]any{}, 409},
		{"POST", "/v1/await", map[string]any{"session": a.session, "role": ""}, 400},
		{"POST", "/v1/await", map[string]any{"session": "nope", "role": "r"}, 404},
		{"POST", "/v1/await", map[string]any{"role": "r"}, 400},
		{"POST", "/v1/release", map[string]any{"session": a.session, "role": "r"}, 400},
		{"POST", "/v1/release", map[string]any{"session": a.session, "role": "r", "token": "x"}, 400},
		{"POST", "/v1/load", map[string]any{"session": a.session, "role": "r", "units": -1}, 400},
		{"POST", "/v1/load", map[string]any{"session": a.session, "role": "r", "units": 2.5}, 200},
		{"GET", "/v1/owners", nil, 400},
		{"GET", "/v1/owners?role=BTC/ETH", nil, 200},
		{"GET", "/v1/rank?session=nope", nil, 404},
		{"POST", "/v1/await", "not json", 400},
	}
	for _, c := range cases {
		if code, body := a.call(c.method, c.path, c.body); code != c.code {
			t.Errorf("%s %s %v: %d %s, want %d", c.method, c.path, c.body, code, body, c.code)
		}
	}
	// Draining refuses new sessions.
	if code, body := a.call("POST", "/v1/drain", map[string]any{}); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	b := newApp(t, s)
	if code, _ := b.call("POST", "/v1/session", map[string]any{}); code != 400 {
		t.Errorf("a session while draining: %d, want 400 (FAILED_PRECONDITION)", code)
	}
}

// TestHTTPRoutes checks that every route of http_rules.yaml reaches the
// service (a gateway without it answers 404 "Not Found").
func TestHTTPRoutes(t *testing.T) {
	t.Parallel()
	y, err := protoFiles.ReadFile("proto/rink/v1/http_rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := regexp.MustCompile(`(?m)^\s+(get|post): (\S+)$`).FindAllStringSubmatch(string(y), -1)
	if len(routes) < 9 {
		t.Fatalf("only %d routes in http_rules.yaml", len(routes))
	}
	s := startServer(t, rinkName(t), "m0")
	a := newApp(t, s)
	for _, r := range routes {
		if r[2] == "/v1/session" || r[2] == "/v1/watch" || r[2] == "/v1/drain" {
			continue // streams and side effects: the other tests use them
		}
		var body any
		if r[1] == "post" {
			body = map[string]any{}
		}
		code, resp := a.call(strings.ToUpper(r[1]), r[2], body)
		if code == 404 && strings.Contains(resp, `"Not Found"`) {
			t.Errorf("%s %s is not routed: %s", r[1], r[2], resp)
		}
	}
}

func TestHealthAndProbes(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	conn, err := grpc.NewClient("passthrough:///"+s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(want healthpb.HealthCheckResponse_ServingStatus, probe int) {
		t.Helper()
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "rink.v1.Rink"})
		if err != nil || resp.Status != want {
			t.Fatalf("health: %v %v, want %v", resp, err, want)
		}
		r, err := http.Get("http://" + s.Addrs().Probe + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != probe {
			t.Fatalf("/readyz: %d, want %d", r.StatusCode, probe)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.readyInfo().Following {
		if time.Now().After(deadline) {
			t.Fatal("rinkd never followed the rink")
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(healthpb.HealthCheckResponse_SERVING, 200)
	if _, err := s.Drain(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING, 503)
}

func TestWatchResumes(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	s := startServer(t, name, "m0")
	a := newApp(t, s)
	a.open()
	type aev struct {
		Version  int64 `json:"version,string"`
		Lineage  int64 `json:"lineage,string"`
		Snapshot bool  `json:"snapshot"`
		Reset    bool  `json:"reset"`
		Changes  []struct{ Kind, Member string }
		Members  []struct{ Name string }
	}
	watch := func(ctx context.Context, from, lineage int64) <-chan aev {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/watch?from_version=%d&lineage=%d", a.base, from, lineage), nil)
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan aev, 64)
		go func() {
			defer close(ch)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var line struct{ Result aev }
				if json.Unmarshal(sc.Bytes(), &line) == nil {
					ch <- line.Result
				}
			}
		}()
		return ch
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Once rinkd's Observer shows m0, a snapshot lists it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, body := a.call("GET", "/v1/owners?role=r", nil); strings.Contains(body, `"found":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rinkd's Observer never showed an owner")
		}
		time.Sleep(10 * time.Millisecond)
	}
	first := <-watch(ctx, 0, 0)
	if !first.Snapshot || first.Reset || len(first.Members) != 1 {
		t.Fatalf("first event %+v: want a snapshot, no reset", first)
	}
	// m1 joins: the map changes.
	s1 := startServer(t, name, "m1")
	b := newApp(t, s1)
	b.open()
	resumed := watch(ctx, first.Version, first.Lineage)
	timeout := time.After(15 * time.Second)
	for joined := false; !joined; {
		select {
		case ev, ok := <-resumed:
			if !ok {
				t.Fatal("watch ended")
			}
			if ev.Snapshot {
				t.Fatalf("a resumed watch sent a snapshot: %+v", ev)
			}
			if ev.Version <= first.Version {
				t.Fatalf("a resumed watch sent version %d, not after %d", ev.Version, first.Version)
			}
			for _, c := range ev.Changes {
				joined = joined || (c.Member == "m1" && (c.Kind == "ranked" || c.Kind == "joined"))
			}
		case <-timeout:
			t.Fatal("the resumed watch never showed m1 joining")
		}
	}
	ev := <-watch(ctx, first.Version+1000, first.Lineage)
	if !ev.Snapshot || !ev.Reset {
		t.Fatalf("a watch from an unknown version: %+v, want a snapshot with reset", ev)
	}
}

func TestSecondaryIsPromoted(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "r", rink.WithReplicas(2))
	if !slices.Contains(o.seen, "SECONDARY") {
		next(t, o.evs, "SECONDARY", 10*time.Second)
	}
	h.a.crash()
	end := next(t, o.evs, "SECONDARY_ENDED", 10*time.Second)
	if end.Reason != "promoted" {
		t.Fatalf("secondary ended: %+v, want promoted", end)
	}
	g2 := next(t, o.evs, "GRANTED", 10*time.Second)
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
}
