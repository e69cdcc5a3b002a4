package rink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// holding reports which of the members hold role right now.
func holding(role string, members ...*Rink) []*Rink {
	var out []*Rink
	for _, m := range members {
		if _, ok := m.Get(role); ok {
			out = append(out, m)
		}
	}
	return out
}

func names(rs []*Rink) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Member())
	}
	return out
}

// gaps returns, for slot s, the time between each release (or fence) by one
// member and the next acquisition by another, for acquisitions after since.
func gaps(events []event, s int, since time.Time) []time.Duration {
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var out []time.Duration
	var lastEnd time.Time
	holder := ""
	for _, e := range events {
		switch {
		case e.kind == evAcquire && e.slot == s:
			if holder == "" && !lastEnd.IsZero() && e.at.After(since) {
				out = append(out, e.at.Sub(lastEnd))
			}
			holder = e.member
		case (e.kind == evRelease && e.slot == s || e.kind == evFence) && e.member == holder:
			holder, lastEnd = "", e.at
		}
	}
	return out
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("n=%d min=%v median=%v max=%v", len(s), s[0], s[len(s)/2], s[len(s)-1])
}

func TestBadInput(t *testing.T) {
	cli := newClient(t)
	tests := []struct {
		name string
		cli  *clientv3.Client
		rink string
		opts []Option
		want error
	}{
		{"nil client", nil, "x", nil, ErrNilClient},
		{"empty name", cli, "", nil, ErrInvalidName},
		{"space in name", cli, "a b", nil, ErrInvalidName},
		{"control character", cli, "a\x01", nil, ErrInvalidName},
		{"leading slash", cli, "/a", nil, ErrInvalidName},
		{"trailing slash", cli, "a/", nil, ErrInvalidName},
		{"member with slash", cli, "x", []Option{WithMemberName("a/b")}, ErrInvalidName},
		{"member with space", cli, "x", []Option{WithMemberName("a b")}, ErrInvalidName},
		{"short TTL", cli, "x", []Option{WithSessionTTL(time.Second)}, ErrInvalidOption},
		{"fractional TTL", cli, "x", []Option{WithSessionTTL(2500 * time.Millisecond)}, ErrInvalidOption},
		{"negative delay", cli, "x", []Option{WithRebalanceDelay(-time.Second)}, ErrInvalidOption},
		{"zero slots", cli, "x", []Option{WithSlots(0)}, ErrInvalidOption},
		{"too many slots", cli, "x", []Option{WithSlots(MaxSlots + 1)}, ErrInvalidOption},
		{"nil logger", cli, "x", []Option{WithLogger(nil)}, ErrInvalidOption},
		{"zero join timeout", cli, "x", []Option{WithJoinTimeout(0)}, ErrInvalidOption},
		{"nil option", cli, "x", []Option{nil}, ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cli, tt.rink, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if r != nil {
				t.Fatal("got a rink with an error")
			}
		})
	}

	r := join(t, cli, rinkName(t))
	if _, err := r.AwaitRoleContext(context.Background(), ""); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("AwaitRoleContext(\"\") err = %v", err)
	}
	if ctx := r.AwaitRole(""); ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrInvalidRole) {
		t.Errorf("AwaitRole(\"\") = %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	if _, ok := r.Get(""); ok {
		t.Error("Get(\"\") ok")
	}
	if _, ok := r.Owner(""); ok {
		t.Error("Owner(\"\") ok")
	}
	if _, ok := Token(nil); ok {
		t.Error("Token(nil) ok")
	}
	if _, ok := Token(context.Background()); ok {
		t.Error("Token(Background) ok")
	}
}

func TestUnreachableEtcd(t *testing.T) {
	dead := freeURL() // nothing listens here
	cli := newClient(t, dead.Host)
	start := time.Now()
	_, err := New(cli, "x", WithJoinTimeout(500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("New took %v with a 500ms join timeout", d)
	}
}

func TestSingleMember(t *testing.T) {
	cli := newClient(t)
	h := &history{}
	r := join(t, cli, rinkName(t), WithMemberName("solo"), h.hook())
	ctx, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), "leader")
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := Token(ctx)
	if !ok || tok <= 0 {
		t.Fatalf("token = %d, %v", tok, ok)
	}
	if got, ok := r.Get("leader"); !ok || got != ctx {
		t.Fatal("Get does not return the held role's context")
	}
	if owner, ok := r.Owner("partition:42"); !ok || owner != "solo" {
		t.Fatalf("Owner = %q, %v", owner, ok)
	}
	rk := r.Rank()
	if rk.Index != 0 || rk.Size != 1 || rk.Member != "solo" || rk.Version < 1 || rk.Leader != "solo" {
		t.Fatalf("rank = %+v", rk)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Fatalf("role context cause after Shutdown = %v", context.Cause(ctx))
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if ctx := r.AwaitRole("leader"); !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Fatalf("AwaitRole after Shutdown: cause %v", context.Cause(ctx))
	}
	if _, err := r.AwaitRoleContext(context.Background(), "leader"); !errors.Is(err, ErrShutdown) {
		t.Fatalf("AwaitRoleContext after Shutdown: %v", err)
	}
	// The member key and lease are gone.
	resp, err := cli.Get(context.Background(), newKeys(r.Name()).members(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("member keys after Shutdown: %v %v", resp.Kvs, err)
	}
	h.check(t)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSingletonAcrossThree(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	var ms []*Rink
	for i := 0; i < 3; i++ {
		ms = append(ms, join(t, newClient(t), name, WithMemberName(fmt.Sprintf("m%d", i)), h.hook()))
	}
	live := slices.Clone(ms)
	for len(live) > 0 {
		eventually(t, 10*time.Second, "one member holds leader", func() bool { return len(holding("leader", live...)) == 1 })
		// Stay with exactly one holder for a while, through map changes.
		for i := 0; i < 20; i++ {
			if got := holding("leader", live...); len(got) > 1 {
				t.Fatalf("two holders: %v", names(got))
			}
			time.Sleep(time.Millisecond)
		}
		holder := holding("leader", live...)[0]
		if err := holder.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		live = slices.DeleteFunc(live, func(r *Rink) bool { return r == holder })
	}
	h.check(t)
}

// roleOf returns a role that r owns in its current map.
func roleOf(t testing.TB, r *Rink) string {
	t.Helper()
	for j := 0; j < 100000; j++ {
		role := fmt.Sprint("role-", j)
		if o, _ := r.Owner(role); o == r.Member() {
			return role
		}
	}
	t.Fatalf("%s owns no role", r.Member())
	return ""
}

// pair starts a two-member rink, both ranked; the first to join leads.
func pair(t testing.TB, h *history, first, second string, opts ...Option) (a, b *Rink, ca *clientv3.Client) {
	t.Helper()
	name := rinkName(t)
	ca, cb := newClient(t), newClient(t)
	clients := map[string]*clientv3.Client{first: ca, second: cb}
	if first != "a" {
		clients[first], clients[second] = cb, ca
	}
	x := join(t, clients[first], name, append([]Option{WithMemberName(first), h.hook()}, opts...)...)
	eventually(t, 10*time.Second, first+" ranked", func() bool { return x.Rank().Index == 0 })
	y := join(t, clients[second], name, append([]Option{WithMemberName(second), h.hook()}, opts...)...)
	eventually(t, 10*time.Second, "both ranked", func() bool { return x.Rank().Size == 2 && y.Rank().Size == 2 && y.Rank().Index >= 0 })
	if first == "a" {
		return x, y, ca
	}
	return y, x, ca
}

// TestGracefulHandover hands a role over by Shutdown, with the holder as
// a plain member and as the rink's leader, and logs the gaps.
func TestGracefulHandover(t *testing.T) {
	for _, holderLeads := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder_leads=%v", holderLeads), func(t *testing.T) {
			const rounds = 5
			var all []time.Duration
			for i := 0; i < rounds; i++ {
				h := &history{}
				first, second := "b", "a"
				if holderLeads {
					first, second = "a", "b"
				}
				a, b, _ := pair(t, h, first, second)
				if got := a.Rank().Leader == "a"; got != holderLeads {
					t.Fatalf("leader is %q", a.Rank().Leader)
				}
				role := roleOf(t, a)
				ctxA, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan context.Context, 1)
				go func() {
					ctx, _ := b.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
					got <- ctx
				}()
				mark := time.Now()
				if err := a.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				ctxB := <-got
				if ctxB == nil {
					t.Fatal("b did not get the role")
				}
				if !errors.Is(context.Cause(ctxA), ErrShutdown) {
					t.Fatalf("a's context: %v", context.Cause(ctxA))
				}
				ta, _ := Token(ctxA)
				tb, _ := Token(ctxB)
				if tb <= ta {
					t.Fatalf("token went from %d to %d", ta, tb)
				}
				h.check(t)
				g := gaps(h.snapshot(), slotOf(role, DefaultSlots), mark)
				if len(g) != 1 {
					t.Fatalf("%d handovers of the role, want 1", len(g))
				}
				all = append(all, g...)
			}
			t.Logf("graceful handover gap (a's release to b's acquire): %s", spread(all))
		})
	}
}

// TestCrashFailover closes a holder's client without revoking its lease:
// the role moves once the lease expires.
func TestCrashFailover(t *testing.T) {
	const rounds = 3
	var failovers []time.Duration
	for i := 0; i < rounds; i++ {
		h := &history{}
		a, b, ca := pair(t, h, "a", "b")
		role := roleOf(t, a)
		if _, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role); err != nil {
			t.Fatal(err)
		}
		crash := time.Now()
		ca.Close() // no revoke: the lease must expire
		if _, err := b.AwaitRoleContext(ctxTimeout(t, 15*time.Second), role); err != nil {
			t.Fatal(err)
		}
		failovers = append(failovers, time.Since(crash))
		<-a.Done()
		if err := a.Shutdown(context.Background()); !errors.Is(err, ErrClientClosed) {
			t.Errorf("Shutdown after client close: %v", err)
		}
		h.check(t)
	}
	t.Logf("crash failover at TTL 2s (client closed to successor holding): %s", spread(failovers))
}
