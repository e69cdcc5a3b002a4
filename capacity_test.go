package rink

import (
	"math"
	"testing"
	"time"

	"go.uber.org/zap"
)

// Members share the slots in proportion to their capacities, and the
// Observer shows the capacities and the shares.
func TestCapacityShares(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, WithMemberName("b"), h.hook())
	c := join(t, newClient(t), name, WithMemberName("c"), WithCapacity(2), h.hook())
	d := join(t, newClient(t), name, WithMemberName("d"), WithCapacity(0.5), h.hook())
	ob, err := NewObserver(newClient(t), name, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	// Each within one slot of 1024·c/Σc.
	within := func(want map[string]float64) func() bool {
		return func() bool {
			s := ob.State()
			if len(s.Members) != len(want) {
				return false
			}
			total := 0.0
			for _, c := range want {
				total += c
			}
			for _, m := range s.Members {
				c, ok := want[m.Name]
				if share := 1024 * c / total; !ok || m.Capacity != c || math.Abs(float64(m.Slots)-share) >= 1 {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 10*time.Second, "slots shared by capacity", within(map[string]float64{"a": 1, "b": 1, "c": 2, "d": 0.5}))
	settle(t, h, a, b, c, d)
	// The member with capacity 2 leaves: its slots are spread by capacity.
	t0 := time.Now()
	if err := c.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "slots shared by capacity after a departure", within(map[string]float64{"a": 1, "b": 1, "d": 0.5}))
	settle(t, h, a, b, d)
	// Only c's slots moved, and each once.
	released := since(h, t0, EventReleased)
	for _, e := range released {
		if e.Member != "c" {
			t.Errorf("%s released slot %d when c left", e.Member, e.Slot)
		}
	}
	if n := len(since(h, t0, EventAcquired)); n != len(released) || n < 454 {
		t.Errorf("%d acquisitions after c left, want one for each of its %d slots", n, len(released))
	}
	h.check(t)
}
