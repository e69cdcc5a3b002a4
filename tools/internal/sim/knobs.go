package sim

import (
	"math/rand/v2"

	"github.com/rink-go/rink/internal/simhook"
)

// Knobs (Config.Knobs, rink-sim -knobs), as FoundationDB's BUGGIFY knobs:
// the bounds on what a member remembers (simhook.Knobs), which production
// sets far beyond what a history of a minute reaches, are lowered, so
// that what happens past them happens here: a member's handover history
// prunes its oldest changes (rink's maxHistChanges), the leader's view
// forgets the oldest map puts it saw (core.AckView.Marks) and its change
// log the oldest losses (core.ChangeLog). What needed them waits, or
// falls back to a lower bound; the checks say whether that is safe, and
// whether the rink still gets every slot held at the end.
//
// A history draws its knobs once, from a stream of its own, never from the
// world's: with Config.Knobs a seed draws the same fault kinds as
// without, and without it every seed plays as before knobs existed.

// knobStream is the second word of the seed of the stream that draws the
// knobs ("knob").
const knobStream = 0x6b6e6f62

// drawKnobs draws a history's knobs (zero, production's, without
// Config.Knobs): a handover history of 1 to 4 changes per slot, a view of
// 2 to 16 map puts, a change log of 2 to 16 losses.
func drawKnobs(seed uint64, cfg Config) simhook.Knobs {
	if !cfg.Knobs {
		return simhook.Knobs{}
	}
	rng := rand.New(rand.NewPCG(seed, knobStream))
	return simhook.Knobs{
		HistChanges: 1 + rng.IntN(4*cfg.Slots),
		Marks:       2 + rng.IntN(15),
		Losses:      2 + rng.IntN(15),
	}
}
