package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rink-go/rink/internal/simhook"
)

// Draining (Config.Drain, rink-sim -drain D). The members run with
// rink.WithDrainTimeout(D), and functions run on their holdings, as Run
// runs one: when a member acquires a slot, a function enters its holding
// three times in four, a moment later (simhook.Member.Enter). When the
// holding ends, the function goes on for a while before it returns: a
// quarter at once, half within the drain timeout, a quarter past it.
//
// The check, at every acquisition of a slot: no function of another
// member still acts on the slot (its process runs, and the incarnation
// whose holding it entered has neither ended nor passed its lease's
// deadline: simhook.Work.Acts) while less than the drain timeout has
// passed since its holding ended, as the member's clock measures it (D
// over 1+Config.Drift of the world's time). The promise it checks is
// WithDrainTimeout's: the heir starts only once the function has
// returned or the drain timeout has passed. A fence drains only until the
// lease's deadline: past it, the lease's expiry lets heirs start, and
// fencing tokens protect what the function still does. Before it, the
// member holds its fenced lease back while the function runs; so, too, no
// other process may acquire the slot while a function on a holding the
// fence ended still runs before the deadline and the member has revoked
// that lease itself (simhook.Work.FenceHeld: a lease lost otherwise, by a
// restore say, is beyond the member).
//
// Everything the drain draws comes from a stream of its own, never from
// the world's: a seed with Drain draws the same fault kinds as without,
// and differs by what the functions make the members do.

// drainStream is the second word of the seed of the stream that draws
// the functions and how long they run.
const drainStream = 0x647261696e

// work is a function running on a member's holding of a slot.
type work struct {
	m        *simMember
	slot     int
	w        simhook.Work
	released time.Duration // when its holding ended (the world's time; -1: held)
}

// enterWork runs a function on m's holding of slot s, a moment after it
// was acquired (the event comes before the holding is published), three
// times in four.
func (h *history) enterWork(m *simMember, s int) {
	if h.drain == nil || h.drain.IntN(4) == 0 {
		return
	}
	d := time.Duration(h.drain.Int64N(int64(20 * time.Millisecond)))
	h.w.After(d, func() {
		m.env.run(func() {
			if !m.alive || m.work[s] != nil {
				return
			}
			w, ok := m.m.Enter(s)
			if !ok {
				return
			}
			m.work[s] = &work{m: m, slot: s, w: w, released: -1}
		})
	})
}

// releaseWork notes that m's holding of slot s ended: its function, if
// one runs, returns after a time drawn now, and until then it lingers.
func (h *history) releaseWork(m *simMember, s int) {
	wk := m.work[s]
	if wk == nil {
		return
	}
	delete(m.work, s)
	wk.released = h.w.now
	D := h.cfg.Drain
	var linger time.Duration
	switch h.drain.IntN(4) {
	case 0:
		linger = time.Duration(h.drain.Int64N(int64(5 * time.Millisecond)))
	case 1, 2:
		linger = time.Duration(h.drain.Int64N(int64(D)))
	default:
		linger = D + time.Duration(h.drain.Int64N(int64(D)))
	}
	h.res.Lingered++
	h.w.Tracef("%s: its function on slot %d returns %v after the holding ended", m.name, s, linger)
	h.lingering[s] = append(h.lingering[s], wk)
	h.w.After(linger, func() { m.env.run(wk.w.Return) })
}

// drainWindow is the least time of the world's in which a member's drain
// timeout cannot pass on its own clock.
func (h *history) drainWindow() time.Duration {
	return time.Duration(float64(h.cfg.Drain)/(1+h.cfg.Drift)) - time.Nanosecond
}

// checkDrain checks an acquisition of slot s by m against the functions
// still running on earlier holdings of s (see Draining above), and
// forgets those that can no longer matter.
func (h *history) checkDrain(m *simMember, s int) {
	if h.drain == nil {
		return
	}
	window := h.drainWindow()
	keep := h.lingering[s][:0]
	for _, wk := range h.lingering[s] {
		since := h.w.now - wk.released
		acts, held := wk.w.Acts(), wk.w.FenceHeld()
		if !acts && !held || since > window {
			continue
		}
		keep = append(keep, wk)
		switch {
		case wk.m == m:
		case acts:
			h.violate(fmt.Sprintf("slot %d: %s acquires it while %s's function still runs on it, %v after its holding ended (drain timeout %v)",
				s, m.name, wk.m.name, since, h.cfg.Drain))
		default:
			h.violate(fmt.Sprintf("slot %d: %s acquires it while %s's function still runs on the holding a fence ended %v ago, before its lease's deadline, and %s revoked that lease (drain timeout %v)",
				s, m.name, wk.m.name, since, wk.m.name, h.cfg.Drain))
		}
	}
	h.lingering[s] = keep
}

// newDrain is the stream the drain draws from (nil without Config.Drain).
func newDrain(seed uint64, cfg Config) *rand.Rand {
	if cfg.Drain <= 0 {
		return nil
	}
	return rand.New(rand.NewPCG(seed, drainStream))
}
