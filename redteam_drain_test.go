package rink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// Red-team tests for drain.go. Each fails on the code as committed.

// A drain timeout longer than the session TTL: Shutdown's own context is
// capped at one TTL (see shutdown), and the drain eats all of it, so the
// departure transaction and then the lease revocation run on an expired
// context. Shutdown returns "revoking lease: context deadline exceeded"
// although the caller's context had plenty of time left, the drain is cut
// at the TTL instead of the drain timeout, and the heir waits for the
// lease to expire instead of one departure write.
func TestRedteamShutdownDrainLongerThanTTL(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	const linger = 3 * time.Second // > TTL (2 s), < drain timeout
	opts := []Option{WithSlots(4), WithDrainTimeout(5 * time.Second), WithRebalanceDelay(time.Hour), h.hook()}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	eventually(t, 10*time.Second, "b waiting", func() bool { return b.Rank().Waiting })
	stop := make(chan struct{})
	defer close(stop)
	var mu sync.Mutex
	returned := map[string]time.Time{}
	runAll(t, a, []string{"leader"}, lingering(linger, stop, &mu, returned))
	eventually(t, 10*time.Second, "a runs the role", func() bool { return running(a, "leader") })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a drain timeout (5s) above the TTL (2s) and a 20s context: %v", err)
	}
	eventually(t, 10*time.Second, "b holds the role", func() bool { _, ok := b.Get("leader"); return ok })
	got, _ := firstEvent(h, "b", EventAcquired, wire.SlotOf("leader", 4))
	mu.Lock()
	done, ok := returned["leader"]
	mu.Unlock()
	if !ok || got.Before(done) {
		t.Errorf("b started the role at %v, before a's function returned at %v (%v): the drain was cut short",
			got.Format(time.StampMicro), done.Format(time.StampMicro), ok)
	}
	for _, e := range h.snapshot() {
		if e.Kind == EventDrainTimedOut {
			t.Errorf("drain of slot %d timed out after %v, before the 5s drain timeout", e.Slot, e.Wait)
		}
	}
	h.check(t)
}

// The drain of a slot is recorded per slot, not per holding: when a slot
// given away while a function still runs on it (holding 1) comes back to
// this member and is given away again while another function runs on the
// new holding (holding 2), the drain entry of holding 1 is overwritten.
// Once holding 2's function returns, the acknowledgement goes out and the
// heir starts the role while holding 1's function is still running, long
// before the drain timeout.
func TestRedteamDrainOfEarlierHoldingForgotten(t *testing.T) {
	t.Parallel()
	h := &history{}
	name := rinkName(t)
	const S = 2
	const linger = 5 * time.Second
	opts := []Option{WithSlots(S), WithDrainTimeout(20 * time.Second), WithImbalanceTolerance(0), h.hook()}
	cli := newClient(t)
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	eventually(t, 10*time.Second, "both ranked", func() bool { return a.Rank().Size == 2 && b.Rank().Index >= 0 })
	settle(t, h, a, b)

	// Two roles in a slot a owns.
	m := a.ownersNow()
	x := -1
	for s := 0; s < S; s++ {
		if m.Owner(s) == "a" {
			x = s
		}
	}
	var roles []string
	for i := 0; len(roles) < 2; i++ {
		if role := fmt.Sprint("r-", i); wire.SlotOf(role, S) == x {
			roles = append(roles, role)
		}
	}
	slow, quick := roles[0], roles[1]

	// slow's function works on for linger after its context ends; quick's
	// returns at once.
	var mu sync.Mutex
	returned := map[string]time.Time{}
	stop := make(chan struct{})
	defer close(stop)
	runAll(t, a, []string{slow}, lingering(linger, stop, &mu, returned))
	runAll(t, a, []string{quick}, func(role string, ctx context.Context) error { <-ctx.Done(); return nil })
	eventually(t, 10*time.Second, "a runs both roles", func() bool { return running(a, slow) && running(a, quick) })

	// swap writes the map again with the two slots' owners swapped, as an
	// operator may: the table stays balanced, so the leader keeps it.
	key := newKeys(name).Map()
	swap := func() {
		t.Helper()
		m, _, err := readWhole(cli, name, S)
		if err != nil {
			t.Fatal(err)
		}
		m.Version++
		m.Table[0], m.Table[1] = m.Table[1], m.Table[0]
		if _, err := cli.Put(context.Background(), key, string(m.Encode())); err != nil {
			t.Fatal(err)
		}
	}
	token := func() int64 {
		ctx, ok := a.Get(slow)
		if !ok {
			return 0
		}
		tok, _ := Token(ctx)
		return tok
	}
	first := token()

	// 1. x moves to b: a gives it away while slow's function still runs
	// (holding 1 drains, a withholds its acknowledgement).
	swap()
	eventually(t, 10*time.Second, "a gave x away", func() bool { o, _ := a.Owner(slow); _, held := a.Get(slow); return o == "b" && !held })
	// 2. x comes back to a (b has not started it): a holds it again, and
	// quick's function runs on the new holding.
	swap()
	eventually(t, 10*time.Second, "a holds x again, quick runs on it", func() bool {
		tok := token()
		return tok > first && running(a, quick)
	})
	// 3. x moves to b again. quick's function returns at once; slow's, on
	// holding 1, works on for the rest of linger.
	swap()
	eventually(t, 15*time.Second, "b holds x", func() bool { _, ok := b.Get(slow); return ok })
	var acquired time.Time
	for _, e := range h.snapshot() {
		if e.Kind == EventAcquired && e.Member == "b" && e.Slot == x {
			acquired = e.Time
		}
	}
	mu.Lock()
	done, ok := returned[slow]
	mu.Unlock()
	if !ok || acquired.Before(done) {
		t.Errorf("b started slot %d at %v while a's function for %s on its earlier holding still ran (returned: %v at %v); the drain timeout is 20s",
			x, acquired.Format(time.StampMicro), slow, ok, done.Format(time.StampMicro))
		for _, e := range h.snapshot() {
			if e.Slot == x || e.Kind == EventMapApplied {
				t.Logf("%s %s %v slot=%d token=%d version=%d cause=%v", e.Time.Format(time.StampMicro), e.Member, e.Kind, e.Slot, e.Token, e.Version, e.Cause)
			}
		}
	}
	h.check(t)
}
