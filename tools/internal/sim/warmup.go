package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

// Warm-up (Config.Warmup, rink-sim -warmup W). The members run with
// rink.WithWarmup(W): the leader announces a planned move to its heir and
// makes it once the heir is ready or W has passed. Each member warms up
// what is announced to it as a role set's Handler.Warm would
// (simhook.Config.Warm), taking a time drawn per request: a third at once,
// a third within W, a third past it.
//
// The check, whenever a leader makes announced moves before W has passed
// (simhook.Config.EarlyMoves: every heir said it is ready): each heir that
// runs, and is ranked, has warmed up, as the simulator knows it, every
// slot it takes. The
// simulator does not see when a leader began to count W (it counts from
// its first plan of a series of moves, even when the moves change
// meanwhile, so that moves that keep changing are made all the same);
// what it checks is the leader's word that the heirs are ready.
//
// Not checked after an operator rewrote the map under its version (the
// fault map-rewrite): an heir says which announcement it is ready for by
// the map's version, which the rewritten map repeats with other slots,
// and a leader may then take an heir's readiness for the one as readiness
// for the other (seed 1289: a rewrite, then the original map put back).
// A move made so is early, never unsafe: the barrier holds as for any.
// An older map put back alone is checked: a leader announces its moves
// anew when an heir is ready for a later announcement (seed 379 found it
// taking the older map's announcement as made).
//
// Everything the warm-up draws comes from a stream of its own, never from
// the world's: a seed with Warmup draws the same fault kinds as without.

// warmStream is the second word of the seed of the stream that draws how
// long each warm-up takes.
const warmStream = 0x7761726d

// warming is what a member has warmed up.
type warming struct {
	warm map[int]bool // the slots it is ready for
	gen  int          // the request in progress
}

// newWarm is the stream the warm-up draws from (nil without Config.Warmup).
func newWarm(seed uint64, cfg Config) *rand.Rand {
	if cfg.Warmup <= 0 {
		return nil
	}
	return rand.New(rand.NewPCG(seed, warmStream))
}

// warmFor returns m's warm-up hook (nil without Config.Warmup): each
// request replaces the one before, and is ready after a time drawn now.
func (h *history) warmFor(m *simMember) func(v int64, slots []int, ready func()) {
	if h.warm == nil {
		return nil
	}
	m.warming = &warming{warm: map[int]bool{}}
	return func(v int64, slots []int, ready func()) {
		wg := m.warming
		wg.gen++
		gen := wg.gen
		if len(slots) == 0 {
			return
		}
		W := h.cfg.Warmup
		var d time.Duration
		switch h.warm.IntN(3) {
		case 0:
			d = time.Duration(h.warm.Int64N(int64(10 * time.Millisecond)))
		case 1:
			d = time.Duration(h.warm.Int64N(int64(W)))
		default:
			d = W + time.Duration(h.warm.Int64N(int64(W)))
		}
		h.w.Tracef("%s: warms up slots %v for version %d, ready in %v", m.name, slots, v, d)
		h.w.After(d, func() {
			m.env.run(func() {
				if gen != wg.gen || !m.alive {
					return
				}
				for _, s := range slots {
					wg.warm[s] = true
				}
				ready()
			})
		})
	}
}

// earlyMoves returns the hook that checks the moves leader makes before
// the warm-up time has passed (nil without Config.Warmup).
func (h *history) earlyMoves(leader *simMember) func(moves map[int]string) {
	if h.warm == nil {
		return nil
	}
	return func(moves map[int]string) {
		if h.warmUnchecked {
			return
		}
		h.res.EarlyMoves++
		h.w.Tracef("%s: makes the announced moves before the warm-up time: every heir is ready", leader.name)
		for _, s := range slices.Sorted(maps.Keys(moves)) {
			heir := moves[s]
			for _, m := range h.members {
				// (A process restarted under the heir's name that has not
				// joined yet is not the heir: the name's key is its
				// predecessor's still. Nor is a process whose member key
				// an operator deleted, with another process of its name
				// in under a key of its own, which the first sees deleted
				// before the map that moves the slot: rink-sim -keys
				// -warmup 300ms -drain 500ms seeds 2477, 3262 and 4366,
				// where the moves went to the second, which had warmed.)
				if m.name != heir || !m.alive || !m.m.Ranked() || m.warming == nil || m.warming.warm[s] {
					continue
				}
				if kv := h.w.Etcd.kvs["rink/sim/members/"+heir]; kv != nil {
					if lease, _, _ := m.m.Trusted(); lease != kv.Lease {
						continue
					}
				}
				h.violate(fmt.Sprintf("slot %d: %s makes its move to %s before the warm-up time, but %s has not warmed it up", s, leader.name, heir, heir))
			}
		}
	}
}
