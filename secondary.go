package rink

import (
	"context"
	"maps"
	"slices"
	"time"
)

// Replicas (issue 26): in a rink of k > 1 replicas per slot (see
// WithReplicas) the map names k members per slot, its replica set: the
// primary, which holds the slot's roles as in a rink of one replica, and
// its secondaries. This file keeps this member's memberships of replica
// sets, the barrier that keeps at most k members holding a slot, and the
// secondaries' contexts.
//
// The barrier. A member counts as holding slot s (as primary or secondary)
// from the moment its membership of s's replica set starts until it
// applies a map that does not name it among s's replicas and releases s,
// before it acknowledges that map. A member that joined s's replica set
// at seq g (named among its replicas in every map from g on) starts its
// membership only when every other member M, with bound b of its
// acknowledgement, is known not to hold s beside the replicas of map g:
//
//   - b ≥ g: M applied g and released what it does not name M for; or
//   - map g names M among s's replicas; or
//   - no map from b to g-1 names M among s's replicas.
//
// Then at any instant the members holding s are among the replicas of one
// map, the map G in which the last of them to join s's replica set did
// (the newest gain): a holder whose applied map is at least G is named in
// G (it has been named in every map from its own gain, at most G, to its
// applied one); a holder h whose applied map is below G was checked by the
// member that joined at G unless G names it, and its bound then was at
// most h's applied map, which names it, so that member would have waited.
// So at most k members hold s, the same argument as the one-owner barrier
// (see free) with "named among s's replicas" for "owns s". The primary's
// own barrier (free, on the primary's row, with its token) is unchanged:
// a member starts s's primary only when that barrier passes too, so at
// most one member holds s's primary.
//
// Each row of the table (see rankMap.Replicas) is a slot of its own to
// the history, so "named among s's replicas in map m" is a lookup per row.
// The leader's raised bounds (still.go) and its record of losses see a
// change of any row as a change of its members' slots, which is more than
// a change of replica sets: a member that only moved from one row of s to
// another acknowledges at once, as one that lost s would.

// replicaHolding is this member's memberships of replica sets.
//
// Invariants: reps has an entry for slot s exactly while the rink has more
// than one replica per slot, this member can own slots (see
// reconcileSlots), and the applied map names it among s's replicas; gain
// ≥ 1 is the seq of the map from which on every applied map named it, and
// gainRev that map's mod revision; started says the barrier above passed
// since: this member may hold s; cancel is non-nil exactly while it holds
// s as a secondary (started, and not holding s's primary), and then the
// published secondary state of s (Rink.secs) carries its context. waiting
// counts the entries not started.
type replicaHolding struct {
	reps    map[int]*replicaSlot
	waiting int
	// exposeDue says that a secondary context may have to start or end
	// (see exposeSecondaries): a membership started or changed, or a
	// primary was released.
	exposeDue bool
}

// replicaSlot is one slot whose replica set names this member.
type replicaSlot struct {
	gain, gainRev int64
	at            time.Time
	started       bool
	cancel        context.CancelCauseFunc
}

// replicated reports whether the applied map has more than one replica
// per slot, and a table this member can read them from.
func (r *Rink) replicated() bool {
	m := &r.st.cur
	return m.Replicas > 1 && len(m.Table) == m.TableLen() && len(m.Members) > 0
}

// namedIn reports whether the applied map names index idx among slot s's
// replicas.
func (r *Rink) namedIn(s, idx int) bool {
	m := &r.st.cur
	for v := s; v < len(m.Table); v += m.Slots {
		if int(m.Table[v]) == idx {
			return true
		}
	}
	return false
}

// reconcileReplicas brings the memberships in line with the applied map,
// for the slots whose rows hold an entry in only (nil: every slot): it
// ends those the map no longer names this member in, and records new ones
// as waiting for the barrier. Run after reconcileSlots, whose gating it
// shares (idx is this member's index, or -1 when it owns nothing).
func (r *Rink) reconcileReplicas(only []int, idx int) {
	st := &r.st
	if !r.replicated() {
		idx = -1
	}
	if idx < 0 && len(st.reps) == 0 {
		return
	}
	S := r.opts.slots
	var slots []int
	switch {
	case idx < 0:
		for s := range st.reps {
			slots = append(slots, s)
		}
	case only == nil:
		for v, o := range st.cur.Table {
			if int(o) == idx && (len(slots) == 0 || slots[len(slots)-1] != v%S) {
				slots = append(slots, v%S)
			}
		}
		for s := range st.reps {
			slots = append(slots, s)
		}
	default:
		for _, v := range only {
			if v >= 0 {
				slots = append(slots, v%S)
			}
		}
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	now := r.now()
	for _, s := range slots {
		want := idx >= 0 && r.namedIn(s, idx)
		e := st.reps[s]
		if want == (e != nil) || want && st.curRev == 0 {
			continue
		}
		st.moved, st.exposeDue = true, true
		if want {
			if st.reps == nil {
				st.reps = map[int]*replicaSlot{}
			}
			st.reps[s] = &replicaSlot{gain: st.curSeq, gainRev: st.curRev, at: now}
			st.waiting++
			continue
		}
		r.endSecondary(s, ErrRoleMoved)
		if !e.started {
			st.waiting--
		}
		delete(st.reps, s)
	}
}

// dropWaitingReplicas gives up the memberships not started yet (see
// dropPending).
func (r *Rink) dropWaitingReplicas() {
	st := &r.st
	for s, e := range st.reps {
		if !e.started {
			delete(st.reps, s)
		}
	}
	st.waiting = 0
}

// regainReplicas counts the memberships not started yet as gained at seq
// and revision rev: the maps before were not all seen (see applyMap).
func (r *Rink) regainReplicas(seq, rev int64) {
	for _, e := range r.st.reps {
		if !e.started {
			e.gain, e.gainRev = seq, rev
		}
	}
}

// resyncReplicas restarts every membership this member holds, as of seq
// and revision rev, when it did not see every map since (a listing after
// a broken watch, a new lineage): a map it missed may have left it out of
// a slot's replicas and another put it back, and the barrier's argument
// needs every holder to have been named in every map from its gain on. A
// member that kept such a membership acknowledged the newer map, and a
// member that joined the set in the missed map started beside it while
// one that map still named had not let go: k+1 holders (found in review).
// So each membership passes the barrier again, from the first map after
// the gap, its primary released meanwhile (with one replica per slot a
// held primary is kept: the floor that shows this member's newer
// acknowledgement reaches an heir of a missed map only after the map
// that took the slot back, see free).
func (r *Rink) resyncReplicas(seq, rev int64) {
	st := &r.st
	for _, s := range slices.Sorted(maps.Keys(st.reps)) {
		e := st.reps[s]
		if !e.started {
			continue
		}
		if st.mine.isHeld(s) {
			r.release(s, ErrRoleMoved)
			o := st.mine.of(s)
			o.gain, o.gainRev = seq, rev
			st.pending.add(s)
		}
		r.endSecondary(s, ErrRoleMoved)
		e.started = false
		e.gain, e.gainRev = seq, rev
		st.waiting++
		st.moved, st.exposeDue = true, true
	}
}

// startReplicas starts the memberships that the barrier lets start (see
// the top of this file): with others (the wide view) or low (the narrow
// one), as tryAcquire computed them; skip starts them all (a planted
// bug).
func (r *Rink) startReplicas(others []memberBound, low int64, skip bool) {
	st := &r.st
	if st.waiting == 0 {
		return
	}
	for _, s := range slices.Sorted(maps.Keys(st.reps)) {
		e := st.reps[s]
		if e.started {
			continue
		}
		if skip || st.view.wide && r.replicasFree(s, e.gain, others) || !st.view.wide && r.replicasFreeNarrow(s, e.gain, low) {
			e.started = true
			st.waiting--
			st.exposeDue = true
		}
	}
}

// mayHoldPrimary reports whether this member may start slot s's primary
// as far as the replica sets go: always with one replica per slot, else
// once its membership of s's replica set has started.
func (r *Rink) mayHoldPrimary(s int) bool {
	if !r.replicated() {
		return true
	}
	e := r.st.reps[s]
	return e != nil && e.started
}

// exposeSecondaries starts a secondary context for every started
// membership whose slot's primary this member does not hold, and ends the
// one of every slot whose primary it holds now (ErrPromoted).
func (r *Rink) exposeSecondaries() {
	st := &r.st
	st.exposeDue = false
	for _, s := range slices.Sorted(maps.Keys(st.reps)) {
		e := st.reps[s]
		switch primary := st.mine.isHeld(s); {
		case primary && e.cancel != nil:
			r.endSecondary(s, ErrPromoted)
		case !primary && e.started && e.cancel == nil && st.inc != nil && st.inc.ctx.Err() == nil:
			r.startSecondary(s, e)
		}
	}
}

// startSecondary publishes a secondary context for slot s.
func (r *Rink) startSecondary(s int, e *replicaSlot) {
	st := &r.st
	ctx, cancel := context.WithCancelCause(st.inc.ctx)
	e.cancel = cancel
	now := r.now()
	r.emit(Event{Kind: EventSecondaryAcquired, Time: now, Slot: s, Wait: now.Sub(e.at)})
	rc := &roleContext{Context: ctx, r: r, inc: st.inc}
	r.swapSecondary(s, &slotState{ctx: rc, at: now, changed: make(chan struct{})})
	r.notifySets(s)
}

// endSecondary ends slot s's secondary context, if any, with cause.
func (r *Rink) endSecondary(s int, cause error) {
	e := r.st.reps[s]
	if e == nil || e.cancel == nil {
		return
	}
	e.cancel(cause)
	e.cancel = nil
	if cur := r.secs.load(s); cur != nil && cur.ctx != nil {
		cause = context.Cause(cur.ctx) // a fence's cause, if it came first
	}
	r.emit(Event{Kind: EventSecondaryReleased, Slot: s, Cause: cause})
	r.swapSecondary(s, nil)
	r.notifySets(s)
}

func (r *Rink) swapSecondary(s int, next *slotState) {
	if old := r.secs.at(s).Swap(next); old != nil {
		close(old.changed)
	}
}

// endAllSecondaries ends every secondary context and membership (the
// member leaves).
func (r *Rink) endAllSecondaries(cause error) {
	st := &r.st
	for _, s := range slices.Sorted(maps.Keys(st.reps)) {
		r.endSecondary(s, cause)
	}
	clear(st.reps)
	st.waiting = 0
}

// replicasFree is the barrier for a membership of slot s's replica set
// gained at seq g, in the wide view: every other live member, with its
// bound, is clear of s (see replicaClear).
func (r *Rink) replicasFree(s int, g int64, others []memberBound) bool {
	for _, o := range others {
		if !r.replicaClear(s, o.name, o.bound, g) {
			return false
		}
	}
	return true
}

// replicasFreeNarrow is replicasFree for the narrow view (see freeNarrow):
// it asks about the members named among s's replicas in the maps from low
// (the floor's lowest bound) to g-1.
func (r *Rink) replicasFreeNarrow(s int, g, low int64) bool {
	st := &r.st
	if low >= g {
		return true
	}
	S, k := st.cur.Slots, st.cur.ReplicaCount()
	var names []string
	for rr := range k {
		holders, known := st.hist.During(rr*S+s, low, g)
		if !known {
			return false
		}
		names = append(names, holders...)
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		if name == "" || name == r.opts.member {
			continue
		}
		b, _ := r.holderBound(name)
		if !r.replicaClear(s, name, b, g) {
			return false
		}
	}
	return true
}

// replicaClear reports whether member name, whose acknowledgement is at
// least b, is known to hold slot s only as one of the replicas of map g:
// b ≥ g, or map g names it among s's replicas, or no map from b to g-1
// does (see the top of this file).
func (r *Rink) replicaClear(s int, name string, b, g int64) bool {
	st := &r.st
	if b >= g {
		return true
	}
	S, k := st.cur.Slots, st.cur.ReplicaCount()
	for rr := range k {
		in, known := st.hist.HeldBy(rr*S+s, name, g, g+1)
		if !known {
			return false
		}
		if in {
			return true
		}
	}
	for rr := range k {
		if held, known := st.hist.HeldBy(rr*S+s, name, b, g); held || !known {
			return false
		}
	}
	return true
}
