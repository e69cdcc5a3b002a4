package core

import (
	"math"
	"slices"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// loadMeter turns the units added per tick into decaying rates per slot
// held. It is pure: the reporter goroutine feeds it.
type LoadMeter struct {
	slots map[int]*meterSlot // the slots held at the last tick
}

// meterSlot is a held slot's decaying rate, and when it was gained.
type meterSlot struct {
	rate  float64
	since time.Time
}

// heldLoad is a slot held at a tick: the units added to it since the last
// tick, and when it was gained.
type HeldLoad struct {
	Slot  int
	Units float64
	Since time.Time
}

func NewLoadMeter() *LoadMeter { return &LoadMeter{slots: map[int]*meterSlot{}} }

// Tick folds in the units added since the last Tick, for the slots held
// now (held, ascending), and returns the report. A slot not held has no
// rate: its load is its holder's to report. The average is a
// continuous-time one over the window, and starts at zero when a slot is
// gained; the units of the first Tick cover only the time since the slot
// was gained, so the rate reported is divided by 1 − e^(−held/window), the
// weight the time held carries: it is unbiased from the first Tick on, and
// a slot that just moved shows its load at once rather than after a
// window. roles gives the roles awaited in a slot.
func (m *LoadMeter) Tick(now time.Time, held []HeldLoad, roles func(s int) int32, interval, window time.Duration) wire.LoadReport {
	var rep wire.LoadReport
	keep := make(map[int]bool, len(held))
	for _, h := range held {
		s := h.Slot
		if h.Since.IsZero() || h.Since.After(now) {
			continue
		}
		keep[s] = true
		ms := m.slots[s]
		if ms == nil {
			ms = &meterSlot{}
			m.slots[s] = ms
		}
		u := h.Units
		if math.IsInf(u, 0) || math.IsNaN(u) {
			u = 0 // AddLoad's sums overflowed: a figure nobody can use
		}
		dt := interval
		if !h.Since.Equal(ms.since) {
			// Gained since the last tick (or gained anew): the units cover
			// the time since then.
			ms.rate, ms.since = 0, h.Since
			dt = min(interval, now.Sub(h.Since))
		}
		heldFor := now.Sub(ms.since)
		if dt < interval/100 {
			// Gained a moment ago: too short a time to tell a rate from.
			ms.since = now
			rep.Slots = append(rep.Slots, wire.SlotLoad{Slot: s, Roles: int(roles(s))})
			continue
		}
		decay := math.Exp(-dt.Seconds() / window.Seconds())
		ms.rate = ms.rate*decay + (1-decay)*u/dt.Seconds()
		if math.IsInf(ms.rate, 0) || math.IsNaN(ms.rate) {
			ms.rate = 0
		}
		rate := ms.rate
		if w := 1 - math.Exp(-heldFor.Seconds()/window.Seconds()); w > 0 && w < 1 {
			rate /= w
		}
		if rate < 0.5/window.Seconds() {
			rate = 0 // less than half a unit per window: idle
		}
		rep.Slots = append(rep.Slots, wire.SlotLoad{Slot: s, Rate: rate, Age: math.Round(heldFor.Seconds()*10) / 10, Roles: int(roles(s))})
	}
	for s := range m.slots {
		if !keep[s] {
			delete(m.slots, s) // released: its rate and age go
		}
	}
	return rep
}

// loadChanged reports whether next differs noticeably from last: another
// set of slots, a total rate that moved by more than loadChange of the
// larger total, a slot whose rate (or roles) did, or other roles awaited
// in the slots not held.
func LoadChanged(last, next wire.LoadReport) bool {
	if len(last.Slots) != len(next.Slots) || !slices.Equal(last.Await, next.Await) {
		return true
	}
	lr, lroles := last.Total()
	nr, nroles := next.Total()
	if math.Abs(lr-nr) > loadChange*max(lr, nr) {
		return true // many small changes add up
	}
	for i := range next.Slots {
		a, b := last.Slots[i], next.Slots[i]
		if a.Slot != b.Slot ||
			math.Abs(a.Rate-b.Rate) > loadChange*max(lr, nr) ||
			math.Abs(float64(a.Roles-b.Roles)) > loadChange*float64(max(lroles, nroles)) {
			return true
		}
	}
	return false
}

// loadChange is the share of a member's total load (or roles) by which a
// slot's figure must change before a new summary is written.
const loadChange = 0.05
