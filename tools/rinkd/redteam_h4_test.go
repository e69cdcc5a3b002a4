package rinkd

import (
	"context"
	"fmt"
	"github.com/rink-go/rink/internal/embedetcd"
	"go.uber.org/zap/zaptest"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestDrainWhileSessionJoins: a Drain that comes while a session is still
// joining the rink (here: waiting out a live member of the same name) must
// not return before that session is over. It returned at once, and the
// session then opened (and held roles) after the drain had answered: a
// preStop hook's `rinkd drain` would say the member had left while it was
// about to join.
func TestDrainWhileSessionJoins(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	// A live member named m0 keeps rinkd's join waiting.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pred, err := rink.New(cli, name, rink.WithMemberName("m0"), rink.WithSessionTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	predDown := false
	defer func() {
		if !predDown {
			_ = pred.Shutdown(context.Background())
		}
	}()
	s := startServer(t, name, "m0")
	conn, err := grpc.NewClient("passthrough:///"+s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rinkv1.NewRinkClient(conn).OpenSession(ctx, &rinkv1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan *rinkv1.SessionEvent, 16)
	streamErr := make(chan error, 1)
	go func() {
		defer close(evs)
		for {
			ev, err := stream.Recv()
			if err != nil {
				streamErr <- err
				return
			}
			evs <- ev
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		opening := s.opening
		s.mu.Unlock()
		if opening {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never began to join")
		}
		time.Sleep(time.Millisecond)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if _, err := s.Drain(dctx, &rinkv1.DrainRequest{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	joining, open := s.opening, s.sess != nil
	s.mu.Unlock()
	// The name is free now: a join still under way completes.
	predDown = true
	if err := pred.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(4 * testTTL)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				if joining || open {
					t.Fatalf("Drain returned while the session was joining (%v) or open (%v)", joining, open)
				}
				t.Logf("session stream: %v", <-streamErr)
				return
			}
			if ev.GetOpened() != nil {
				t.Fatalf("the session opened after Drain had returned: %v (joining %v, open %v when Drain returned)", ev, joining, open)
			}
		case <-timeout:
			t.Fatal("the session stream never ended")
		}
	}
}

// TestShutdownTimeoutKeepsTheGrant: a Shutdown whose context ends before
// the app has released a revoked role stops serving, which ends the app's
// streams from rinkd's side. That is no sign that the app has stopped (a
// stopped or busy app has not even read the end yet, and its grant is still
// valid): the heir must still wait for the grant's validity. It was granted
// the moment rinkd closed its listeners.
func TestShutdownTimeoutKeepsTheGrant(t *testing.T) {
	t.Parallel()
	h, o, _ := stableHolder(t, "leader")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		stopped <- h.s.Shutdown(ctx)
	}()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	// The app never releases.
	g2 := next(t, o.evs, "GRANTED", 3*testTTL)
	if until := time.UnixMilli(rev.ValidUntil); g2.at.Before(until) {
		t.Fatalf("heir granted at %v, %v before the holder's grant lapsed at %v", g2.at, until.Sub(g2.at), until)
	}
	if err := <-stopped; err == nil {
		t.Error("Shutdown returned no error though its context ended before the drain did")
	}
}

// openSession opens a session on s for a fresh app and returns rinkd's
// side of it.
func openSession(t *testing.T, s *Server) (*app, *session) {
	t.Helper()
	a := newApp(t, s)
	a.open()
	s.mu.Lock()
	ss := s.sess
	s.mu.Unlock()
	if ss == nil || ss.id != a.session {
		t.Fatal("no session")
	}
	return a, ss
}

func kinds(out *outbox) []string {
	var ks []string
	for _, q := range out.take() {
		ks = append(ks, q.ev.Kind.String())
	}
	return ks
}

// TestLateSecondaryAfterPromotion: Secondary runs on a goroutine of its
// own, so a promotion that comes right after the member became a secondary
// may call Assigned before that goroutine has run (its context has ended
// by then). The app must not hear SECONDARY after its GRANTED: it read
// GRANTED, SECONDARY, SECONDARY_ENDED.
func TestLateSecondaryAfterPromotion(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	_, ss := openSession(t, s)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := ss.r.AwaitRoleContext(actx, "r")
	if err != nil {
		t.Fatal(err)
	}
	a := &awaiter{s: s, ss: ss, role: "r", ctx: context.Background(), out: newOutbox()}
	secCtx, endSec := context.WithCancel(context.Background())
	endSec() // promoted: the secondary holding ended before Assigned
	a.assigned(roleCtx, "r")
	a.secondary(secCtx, "r") // the Secondary goroutine runs only now
	got := kinds(a.out)
	a.mu.Lock()
	g := a.cur
	a.mu.Unlock()
	g.release()
	a.revoked("r")
	a.wg.Wait()
	for i, k := range got {
		if k == "SECONDARY" && slices.Contains(got[:i], "GRANTED") {
			t.Fatalf("events %v: SECONDARY after GRANTED", got)
		}
	}
}

// TestShortValidityAtAssignmentIsGrantedLater: when Assigned comes while
// the holding's validity is within the slack (the lease's renewals were
// late, and catch up), rinkd sent nothing, and the holding went on with
// the app never granted it: the app waited in WAITING while the member
// held the role. Here a slack larger than Config allows stands for the
// late renewals.
func TestShortValidityAtAssignmentIsGrantedLater(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	s.cfg.Slack = testTTL * 7 / 10 // validities swing between 0.54 and 0.875 TTL
	a, ss := openSession(t, s)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := ss.r.AwaitRoleContext(actx, "r")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, ok := rink.ValidFor(roleCtx)
		if !ok {
			t.Fatal("the holding ended")
		}
		if left < s.cfg.Slack-100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the validity never fell below the slack")
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs := a.await("r")
	g := next(t, evs, "GRANTED", 3*testTTL)
	if g.ValidFor <= 0 || g.ValidFor > (testTTL-s.cfg.Slack).Milliseconds() {
		t.Fatalf("grant %+v", g)
	}
}

// TestWatchResumeFromARepeatedVersion: an operator may write an older map
// back (another table under a version already seen), which members follow
// as the next map. A watch that resumes from that version cannot be told
// which of the two maps it saw: it must get a snapshot. It got the changes
// after the first (again, or out of order), or, when the map was at the
// repeated version, nothing at all, missing the other table.
func TestWatchResumeFromARepeatedVersion(t *testing.T) {
	st := func(v int64, names ...string) rink.State {
		s := rink.State{Lineage: 7, Version: v}
		for i, n := range names {
			s.Members = append(s.Members, rink.MemberState{Name: n, Index: i, Slots: 1})
		}
		return s
	}
	v1, v2, v3, v2b, v4 := st(1, "a"), st(2, "a", "b"), st(3, "a", "b", "c"), st(2, "a", "c"), st(4, "a", "c")
	h := newHistory(v1)
	h.add(v1, v2)
	h.add(v2, v3)
	h.add(v3, v2b) // the operator's write
	if _, _, ok := h.since(7, 2); ok {
		t.Error("version 2 (seen twice, and current) resumed without a snapshot")
	}
	h.add(v2b, v4)
	if es, _, ok := h.since(7, 2); ok {
		t.Errorf("version 2 (seen twice) resumed without a snapshot: %d entries", len(es))
	}
	if es, _, ok := h.since(7, 3); !ok || len(es) != 2 || es[0].version != 2 || es[1].version != 4 {
		t.Errorf("from version 3: %+v %v", es, ok)
	}
	if es, _, ok := h.since(7, 1); !ok || len(es) != 4 {
		t.Errorf("from version 1: %+v %v", es, ok)
	}
	if es, _, ok := h.since(7, 4); !ok || len(es) != 0 {
		t.Errorf("from version 4 (current): %+v %v", es, ok)
	}
}

// TestNoGrantWhileTheSessionEnds: a holding assigned once the session is
// ending (the member has not released it yet) must not be granted: after
// the app ended its session stream, rinkd waits for nothing it was granted.
func TestNoGrantWhileTheSessionEnds(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	_, ss := openSession(t, s)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := ss.r.AwaitRoleContext(actx, "r")
	if err != nil {
		t.Fatal(err)
	}
	// The session as it is once ended, the member still holding "r".
	ending := &session{id: ss.id, r: ss.r, stop: make(chan struct{}), appGone: make(chan struct{}),
		ended: make(chan struct{}), grants: map[string]map[*grant]bool{}, reason: "session-ended"}
	close(ending.stop)
	close(ending.appGone)
	a := &awaiter{s: s, ss: ending, role: "r", ctx: context.Background(), out: newOutbox()}
	a.assigned(roleCtx, "r")
	time.Sleep(3 * a.renewEvery())
	got := kinds(a.out)
	a.revoked("r")
	a.wg.Wait()
	if slices.Contains(got, "GRANTED") {
		t.Fatalf("events %v once the session ended", got)
	}
}

// TestOwnKeyDeletedWaitsForTheGrant: an operator deletes the holder's
// member key. Its member fences and rejoins; the app, which does not
// release, keeps its grant until its validity: the other member must not be
// granted the role before then.
func TestOwnKeyDeletedWaitsForTheGrant(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "leader")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, "rink/"+h.s.cfg.Rink+"/members/"+h.s.cfg.Member); err != nil {
		t.Fatal(err)
	}
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	if rev.Token != g.Token || rev.Reason != "fenced" {
		t.Errorf("revocation %+v of grant %+v", rev, g)
	}
	deadline := time.After(4 * testTTL)
	for {
		select {
		case ev := <-o.evs:
			if ev.Kind == "GRANTED" {
				if until := time.UnixMilli(rev.ValidUntil); ev.at.Before(until) {
					t.Fatalf("heir granted at %v, %v before the holder's grant lapsed", ev.at, until.Sub(ev.at))
				}
				return
			}
		case ev := <-h.evs:
			if ev.Kind == "GRANTED" {
				return // the holder got it back, after its validity (the rejoin waits a TTL)
			}
		case <-deadline:
			t.Fatal("nobody was granted the role again")
		}
	}
}

// TestPromotionWaitsForTheGrant: with replicas, the secondary promoted
// when the holder drains is granted the role only once the holder's app,
// which never releases, has lost its grant.
func TestPromotionWaitsForTheGrant(t *testing.T) {
	t.Parallel()
	h, o, g := stableHolder(t, "r", rink.WithReplicas(2))
	drained := h.a.drainAsync()
	defer func() { <-drained }()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	g2 := next(t, o.evs, "GRANTED", 3*testTTL)
	if until := time.UnixMilli(rev.ValidUntil); g2.at.Before(until) {
		t.Fatalf("promoted secondary granted at %v, %v before the holder's grant lapsed", g2.at, until.Sub(g2.at))
	}
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
}

// cutProxy forwards TCP connections to etcd until cut, which closes
// them all and refuses new ones until heal.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns[c], p.conns[u] = true, true
			p.wg.Add(2)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestCutOffHolderWaitsForTheGrant: the holder's rinkd is cut off from
// etcd (its app is not: it reads rinkd's stream). Its member fences before
// its lease expires; the other member is granted the role only after the
// holder's last grant (or renewal) has lapsed.
func TestCutOffHolderWaitsForTheGrant(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	const role = "leader"
	var sides [2]side
	var proxies [2]*cutProxy
	for i := range sides {
		proxies[i] = newCutProxy(t, strings.TrimPrefix(endpoint, "http://"))
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxies[i].addr()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		member := fmt.Sprintf("m%d", i)
		s, err := New(context.Background(), Config{Client: cli, Rink: name, Member: member, TTL: testTTL,
			Options: []rink.Option{rink.WithRebalanceDelay(0)}, Logger: zaptest.NewLogger(t).Named(member)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Start("127.0.0.1:0", "127.0.0.1:0", ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
		a := newApp(t, s)
		a.open()
		sides[i] = side{s: s, a: a}
	}
	settled(t, sides[:]...)
	for i := range sides {
		sides[i].evs = sides[i].a.await(role)
	}
	hi := -1
	var last roleEvent
	deadline := time.After(15 * time.Second)
	for hi < 0 {
		select {
		case ev := <-sides[0].evs:
			if ev.Kind == "GRANTED" {
				hi, last = 0, ev
			}
		case ev := <-sides[1].evs:
			if ev.Kind == "GRANTED" {
				hi, last = 1, ev
			}
		case <-deadline:
			t.Fatal("nobody was granted the role")
		}
	}
	h, o := sides[hi], sides[1-hi]
	proxies[hi].setCut(true)
	lastUntil := time.UnixMilli(last.ValidUntil)
	timeout := time.After(4 * testTTL)
	for {
		select {
		case ev, ok := <-h.evs:
			if !ok {
				t.Fatal("the holder's await stream ended")
			}
			if ev.Kind == "RENEWED" || ev.Kind == "GRANTED" {
				if u := time.UnixMilli(ev.ValidUntil); u.After(lastUntil) {
					lastUntil = u
				}
			}
			if ev.Kind == "REVOKED" && ev.Reason != "fenced" {
				t.Errorf("revoked: %+v, want fenced", ev)
			}
		case ev := <-o.evs:
			if ev.Kind == "GRANTED" {
				if ev.at.Before(lastUntil) {
					t.Fatalf("the other member was granted at %v, %v before the cut-off holder's grant lapsed", ev.at, lastUntil.Sub(ev.at))
				}
				t.Logf("the other member was granted %v after the holder's last grant lapsed", ev.at.Sub(lastUntil))
				proxies[hi].setCut(false)
				return
			}
		case <-timeout:
			t.Fatal("the other member was never granted the role")
		}
	}
}

// TestLongerLeaseThanTTLWaitsForTheGrant: etcd grants no lease a TTL below
// 1.5 of its election timeouts (8 s for a 5 s election timeout, a common
// setting across zones), whatever the member asked for. The member's fence
// deadline, and so rinkd's validities, follow the TTL granted; the drain
// timeout rinkd gives its member (TTL + 1 s) followed the TTL asked for. A
// drain whose app did not release timed out after 3 s and handed the role
// over while the app's grant was valid for 4 s more.
func TestLongerLeaseThanTTLWaitsForTheGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("an etcd of its own and 8 s leases")
	}
	t.Parallel()
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true, ElectionMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	name := rinkName(t)
	const role = "leader"
	var sides [2]side
	for i := range sides {
		s := startServerOn(t, srv.Endpoint(), name, fmt.Sprintf("m%d", i))
		a := newApp(t, s)
		a.open()
		sides[i] = side{s: s, a: a}
	}
	settled(t, sides[:]...)
	for i := range sides {
		sides[i].evs = sides[i].a.await(role)
	}
	hi := -1
	var g roleEvent
	deadline := time.After(15 * time.Second)
	for hi < 0 {
		select {
		case ev := <-sides[0].evs:
			if ev.Kind == "GRANTED" {
				hi, g = 0, ev
			}
		case ev := <-sides[1].evs:
			if ev.Kind == "GRANTED" {
				hi, g = 1, ev
			}
		case <-deadline:
			t.Fatal("nobody was granted the role")
		}
	}
	h, o := sides[hi], sides[1-hi]
	t.Logf("granted for %d ms with a TTL of %v", g.ValidFor, testTTL)
	drained := h.a.drainAsync()
	defer func() { <-drained }()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	g2 := next(t, o.evs, "GRANTED", 20*time.Second)
	if until := time.UnixMilli(rev.ValidUntil); g2.at.Before(until) {
		t.Fatalf("heir granted at %v, %v before the holder's grant lapsed at %v", g2.at, until.Sub(g2.at), until)
	}
}

// TestEventSequences moves roles around three members with replicas (a
// join, a drain, an app's crash), each app releasing at once on REVOKED,
// and checks every await stream's sequence: GRANTED t, RENEWED t*, REVOKED
// t; SECONDARY, SECONDARY_ENDED, never while granted; tokens rising; and
// no two apps holding a role at once (from reading GRANTED to reading
// REVOKED).
func TestEventSequences(t *testing.T) {
	if testing.Short() {
		t.Skip("moves roles around for a while")
	}
	t.Parallel()
	name := rinkName(t)
	roles := []string{"a", "b", "c", "d", "e", "f"}
	type holding struct {
		app      int
		role     string
		from, to time.Time
		token    int64
	}
	var mu sync.Mutex
	var held []holding
	var wg sync.WaitGroup
	follow := func(i int, ap *app, role string) {
		evs := ap.await(role)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur int64
			var since time.Time
			second, last := false, int64(0)
			for ev := range evs {
				switch ev.Kind {
				case "GRANTED":
					if cur != 0 || second || ev.Token <= last {
						t.Errorf("app %d %s: GRANTED %d while granted %d, secondary %v, last token %d", i, role, ev.Token, cur, second, last)
					}
					cur, last, since = ev.Token, ev.Token, ev.at
				case "RENEWED":
					if ev.Token != cur {
						t.Errorf("app %d %s: RENEWED %d while granted %d", i, role, ev.Token, cur)
					}
				case "REVOKED":
					if ev.Token != cur {
						t.Errorf("app %d %s: REVOKED %d while granted %d", i, role, ev.Token, cur)
					}
					mu.Lock()
					held = append(held, holding{app: i, role: role, from: since, to: ev.at, token: cur})
					mu.Unlock()
					cur = 0
					code, _ := ap.call("POST", "/v1/release", map[string]any{"session": ap.session, "role": role, "token": fmt.Sprint(ev.Token)})
					_ = code
				case "SECONDARY":
					if second || cur != 0 {
						t.Errorf("app %d %s: SECONDARY while secondary %v, granted %d", i, role, second, cur)
					}
					second = true
				case "SECONDARY_ENDED":
					if !second {
						t.Errorf("app %d %s: SECONDARY_ENDED without SECONDARY", i, role)
					}
					second = false
				}
			}
			if cur != 0 {
				mu.Lock()
				held = append(held, holding{app: i, role: role, from: since, to: time.Now(), token: cur})
				mu.Unlock()
			}
		}()
	}
	var apps []*app
	var servers []*Server
	start := func(i int) {
		s := startServer(t, name, fmt.Sprintf("m%d", i), rink.WithReplicas(2))
		ap := newApp(t, s)
		ap.open()
		for _, r := range roles {
			follow(i, ap, r)
		}
		apps, servers = append(apps, ap), append(servers, s)
	}
	start(0)
	start(1)
	time.Sleep(testTTL)
	start(2)
	time.Sleep(testTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := servers[0].Drain(ctx, &rinkv1.DrainRequest{}); err != nil {
		t.Error(err)
	}
	cancel()
	time.Sleep(testTTL)
	apps[1].crash()
	time.Sleep(testTTL)
	for _, ap := range apps {
		ap.crash()
	}
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Shutdown(ctx)
		cancel()
	}
	wg.Wait()
	for i, x := range held {
		for _, y := range held[i+1:] {
			if x.role == y.role && x.app != y.app && x.from.Before(y.to) && y.from.Before(x.to) {
				t.Errorf("role %s held by app %d (token %d, %v to %v) and app %d (token %d, %v to %v) at once",
					x.role, x.app, x.token, x.from, x.to, y.app, y.token, y.from, y.to)
			}
		}
	}
	t.Logf("%d holdings", len(held))
}

// TestStoppingRevokesWithReasonStopped: when rinkd stops serving before
// its member has left (Shutdown's context ended first), the await stream's
// grant is revoked as its set closes, the holding still the member's. The
// REVOKED said "released", as if the app had released the role.
func TestStoppingRevokesWithReasonStopped(t *testing.T) {
	t.Parallel()
	s := startServer(t, rinkName(t), "m0")
	_, ss := openSession(t, s)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := ss.r.AwaitRoleContext(actx, "r")
	if err != nil {
		t.Fatal(err)
	}
	stopped := &Server{cfg: s.cfg, log: s.log} // a rinkd that stops serving
	stopped.ctx, stopped.cancel = context.WithCancel(context.Background())
	stopped.cancel()
	a := &awaiter{s: stopped, ss: ss, role: "r", ctx: context.Background(), out: newOutbox()}
	a.assigned(roleCtx, "r")
	a.mu.Lock()
	g := a.cur
	a.mu.Unlock()
	g.release()
	a.revoked("r") // the set closes: the role leaves it, still held
	a.wg.Wait()
	for _, q := range a.out.take() {
		if q.ev.Kind == rinkv1.RoleEvent_REVOKED && q.ev.Reason != "stopped" {
			t.Fatalf("REVOKED with reason %q, want stopped", q.ev.Reason)
		}
	}
}
