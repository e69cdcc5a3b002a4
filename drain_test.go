package rink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// runAll runs fn under Run on m for every role until the test's end,
// which waits for the loops.
func runAll(t *testing.T, m *Rink, roles []string, fn func(role string, ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, role := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Run(ctx, role, func(rc context.Context) error { return fn(role, rc) }); err != nil &&
				!errors.Is(err, context.Canceled) && !errors.Is(err, ErrShutdown) {
				t.Errorf("Run(%s) = %v", role, err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// running reports whether a function runs on m's holding of role.
func running(m *Rink, role string) bool {
	st := m.slots.load(wire.SlotOf(role, m.opts.slots))
	return st != nil && st.ctx != nil && st.ctx.Err() == nil && st.runners.Load() > 0
}

// lingering returns a Run function that, once its context is cancelled,
// works on for linger (or until stop closes) and then notes when it
// returned.
func lingering(linger time.Duration, stop <-chan struct{}, mu *sync.Mutex, returned map[string]time.Time) func(string, context.Context) error {
	return func(role string, ctx context.Context) error {
		<-ctx.Done()
		timer := time.NewTimer(linger)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-stop:
		}
		mu.Lock()
		returned[role] = time.Now()
		mu.Unlock()
		return nil
	}
}

// With a drain timeout the heir of a moved slot starts only once the
// functions Run ran on it have returned, or the timeout has passed;
// without one it starts at once.
func TestDrainHoldsTheHeir(t *testing.T) {
	const linger = 300 * time.Millisecond
	for _, c := range []struct {
		name  string
		drain time.Duration
		stuck bool // the functions outlive the drain timeout
	}{
		{"drained", 5 * time.Second, false},
		{"timed out", linger, true},
		{"no drain", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &history{}
			name := rinkName(t)
			opts := []Option{WithSlots(16), WithDrainTimeout(c.drain), h.hook()}
			a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
			eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
			var roles []string
			for i := 0; i < 16; i++ {
				roles = append(roles, fmt.Sprint("job-", i))
			}
			stop := make(chan struct{})
			var mu sync.Mutex
			returned := map[string]time.Time{}
			work := linger
			if c.stuck {
				work = time.Minute
			}
			runAll(t, a, roles, lingering(work, stop, &mu, returned))
			defer close(stop) // before runAll's cleanup waits for the loops
			eventually(t, 10*time.Second, "a runs every role", func() bool {
				for _, role := range roles {
					if !running(a, role) {
						return false
					}
				}
				return true
			})
			b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
			var moved []string
			eventually(t, 10*time.Second, "b holds its share", func() bool {
				moved = moved[:0]
				for _, role := range roles {
					if o, _ := b.Owner(role); o == "b" {
						if _, ok := b.Get(role); !ok {
							return false
						}
						moved = append(moved, role)
					}
				}
				return len(moved) > 0
			})
			acquired := map[int]time.Time{}
			released := map[int]time.Time{}
			drained, timedOut := 0, 0
			for _, e := range h.snapshot() {
				switch {
				case e.Kind == EventAcquired && e.Member == "b":
					acquired[e.Slot] = e.Time
				case e.Kind == EventReleased && e.Member == "a" && released[e.Slot].IsZero():
					released[e.Slot] = e.Time
				case e.Kind == EventDrained && e.Member == "a":
					drained++
				case e.Kind == EventDrainTimedOut && e.Member == "a":
					timedOut++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, role := range moved {
				s := wire.SlotOf(role, 16)
				done, ok := returned[role]
				switch {
				case c.name == "drained" && (!ok || acquired[s].Before(done)):
					t.Errorf("%s: b started it at %v, before a's function returned (%v)", role, acquired[s].Format(time.StampMicro), done.Format(time.StampMicro))
				case c.name == "timed out" && (ok || acquired[s].Sub(released[s]) < c.drain):
					t.Errorf("%s: b started it %v after a released it, with a's function returned: %v; want the drain timeout, %v, with the function still running",
						role, acquired[s].Sub(released[s]), ok, c.drain)
				case c.name == "no drain" && ok && !acquired[s].Before(done):
					t.Errorf("%s: without a drain timeout b waited for a's function", role)
				}
			}
			switch {
			case c.name == "drained" && (drained == 0 || timedOut > 0),
				c.name == "timed out" && timedOut == 0,
				c.name == "no drain" && drained+timedOut > 0:
				t.Errorf("%d drained and %d timed-out events", drained, timedOut)
			}
			h.check(t)
		})
	}
}

// A graceful Shutdown drains too, within its context: the heir starts
// after the functions returned.
func TestShutdownDrains(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(4), WithDrainTimeout(5 * time.Second), WithRebalanceDelay(time.Hour), h.hook()}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	eventually(t, 10*time.Second, "b waiting", func() bool { return b.Rank().Waiting })
	stop := make(chan struct{})
	defer close(stop)
	var mu sync.Mutex
	returned := map[string]time.Time{}
	runAll(t, a, []string{"leader"}, lingering(200*time.Millisecond, stop, &mu, returned))
	eventually(t, 10*time.Second, "a runs the role", func() bool { return running(a, "leader") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b holds the role", func() bool { _, ok := b.Get("leader"); return ok })
	var got time.Time
	for _, e := range h.snapshot() {
		if e.Kind == EventAcquired && e.Member == "b" && e.Slot == wire.SlotOf("leader", 4) {
			got = e.Time
		}
	}
	mu.Lock()
	done, ok := returned["leader"]
	mu.Unlock()
	if !ok || got.Before(done) {
		t.Errorf("b started the role at %v, a's function returned at %v (%v)", got.Format(time.StampMicro), done.Format(time.StampMicro), ok)
	}
	h.check(t)
}

// Run refuses what it cannot run.
func TestRunInvalid(t *testing.T) {
	r := join(t, newClient(t), rinkName(t))
	if err := r.Run(context.Background(), "", func(context.Context) error { return nil }); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("empty role: %v", err)
	}
	if err := r.Run(context.Background(), "x", nil); !errors.Is(err, ErrNilFunc) {
		t.Errorf("nil function: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx, "x", func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}
