package rink

// Acknowledgements that a change does not need (issue 25).
//
// A member's acknowledgement of seq a says: it holds no slot that the maps
// from a on do not give it. If no map after a up to some seq x changes the
// slots it owns, it holds nothing that the maps from x on do not give it:
// what it owned at a it still owns at x, and anything it lost before a it
// had released when it acknowledged a. So the leader, which sees every map
// put of the lineage, raises each member's bound to the newest such x
// (changeLog.still): the newest map when nothing changed the member since
// its acknowledgement, and the map before the first change otherwise. The
// floor says so with Still, and a member writes no acknowledgement for a
// map that leaves its slots alone (ackOwed). A change then costs one
// acknowledgement per member whose slots it moves (and per heir of an
// announcement, which says it is ready in its acknowledgement), not one
// per member.
//
// The leader only knows the changes of the maps it saw: from the first map
// of the lineage its view holds (Base, after its listing) on. A member
// whose acknowledgement is below Base acknowledges again, so a new leader
// costs every member one write, once.
//
// Leaders of d85b50e and before write no Still: under them members
// acknowledge every map, as before.

// ackOwed reports whether this member owes an acknowledgement of its
// current map: the leader cannot count it as having acknowledged it
// otherwise, or waits for what it says.
//
//   - It has sent none in this incarnation and lineage: the leader knows
//     nothing of it yet (but see firstAckOwed).
//   - It is ready for a newer announcement than it said (see
//     applyIncoming): a leaving member waits for that.
//   - The floor does not say Still (a leader of d85b50e or before, or
//     none yet): every map is acknowledged, as before.
//   - A map since its last acknowledgement changed its slots (the heirs of
//     what it lost wait for it) or the slots announced to it (the leader
//     waits for its readiness): changedSeq.
//   - Its last acknowledgement is below the floor's Base (a new leader),
//     or the floor lists it as lagging: the leader asks for it.
func (r *Rink) ackOwed() bool {
	st := &r.st
	a := &st.acked
	if a.inc == nil && st.joins == 1 {
		return r.firstAckOwed()
	}
	if a.inc != st.inc || a.lineage != st.lineage || a.seq < 1 {
		return true
	}
	if r.warmedNow() > a.warm {
		return true // an heir says it is still ready for the newest map (see applyIncoming)
	}
	if a.seq >= st.curSeq {
		return false
	}
	f := &st.floor
	if !f.Still || f.Lineage != st.lineage || f.Seq < 1 {
		return true
	}
	if st.changedSeq > a.seq || a.seq < f.Base {
		return true
	}
	// Listed as lagging: the leader and this member disagree on what
	// changed it, or the leader lost its acknowledgement. (An incomplete
	// floor names nobody; the members it waits for are the ones a change
	// moved, which owe theirs anyway, and once few enough lag, it names
	// the rest.)
	_, listed := f.SeqLagging[r.opts.member]
	return f.SeqComplete && listed && a.seq < f.Seq
}

// firstAckOwed is ackOwed for a member that has acknowledged nothing since
// its process started. Under a leader that says Still, its bound is the
// map current when its key was created, raised while no map changes its
// slots (see compute): it owes nothing until a map gives it slots or
// announces slots to it, ranks it (the rink is at rest only once every
// ranked member has acknowledged), or the floor says that the leader
// cannot bound it (it lists it as lagging, or is incomplete). The first
// map a member applies often comes just before the one that ranks it:
// acknowledging both cost every join a write.
func (r *Rink) firstAckOwed() bool {
	st := &r.st
	f := &st.floor
	if !f.Still || f.Lineage != st.lineage || f.Seq < 1 || st.changedSeq > 0 || st.selfIdx >= 0 || r.warmedNow() > 0 || !f.SeqComplete {
		return true
	}
	_, listed := f.SeqLagging[r.opts.member]
	return listed
}

// ackState is what the run goroutine last handed the ack writer (see
// sendAckLazily): the incarnation, the lineage, the seq and the warm-up
// readiness.
type ackState struct {
	inc     *incarnation
	lineage int64
	seq     int64
	warm    int64
}
