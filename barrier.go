package rink

import (
	"cmp"
	"maps"
	"slices"

	"github.com/rink-go/rink/internal/wire"
)

// barrier is what frees slots for this member to start (see free), and
// what this member tells others of the slots it let go.
type barrier struct {
	floor wire.AckFloor // the leader's summary of acknowledgements (zero: none)
	// acked is the acknowledgement last handed to the ack writer, and
	// changedSeq the newest applied seq whose map changed this member's
	// slots or announcements (see still.go): with a floor that says
	// Still, a map that changes neither costs no acknowledgement.
	acked      ackState
	changedSeq int64
}

// memberBound is another live member and a lower bound of its
// acknowledgement (see bound).
type memberBound struct {
	name  string
	bound int64
}

// others returns every other live member with its bound, for free; ok is
// false when no slot can be free now: a restore's lineage or quiet time
// (see hush), or a member whose acknowledgement is not known at all.
func (r *Rink) others() (others []memberBound, ok bool) {
	st := &r.st
	if st.taint != 0 && st.taint == st.lineage {
		return nil, false // a lineage a restore brought back: its acks may be stale
	}
	if r.startsQuieted() {
		return nil, false // after a restore, members nobody sees may still act (see quietStarts; hush is the caller's: see hushSpares)
	}
	if len(st.ghosts) > 0 && !r.ghostsCovered() {
		return nil, false // a member whose key went may still act, and what it may hold is not known (see noteGhosts)
	}
	for name := range st.members {
		if name == r.opts.member {
			continue
		}
		a := r.bound(name)
		if a < 1 {
			return nil, false
		}
		others = append(others, memberBound{name, a})
	}
	// A ghost the floor covers holds up only what its name may hold
	// from its acknowledgement on (issue 42); a ghost of a name with a
	// key is checked with that name already (the floor's bound for it is
	// at most the ghost's).
	for _, lease := range slices.Sorted(maps.Keys(st.ghosts)) {
		name := st.ghosts[lease]
		if _, ok := st.members[name]; ok && name != r.opts.member || slices.ContainsFunc(others, func(o memberBound) bool { return o.name == name }) {
			continue
		}
		a := r.bound(name)
		if a < 1 {
			return nil, false
		}
		others = append(others, memberBound{name, a})
	}
	return others, true
}

// ghostsCovered reports whether the floor covers every ghost this member
// knows (see ackFloor.Covered), and counts no other: each then holds up
// only the slots its name may hold, by the floor's bound for it.
func (r *Rink) ghostsCovered() bool {
	st := &r.st
	f := &st.floor
	if !r.floorUsable() || f.Ghosts != 0 || len(f.Covered) < len(st.ghosts) {
		return false
	}
	for lease := range st.ghosts {
		if !slices.Contains(f.Covered, lease) {
			return false
		}
	}
	return true
}

// free reports whether every other live member is known not to hold slot s:
// it has acknowledged a map from which on the slot was ours, or none of the
// maps from its acknowledged one up to that one gave it the slot. A member
// that is gone (its key deleted: lease revoked or expired) holds nothing,
// because members fence themselves before their lease can expire.
//
// Acknowledgements come from the leader's floor, a lower bound of each
// member's (see acks.go); a bound serves as well as the acknowledgement
// itself, only more slowly: the maps from the bound on are checked. others
// is what others returned.
func (r *Rink) free(s int, others []memberBound) bool {
	st := &r.st
	g := st.mine.of(s).gain
	for _, o := range others {
		if o.bound >= g {
			continue
		}
		if held, known := st.hist.HeldBy(s, o.name, o.bound, g); held || !known {
			return false
		}
	}
	return true
}

// bound returns a lower bound of a member's acknowledgement as a seq of
// the current lineage, or 0 when none is known. It takes the floor's seq
// bound, and for a member that predates seqs its version bound, named by
// the seq of the one applied map of that version (a version that repeats
// in the lineage names nothing). A floor of another lineage, or of a map
// this member has not applied yet, tells nothing yet; a newer one comes.
func (r *Rink) bound(name string) int64 {
	f := &r.st.floor
	if !r.floorUsable() {
		return 0
	}
	if f.Seq > 0 {
		if a := f.SeqOf(name); a > 0 {
			return a
		}
	}
	return r.seqOfVersion(f.Of(name))
}

// floorUsable reports whether the floor speaks of the applied map's
// lineage, and of no map (by seq, or by version for a leader that writes
// no seqs) beyond the newest applied here.
func (r *Rink) floorUsable() bool {
	st := &r.st
	f := &st.floor
	if f.Lineage != st.lineage || st.curRev == 0 {
		return false
	}
	if f.Seq > 0 {
		return f.Seq <= st.curSeq
	}
	return f.Version <= st.cur.Version
}

// seqOfVersion returns the seq of the applied map of version v, or 0.
func (r *Rink) seqOfVersion(v int64) int64 {
	if v < 1 || v <= r.st.repeats {
		return 0
	}
	return max(r.st.verSeq[v], 0)
}

// pruneHistory drops applied maps below the floor's lowest acknowledgement,
// and all but the newest maxHistory. A later floor may be lower (a member
// joined whose acknowledgement is unknown yet, a new leader's first floor);
// free then misses a map it needs and waits, which is safe.
func (r *Rink) pruneHistory() {
	st := &r.st
	if st.hist.Lazy.Seq != 0 {
		return // (the step settles it after its acquisitions, and the next batch prunes: see slotHistory.lazy)
	}
	low := st.curSeq - maxHistory + 1
	if f := &st.floor; f.Lineage == st.lineage && st.curRev != 0 {
		if f.Seq > 0 && f.SeqFloor >= 1 {
			low = max(low, min(f.SeqFloor, st.curSeq))
		} else if f.Seq == 0 && f.Floor >= 1 && f.Floor <= st.cur.Version {
			low = max(low, r.seqOfVersion(f.Floor))
		}
	}
	low = max(low, st.hist.KeepingAtMost(cmp.Or(r.simKnobs.HistChanges, maxHistChanges)))
	if !st.hist.Covers(low) || low == st.hist.From {
		return
	}
	if low == st.curSeq {
		st.hist.Rebase(st.curSeq) // (every member at the newest map)
	} else {
		st.hist.Prune(low)
	}
	for ver, seq := range st.verSeq {
		if seq >= 0 && seq < low {
			delete(st.verSeq, ver)
		}
	}
}
