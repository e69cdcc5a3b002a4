package rink

import (
	"context"
	"time"
)

// holdings is the run goroutine's record of the slots the applied map
// gives this member: one entry per slot it owns, none for the others, so
// that a member's memory for it is O(slots it owns), not O(slots): at
// 16,384 slots per-slot arrays cost every member a megabyte (issue 25).
//
// Invariants: a slot has an entry exactly while the applied map gives it
// to this member (see reconcile); cancel is non-nil exactly while the
// member holds it (see acquire, release); gain ≥ 1 is the seq of the map
// from which on the slot has been ours in every map applied, and gainRev
// that map's mod revision.
type holdings struct {
	m map[int]*ownedSlot
}

// ownedSlot is one slot this member owns.
type ownedSlot struct {
	gain, gainRev int64
	at            time.Time // when it became ours (for Event.Wait)
	from          string    // its owner in the map before (for Event.From)
	cancel        context.CancelCauseFunc
}

// owns reports whether the applied map gives slot s to this member.
func (h *holdings) owns(s int) bool {
	_, ok := h.m[s]
	return ok
}

// of returns slot s's entry, or nil when this member does not own it.
func (h *holdings) of(s int) *ownedSlot { return h.m[s] }

// own records slot s as owned, and returns its entry.
func (h *holdings) own(s int) *ownedSlot {
	if h.m == nil {
		h.m = map[int]*ownedSlot{}
	}
	e := &ownedSlot{}
	h.m[s] = e
	return e
}

// disown drops slot s, which must not be held.
func (h *holdings) disown(s int) { delete(h.m, s) }

// isHeld reports whether this member holds slot s.
func (h *holdings) isHeld(s int) bool {
	e := h.m[s]
	return e != nil && e.cancel != nil
}

// anyHeld reports whether this member holds any slot.
func (h *holdings) anyHeld() bool {
	for _, e := range h.m {
		if e.cancel != nil {
			return true
		}
	}
	return false
}
