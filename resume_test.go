package rink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// proxiedClient connects to the shared etcd through p. It sends no
// keepalive pings: a paused proxy holds the connection's bytes, as a network
// that drops packets does until TCP retransmits them, and nothing breaks the
// connection meanwhile.
func proxiedClient(t testing.TB, p proxy.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{strings.TrimPrefix(p.From(), "tcp://")},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// slotTokens returns, per member, the token of its newest acquisition of
// each slot.
func slotTokens(h *history) map[string]map[int]int64 {
	out := map[string]map[int]int64{}
	for _, e := range h.snapshot() {
		if e.Kind == EventAcquired {
			if out[e.Member] == nil {
				out[e.Member] = map[int]int64{}
			}
			out[e.Member][e.Slot] = e.Token
		}
	}
	return out
}

// fencedSince reports whether member fenced (cause ErrFenced) after t0.
func fencedSince(h *history, member string, t0 time.Time) bool {
	for _, e := range h.snapshot() {
		if e.Member == member && e.Kind == EventFenced && e.Time.After(t0) && errors.Is(e.Cause, ErrFenced) {
			return true
		}
	}
	return false
}

// checkResumed checks that after mark every fenced member of ms acquired
// again exactly the slots the map gives it, with higher tokens than before,
// and that no other member acquired anything.
func checkResumed(t *testing.T, h *history, ms []*Rink, fenced []*Rink, mark time.Time, before map[string]map[int]int64) {
	t.Helper()
	m := ms[0].ownersNow()
	acq, _ := slotsSince(h, mark)
	after := slotTokens(h)
	for _, r := range ms {
		name := r.Member()
		own := ownedBy(m, name)
		if !slices.Contains(fenced, r) {
			own = nil
		}
		if got := slices.Sorted(maps.Keys(acq[name])); !slices.Equal(got, slices.Sorted(maps.Keys(own))) {
			t.Errorf("%s acquired %d slots after the outage, it owns %d", name, len(got), len(own))
		}
		var foreign, stale []int
		for s := range acq[name] {
			if !own[s] {
				foreign = append(foreign, s)
			}
			if after[name][s] <= before[name][s] {
				stale = append(stale, s)
			}
		}
		if len(foreign) > 0 || len(stale) > 0 {
			t.Errorf("%s acquired %d slots it does not own and %d with tokens that did not increase", name, len(foreign), len(stale))
		}
	}
}

// TestFencedMemberResumes cuts one member off etcd until it fences, which
// happens before its lease can expire, and lets it through at once: its
// member key is still there, so it keeps its rank and slots. No role moves
// to another member; it takes its own slots again, with higher tokens.
func TestFencedMemberResumes(t *testing.T) {
	const ttl = 4 * time.Second // the member fences at 7/8 of it: 0.5 s to come back
	h := &history{}
	p := newProxy(t)
	name := rinkName(t)
	opts := []Option{WithSessionTTL(ttl), h.hook()}
	a := join(t, newClient(t), name, append([]Option{WithMemberName("a")}, opts...)...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, proxiedClient(t, p), name, append([]Option{WithMemberName("b")}, opts...)...)
	c := join(t, newClient(t), name, append([]Option{WithMemberName("c")}, opts...)...)
	ms := []*Rink{a, b, c}
	eventually(t, 10*time.Second, "all ranked", func() bool { return c.Rank().Index >= 0 && a.Rank().Size == 3 })
	// b awaits the role before the rink settles: a role awaited for the
	// first time is reported at once, and the leader proclaims a map
	// saying that it balances by load from now on.
	role := roleOf(t, b)
	ctxB, err := b.AwaitRoleContext(ctxTimeout(t, 5*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the map balanced by load", func() bool { return a.ownersNow().ByLoad })
	settle(t, h, ms...)
	waitSettled(t, ms...)
	assigned, rankB := a.ownersNow(), b.Rank().Index
	before := slotTokens(h)

	mark := cutUntilFenced(t, p, ctxB, ttl)
	if !errors.Is(context.Cause(ctxB), ErrFenced) {
		t.Fatalf("cause = %v", context.Cause(ctxB))
	}
	t.Logf("b fenced after %v", time.Since(mark))
	again, err := b.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	if t1, t2 := mustToken(t, ctxB), mustToken(t, again); t2 <= t1 {
		t.Fatalf("token went from %d to %d", t1, t2)
	}
	settle(t, h, ms...)
	// (The leader writes one map after the resume, which records b's new
	// lease once etcd said the old one ended (issue 42): it moves nothing.)
	if now := a.ownersNow(); !now.SameAssignment(*assigned) {
		t.Errorf("the assignment changed: version %d to %d", assigned.Version, now.Version)
	}
	if i := b.Rank().Index; i != rankB {
		t.Errorf("b's rank went from %d to %d", rankB, i)
	}
	checkResumed(t, h, ms, []*Rink{b}, mark, before)
	h.check(t)
}

// cutUntilFenced cuts a member's proxy until ctx, one of its role
// contexts, ends (it fences), at most 2 TTL, then heals it; it fails the
// test if the member did not fence, and returns when the cut began.
func cutUntilFenced(t *testing.T, p proxy.Server, ctx context.Context, ttl time.Duration) time.Time {
	t.Helper()
	mark := time.Now()
	p.PauseTx()
	p.PauseRx()
	select {
	case <-ctx.Done():
	case <-time.After(2 * ttl):
	}
	p.UnpauseTx()
	p.UnpauseRx()
	if ctx.Err() == nil {
		t.Fatal("the member did not fence")
	}
	return mark
}

func mustToken(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	tok, ok := Token(ctx)
	if !ok {
		t.Fatal("no token")
	}
	return tok
}

// rejoinedSince reports whether member rejoined after t0.
func rejoinedSince(h *history, member string, t0 time.Time) bool {
	for _, e := range h.snapshot() {
		if e.Member == member && e.Kind == EventRejoined && e.Time.After(t0) {
			return true
		}
	}
	return false
}

// TestAllMembersResume cuts every member off etcd for longer than 7/8 of
// the TTL: all fence, the leader too. etcd keeps their leases meanwhile (as
// an etcd that comes back from an outage does: its new leader extends every
// lease; here the test renews them from outside). The members come back one
// after the other, the last over a slow link, so that a leader is elected
// while it is still on its way. Every member keeps its rank and slots, and
// every role is held by its previous owner. (An outage longer than the TTL
// on a live etcd ends the leases: then the members come back as newcomers,
// as after any expiry.)
func TestAllMembersResume(t *testing.T) {
	const ttl = 2 * time.Second
	h := &history{}
	name := rinkName(t)
	var ms []*Rink
	var ps []proxy.Server
	for i := 0; i < 3; i++ {
		p := newProxy(t)
		m := join(t, proxiedClient(t, p), name, WithMemberName(fmt.Sprintf("m%d", i)), WithSessionTTL(ttl), h.hook())
		if i == 0 {
			eventually(t, 10*time.Second, "m0 ranked", func() bool { return m.Rank().Index == 0 })
		}
		ms, ps = append(ms, m), append(ps, p)
	}
	eventually(t, 10*time.Second, "all ranked", func() bool {
		for _, m := range ms {
			if m.Rank().Index < 0 || m.Rank().Size != 3 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)
	assigned := ms[0].ownersNow()
	ranks := map[string]int{}
	for _, m := range ms {
		ranks[m.Member()] = m.Rank().Index
	}
	before := slotTokens(h)

	admin := newClient(t)
	resp, err := admin.Get(ctxTimeout(t, 5*time.Second), newKeys(name).Members(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 3 {
		t.Fatalf("member keys: %v %v", resp, err)
	}
	var leases []clientv3.LeaseID
	for _, kv := range resp.Kvs {
		leases = append(leases, clientv3.LeaseID(kv.Lease))
	}
	// Keep the leases alive from outside until every member is back.
	kctx, stopKeeping := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for kctx.Err() == nil {
			for _, l := range leases {
				_, _ = admin.KeepAliveOnce(kctx, l)
			}
			sleep(kctx, 200*time.Millisecond)
		}
	}()
	defer func() {
		stopKeeping()
		wg.Wait()
	}()

	mark := time.Now()
	for _, p := range ps {
		p.PauseTx()
		p.PauseRx()
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			for _, p := range ps {
				p.UnpauseTx()
				p.UnpauseRx()
			}
		}
	}
	defer unpause()
	eventually(t, 3*ttl, "every member fenced", func() bool {
		for _, m := range ms {
			if !fencedSince(h, m.Member(), mark) {
				return false
			}
		}
		return true
	})
	t.Logf("all fenced after %v", time.Since(mark))
	slow := ps[len(ps)-1]
	slow.DelayTx(200*time.Millisecond, 0)
	slow.DelayRx(200*time.Millisecond, 0)
	unpause()
	eventually(t, 15*time.Second, "every member rejoined", func() bool {
		for _, m := range ms {
			if !rejoinedSince(h, m.Member(), mark) {
				return false
			}
		}
		return true
	})
	stopKeeping()
	wg.Wait()
	slow.UndelayTx()
	slow.UndelayRx()

	eventually(t, 15*time.Second, "every member holds its slots again", func() bool {
		acq, _ := slotsSince(h, mark)
		n := 0
		for _, r := range ms {
			n += len(acq[r.Member()])
		}
		return n >= ms[0].ownersNow().Slots
	})
	settle(t, h, ms...)
	for _, m := range ms {
		if rk, now := m.Rank(), m.ownersNow(); !now.SameAssignment(*assigned) || rk.Index != ranks[m.Member()] {
			t.Errorf("%s: rank %d version %d, before %d version %d (the assignment changed: %v)", m.Member(), rk.Index, rk.Version, ranks[m.Member()], assigned.Version, !now.SameAssignment(*assigned))
		}
	}
	checkResumed(t, h, ms, ms, mark, before)
	h.check(t)
}
