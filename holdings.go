package rink

import (
	"context"
	"github.com/rink-go/rink/internal/core"
	"runtime"
	"slices"
	"time"
)

// slotHolding is what the applied map gives this member: since which map
// seq (and that map's mod revision) each slot has continuously been ours,
// and the cancel function of its holding, if held.
type slotHolding struct {
	mine    holdings
	pending slotSet // owned but not yet held
	moved   bool    // reconcile changed what this member owns (see applyMap)
	late    []int   // slots given away but still held (plantEarlyAck only)
}

// holdings is the run goroutine's record of the slots the applied map
// gives this member: one entry per slot it owns, none for the others, so
// that a member's memory for it is O(slots it owns), not O(slots): at
// 16,384 slots per-slot arrays cost every member a megabyte (issue 25).
// (Slots below denseSlots are kept by slot, a pointer each at most.)
//
// Invariants: a slot has an entry exactly while the applied map gives it
// to this member (see reconcile), in dense if below denseSlots, else in
// m, and n counts them; cancel is non-nil exactly while the
// member holds it (see acquire, release); gain ≥ 1 is the seq of the map
// from which on the slot has been ours in every map applied, and gainRev
// that map's mod revision.
type holdings struct {
	// dense holds the entries of slots below denseSlots, by slot (nil
	// for the others), and m those of the rest: a member that takes over
	// half of 1,024 slots (a departure from a rink of two) grew a map
	// slot by slot on the path of the handover. n counts the entries.
	dense []*ownedSlot
	m     map[int]*ownedSlot
	n     int
	block []ownedSlot // what own cuts entries from (see reserve)
}

// denseSlots bounds the slots whose entries are kept by slot (see
// holdings): at most 16 KiB of pointers a member.
const denseSlots = 2048

// ownedSlot is one slot this member owns.
type ownedSlot struct {
	gain, gainRev int64
	at            time.Time // when it became ours (for Event.Wait)
	from          string    // its owner in the map before (for Event.From)
	cancel        context.CancelCauseFunc
}

// owns reports whether the applied map gives slot s to this member.
func (h *holdings) owns(s int) bool { return h.of(s) != nil }

// of returns slot s's entry, or nil when this member does not own it.
func (h *holdings) of(s int) *ownedSlot {
	if s >= 0 && s < len(h.dense) {
		return h.dense[s]
	}
	if s < denseSlots {
		return nil
	}
	return h.m[s]
}

// count returns how many slots this member owns.
func (h *holdings) count() int { return h.n }

// all yields the slots this member owns (the dense ones in order, then the
// others in no order).
func (h *holdings) all() func(yield func(int) bool) {
	return func(yield func(int) bool) {
		for s, e := range h.dense {
			if e != nil && !yield(s) {
				return
			}
		}
		for s := range h.m {
			if !yield(s) {
				return
			}
		}
	}
}

// own records slot s as owned, and returns its entry.
func (h *holdings) own(s int) *ownedSlot {
	var e *ownedSlot
	if len(h.block) > 0 {
		e, h.block = &h.block[0], h.block[1:]
	} else {
		e = &ownedSlot{}
	}
	if old := h.of(s); old == nil {
		h.n++
	}
	if s >= 0 && s < denseSlots {
		if s >= len(h.dense) {
			h.dense = append(h.dense, make([]*ownedSlot, s+1-len(h.dense))...)
		}
		h.dense[s] = e
		return e
	}
	if h.m == nil {
		h.m = map[int]*ownedSlot{}
	}
	h.m[s] = e
	return e
}

// reserve makes room for up to n more entries at once (see holdings).
func (h *holdings) reserve(n int) {
	if n >= 16 {
		h.block = make([]ownedSlot, n)
	}
}

// disown drops slot s, which must not be held.
func (h *holdings) disown(s int) {
	if h.of(s) == nil {
		return
	}
	h.n--
	if s >= 0 && s < len(h.dense) {
		h.dense[s] = nil
		return
	}
	delete(h.m, s)
}

// isHeld reports whether this member holds slot s.
func (h *holdings) isHeld(s int) bool {
	e := h.of(s)
	return e != nil && e.cancel != nil
}

// anyHeld reports whether this member holds any slot.
func (h *holdings) anyHeld() bool {
	for s := range h.all() {
		if h.of(s).cancel != nil {
			return true
		}
	}
	return false
}

// dropPending gives up the slots not yet held: whatever gave them to us
// may be stale, and they are gained again from the next usable map.
func (r *Rink) dropPending() {
	st := &r.st
	for s := range st.pending.all() {
		st.mine.disown(s)
	}
	st.pending.clear()
	r.dropWaitingReplicas()
}

// reconcile brings the per-slot ownership in line with the applied map:
// it releases slots the map took away and marks new ones pending.
func (r *Rink) reconcile() { r.reconcileSlots(nil) }

// reconcileSlots is reconcile for the slots in only (nil: every slot):
// after a record whose other slots kept their owners (see mapDelta).
func (r *Rink) reconcileSlots(only []int) {
	st := &r.st
	mine := st.inc != nil && st.selfSeen && st.incompatible == nil && !st.stopping
	// Our index in the map, or -1: owner compares indexes, not names (this
	// runs on the path of every handover).
	S := r.opts.slots
	idx := -1
	if mine && len(st.cur.Table) == st.cur.TableLen() && st.cur.Slots == S {
		idx = r.rankedIndex(r.opts.member)
	}
	defer r.reconcileReplicas(only, idx) // (after the primaries: only is the record's rows, nil for all)
	switch {
	case idx < 0:
		// Nothing is ours: only the slots that were can change (whatever
		// only says: this member may have stopped being able to own).
		only = slices.Sorted(st.mine.all())
		if only == nil {
			only = []int{}
		}
	case only == nil:
		// Every slot: those the map gives us and those we own, found with
		// a pass of integer comparisons over the table, not a lookup per
		// slot (this runs on the path of a handover).
		only = []int{}
		for s, o := range st.cur.Table[:S] {
			if int(o) == idx {
				only = append(only, s)
			}
		}
		gains := len(only)
		st.mine.reserve(gains - st.mine.count())
		for s := range st.mine.all() {
			if int(st.cur.Table[s]) != idx {
				only = append(only, s) // (to lose)
			}
		}
		slices.Sort(only[gains:]) // (in slot order, whatever the map's: a history replays)
	}
	now := r.now()
	for s := range core.SlotRange(only, S) {
		want := idx >= 0 && int(st.cur.Table[s]) == idx
		if want == st.mine.owns(s) || want && st.curRev == 0 {
			continue // (no new gains while the map key is absent)
		}
		st.moved = true
		if want {
			e := st.mine.own(s)
			e.gain, e.gainRev, e.at = st.curSeq, st.curRev, now
			if st.prevSeq == st.curSeq-1 {
				e.from = r.prevOwner(s)
			}
			st.pending.add(s)
			continue
		}
		st.pending.del(s)
		if st.mine.isHeld(s) && r.planted(plantEarlyAck) && mine {
			if !slices.Contains(st.late, s) {
				st.late = append(st.late, s) // (released after the acknowledgement: see releaseLate)
			}
			continue
		}
		if st.mine.isHeld(s) {
			r.release(s, ErrRoleMoved)
			st.exposeDue = true // (a secondary, if still among the slot's replicas)
		}
		st.mine.disown(s)
	}
}

// settleHistory records what the map applied last moved, after the
// acquisitions (see slotHistory.lazy), and prunes the history, which
// pruneHistory left alone while that map was pending.
func (r *Rink) settleHistory() {
	if r.st.hist.Lazy.Seq != 0 {
		r.st.hist.Settle()
		r.pruneHistory()
	}
}

// tryAcquire starts holding the pending slots that nobody else can hold.
func (r *Rink) tryAcquire() {
	st := &r.st
	defer r.settleHistory()
	if st.inc == nil || !st.selfSeen || st.incompatible != nil || st.stopping || st.inc.ctx.Err() != nil {
		return
	}
	if st.pending.n == 0 && st.waiting == 0 {
		if st.exposeDue && !st.inc.expired() {
			r.exposeSecondaries() // (a primary released, a secondary still)
		}
		return
	}
	if st.inc.expired() {
		// Past the lease's deadline (a process that resumes after a
		// stop handles what piled up before its keeper wakes): a holding
		// started now would be fenced at birth. Fence now instead.
		r.fence(st.inc, ErrFenced)
		return
	}
	if v := r.mapView(); v != 0 && v < st.inc.CreateRev {
		// The map was planned before our key existed: it gives our name's
		// slots to an earlier incarnation of the name (a process restarted
		// under it), and a newer map may give them to others already,
		// whose heirs count the name as gone (see noteGone). The leader
		// plans anew once it sees our key (see rankedReborn).
		return
	}
	if st.rev < st.inc.BoundRev {
		// The view our map comes from is older than our key's binding:
		// the own watch showed a resume's rebinding before the view
		// caught up (its watch broke, say). A map put meanwhile may give
		// our slots to others, who start them with that map's revision as
		// their token: one taken here from the older map would be the
		// binding's, above theirs. A rejoin lists the rink anew (see
		// startIncarnation), so the view gets there.
		return
	}
	if !r.leaseGate() && !r.planted(plantSkipBarrier) {
		return // the map does not record the lease we hold slots under yet (see leaseGate)
	}
	var others []memberBound
	var low int64
	ok := false
	if st.view.wide {
		others, ok = r.others()
	} else {
		low, ok = r.narrowBarrier()
	}
	skip := r.planted(plantSkipBarrier)
	if !ok && !skip {
		return
	}
	hushed := r.hushed() && !skip
	if !hushed {
		r.startReplicas(others, low, skip || r.planted(plantSkipReplicaBarrier))
		defer r.exposeSecondaries()
	}
	// Slots somebody awaits first: their roles wait for nobody's else. The
	// second pass takes every slot left, whether or not somebody began to
	// await it meanwhile (an acquisition wakes goroutines that may).
	for _, first := range [2]bool{true, false} {
		woke := false
		for s := range st.pending.all() {
			if (!first || r.slots.load(s) != nil) && r.mayHoldPrimary(s) && (!hushed || r.hushSpares(s)) && (skip || st.view.wide && r.free(s, others) || !st.view.wide && r.freeNarrow(s, low)) {
				st.pending.del(s)
				r.acquire(s)
				woke = true
			}
		}
		if first && woke && st.pending.n > 0 && r.simFx == nil {
			// Let the goroutines the first pass woke run now: on a busy
			// machine they would wait for the second pass, hundreds of
			// slots nobody awaits, before they get a processor (in
			// rinkbench's sidecar scenario the in-process apps' gap fell
			// from 2.2-2.5 ms to 1.5-1.6 ms beside the build before;
			// TestAwaitedRoleStartsBeforeTheOthers). The simulator runs
			// the woken in its own order.
			runtime.Gosched()
		}
	}
}

// acquire starts holding slot s: it publishes a fresh context carrying the
// slot's fencing token and wakes the goroutines awaiting the slot's roles.
func (r *Rink) acquire(s int) {
	st := &r.st
	e := st.mine.of(s)
	// Above every token of an earlier holder of the slot: of another name
	// (gainRev: the slot has been ours since that map), and of an earlier
	// incarnation of ours (our key's creation or rebinding, and the map
	// that began to record our lease: see ownLeaseRev).
	token := max(e.gainRev, st.inc.CreateRev, st.inc.BoundRev, st.ownLeaseRev)
	r.endSecondary(s, ErrPromoted) // (a secondary of this slot until now: its primary from here)
	ctx, cancel := context.WithCancelCause(st.inc.ctx)
	e.cancel = cancel
	now := r.now()
	r.emit(Event{Kind: EventAcquired, Time: now, Slot: s, Token: token, From: e.from, Wait: now.Sub(e.at)})
	rc := &roleContext{Context: context.WithValue(ctx, tokenKey{}, token), r: r, inc: st.inc}
	r.swapSlot(s, &slotState{ctx: rc, at: now, changed: make(chan struct{})})
	r.notifySets(s)
}

// release stops holding slot s.
func (r *Rink) release(s int, cause error) {
	st := &r.st
	e := st.mine.of(s)
	e.cancel(cause)
	e.cancel = nil
	cur := r.slots.load(s)
	if cur != nil && cur.ctx != nil {
		cause = context.Cause(cur.ctx) // a fence's cause, if it came first
	}
	r.emit(Event{Kind: EventReleased, Slot: s, Cause: cause})
	r.startDrain(s, cur, cause)
	r.swapSlot(s, nil)
	r.notifySets(s)
}

func (r *Rink) swapSlot(s int, next *slotState) {
	if old := r.slots.at(s).Swap(next); old != nil {
		close(old.changed)
	}
}
