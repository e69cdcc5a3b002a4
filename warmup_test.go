package rink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// warmLog records, per member and role, when Warm was called and returned.
type warmLog struct {
	mu             sync.Mutex
	called, warmed map[string]time.Time // member/role
	linger         time.Duration        // how long a Warm call works (0: until its context ends)
}

func newWarmLog(linger time.Duration) *warmLog {
	return &warmLog{called: map[string]time.Time{}, warmed: map[string]time.Time{}, linger: linger}
}

func (w *warmLog) handler(member string) Handler {
	return Handler{
		Assigned: func(context.Context, string) {},
		Warm: func(ctx context.Context, role string) {
			w.mu.Lock()
			w.called[member+"/"+role] = time.Now()
			w.mu.Unlock()
			if w.linger > 0 {
				t := time.NewTimer(w.linger)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			} else {
				<-ctx.Done()
				return
			}
			w.mu.Lock()
			w.warmed[member+"/"+role] = time.Now()
			w.mu.Unlock()
		},
	}
}

func (w *warmLog) get(m map[string]time.Time, member, role string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := m[member+"/"+role]
	return t, ok
}

// firstEvent returns the time of the first event of kind on member's slot.
func firstEvent(h *history, member string, kind EventKind, slot int) (time.Time, bool) {
	for _, e := range h.snapshot() {
		if e.Kind == kind && e.Member == member && e.Slot == slot {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// A scale-out with a warm-up: the newcomer is told which roles come to it
// and warms them up while their owner still serves them; they move once it
// is ready. When the heir never gets ready, they move when the warm-up
// time is up.
func TestWarmupScaleOut(t *testing.T) {
	for _, c := range []struct {
		name   string
		linger time.Duration
	}{{"ready", 200 * time.Millisecond}, {"timed out", 0}} {
		t.Run(c.name, func(t *testing.T) {
			const warmup = 1500 * time.Millisecond
			h := &history{}
			name := rinkName(t)
			opts := []Option{WithSlots(16), WithWarmup(warmup), h.hook()}
			var roles []string
			for i := 0; i < 16; i++ {
				roles = append(roles, fmt.Sprint("shard-", i))
			}
			w := newWarmLog(c.linger)
			a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
			eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
			sa, err := a.Watch(w.handler("a"), roles...)
			if err != nil {
				t.Fatal(err)
			}
			defer sa.Close()
			eventually(t, 10*time.Second, "a holds every role", func() bool { return len(sa.Held()) == len(roles) })
			b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
			sb, err := b.Watch(w.handler("b"), roles...)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			eventually(t, 15*time.Second, "b holds its share", func() bool { return len(sb.Held()) > 0 && len(sa.Held())+len(sb.Held()) == len(roles) })
			for _, role := range sb.Held() {
				s := wire.SlotOf(role, 16)
				called, ok := w.get(w.called, "b", role)
				released, rok := firstEvent(h, "a", EventReleased, s)
				acquired, _ := firstEvent(h, "b", EventAcquired, s)
				incoming, iok := firstEvent(h, "b", EventIncoming, s)
				if !ok || !rok || !iok || !called.Before(released) || incoming.After(called) {
					t.Errorf("%s: b warmed it up at %v (%v), after the incoming event at %v (%v); a released it at %v (%v)",
						role, called.Format(time.StampMicro), ok, incoming.Format(time.StampMicro), iok, released.Format(time.StampMicro), rok)
				}
				warmed, ok := w.get(w.warmed, "b", role)
				switch {
				case c.name == "ready" && (!ok || released.Before(warmed)):
					t.Errorf("%s: a released it at %v, before b was ready at %v (%v)", role, released.Format(time.StampMicro), warmed.Format(time.StampMicro), ok)
				case c.name == "timed out" && acquired.Sub(incoming) < warmup/2:
					// (From the announcement b applied, not from the Warm
					// call: the call waits for b's Watch, which may come
					// after the announcement.)
					t.Errorf("%s: b took it %v after the announcement, with a warm-up of %v it never finished", role, acquired.Sub(incoming), warmup)
				}
			}
			h.check(t)
		})
	}
}

// A Shutdown with a warm-up leaves only once the heir is ready: the waiting
// member warms up the roles while the leaving one still serves them.
func TestWarmupShutdown(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(8), WithWarmup(5 * time.Second), WithRebalanceDelay(time.Hour), h.hook()}
	roles := []string{"leader", "pair-1", "pair-2", "pair-3"}
	w := newWarmLog(200 * time.Millisecond)
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	sa, err := a.Watch(w.handler("a"), roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	eventually(t, 10*time.Second, "b waiting", func() bool { return b.Rank().Waiting })
	sb, err := b.Watch(w.handler("b"), roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	eventually(t, 10*time.Second, "a holds every role", func() bool { return len(sa.Held()) == len(roles) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	eventually(t, 10*time.Second, "b holds every role", func() bool { return len(sb.Held()) == len(roles) })
	for _, role := range roles {
		s := wire.SlotOf(role, 8)
		warmed, ok := w.get(w.warmed, "b", role)
		released, rok := firstEvent(h, "a", EventReleased, s)
		if !ok || !rok || released.Before(warmed) {
			t.Errorf("%s: a released it at %v (%v), b was ready at %v (%v)", role, released.Format(time.StampMicro), rok, warmed.Format(time.StampMicro), ok)
		}
	}
	if took > 3*time.Second {
		t.Errorf("Shutdown took %v: it waited out the warm-up instead of the heir", took)
	}
	h.check(t)
}

// A Shutdown with a warm-up by a member that holds no slot: the map gives
// it slots, but it has not started them (here their previous owner still
// drains them), so there is nothing to warm up from it and it leaves at
// once. It used to wait for heirs to warm up slots it never served, while
// nobody served them: in TestRedteamWarmLeaveIgnoresShutdownContext a
// newcomer shut down while its slots were still only announced to it; the
// leader, not yet aware that it was leaving, moved them to it, and the
// newcomer, which then started nothing while leaving, kept them unheld until
// its Shutdown's context ended (for up to the warm-up time and a TTL).
func TestWarmupShutdownHoldingNothing(t *testing.T) {
	const S = 8
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(S), WithWarmup(20 * time.Second), WithImbalanceTolerance(0), h.hook()}
	roles := redteamRolePerSlot(S)
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"), WithDrainTimeout(time.Minute))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })

	// a's work on each role goes on after the role moves, until the test
	// ends: a withholds its acknowledgement, so that an heir of its slots
	// cannot start them.
	stop := make(chan struct{})
	runCtx, cancelRun := context.WithCancel(context.Background())
	var running sync.WaitGroup
	var started atomic.Int32
	defer func() { close(stop); cancelRun(); running.Wait() }()
	for _, role := range roles {
		running.Add(1)
		go func() {
			defer running.Done()
			_ = a.Run(runCtx, role, func(context.Context) error {
				started.Add(1)
				<-stop
				return nil
			})
		}()
	}
	eventually(t, 10*time.Second, "a runs every role", func() bool { return started.Load() == S })

	// b has no Warm handler: it is ready for its announced slots at once,
	// and the leader moves them to it; it cannot start them.
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	var bSlots []int
	eventually(t, 10*time.Second, "the map gives b its slots", func() bool {
		m := a.ownersNow()
		bSlots = slotsOf(m, b.Member())
		return len(m.Incoming) == 0 && len(bSlots) > 0 && b.Rank().Version == m.Version
	})
	// a never gets ready for slots announced to it.
	set, err := a.Watch(blockingWarm(), roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	held := h.holders()
	for _, s := range bSlots {
		if slices.Contains(held[s], b.Member()) {
			t.Fatalf("b holds slot %d although a still drains it", s)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := b.Shutdown(ctx); err != nil {
		t.Errorf("b's Shutdown holding no slot: %v after %v (it waited for heirs to warm up slots it never started)", err, time.Since(began))
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("b's Shutdown holding no slot took %v", took)
	}
	eventually(t, 10*time.Second, "a holds every slot", func() bool {
		for _, role := range roles {
			if _, ok := a.Get(role); !ok {
				return false
			}
		}
		return true
	})
	h.check(t)
}
