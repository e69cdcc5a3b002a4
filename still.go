package rink

import (
	"sort"

	"github.com/rink-go/rink/internal/wire"
)

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

// mapShape is what the leader's view keeps of the newest map: who owns
// which slot.
type mapShape struct {
	Members []string       `json:"members"`
	Table   wire.SlotTable `json:"table"`
}

// changedBetween calls mark for every member whose slots differ between a
// and b, once per name or more: lost says that b takes from it a slot that
// a gives it (else b gives it one that a does not).
func changedBetween(a, b *mapShape, mark func(name string, lost bool)) {
	owner := func(m *mapShape, s int) string {
		if s >= len(m.Table) || m.Table[s] < 0 || int(m.Table[s]) >= len(m.Members) {
			return ""
		}
		return m.Members[m.Table[s]]
	}
	for s := range max(len(a.Table), len(b.Table)) {
		if x, y := owner(a, s), owner(b, s); x != y {
			if x != "" {
				mark(x, true)
			}
			if y != "" {
				mark(y, false)
			}
		}
	}
}

// maxChanges bounds the changes the leader remembers per member.
const maxChanges = 8

// maxLosses bounds the losses the leader remembers (see changeLog.losses).
const maxLosses = 4096

// changeLog is the leader's record of which maps of the lineage changed
// each member's slots.
//
// Invariants: base is 0 (nothing known) or the seq of the first map put of
// the lineage the view saw, and seq that of the newest, base ≤ seq; every
// put from base+1 to seq was seen, in order. at[name] lists, rising, the
// newest (up to maxChanges) of those seqs whose map gave name other slots
// than the map before; every such seq above at[name].lost is listed. Of
// the maps up to base nothing is known.
//
// losses lists, by rising seq, the members each map from lossFrom+1 to seq
// took a slot from (base ≤ lossFrom ≤ seq): whose acknowledgements heirs
// wait for (see aggregation.idle). Past maxLosses the oldest half go, and
// lossFrom rises to the seq of the newest that went.
type changeLog struct {
	base, seq int64
	last      mapShape
	at        map[string]*memberChanges
	losses    []seqLoss
	lossFrom  int64
}

// seqLoss says that the map of seq took a slot from name.
type seqLoss struct {
	seq  int64
	name string
}

// memberChanges is one member's entry in a changeLog.
type memberChanges struct {
	seqs []int64 // rising
	lost int64   // the newest change dropped from seqs (0: none)
	took int64   // the newest seq listed in losses for this member (0: none)
}

// Reset forgets everything (a listing, a new lineage, the map key gone).
func (c *changeLog) Reset() {
	c.base, c.seq, c.last = 0, 0, mapShape{}
	clear(c.at)
	c.losses, c.lossFrom = c.losses[:0], 0
}

// See records the map put of seq seq. A put that does not follow the last
// one seen starts the log again at it.
func (c *changeLog) See(seq int64, m mapShape) {
	if c.base == 0 || seq != c.seq+1 {
		c.Reset()
		c.base, c.seq, c.last, c.lossFrom = seq, seq, m, seq
		return
	}
	if c.at == nil {
		c.at = map[string]*memberChanges{}
	}
	changedBetween(&c.last, &m, func(name string, lost bool) {
		ch := c.at[name]
		if ch == nil {
			ch = &memberChanges{}
			c.at[name] = ch
		}
		if lost && ch.took != seq {
			ch.took = seq
			if len(c.losses) == maxLosses {
				c.lossFrom = c.losses[maxLosses/2-1].seq
				c.losses = append(c.losses[:0], c.losses[maxLosses/2:]...)
			}
			c.losses = append(c.losses, seqLoss{seq, name})
		}
		if n := len(ch.seqs); n > 0 && ch.seqs[n-1] == seq {
			return
		}
		if len(ch.seqs) == maxChanges {
			ch.lost = ch.seqs[0]
			ch.seqs = append(ch.seqs[:0], ch.seqs[1:]...)
		}
		ch.seqs = append(ch.seqs, seq)
	})
	c.seq, c.last = seq, m
}

// LossesAfter returns the losses of the maps after seq lo, rising; ok is
// false when the log does not know them all.
func (c *changeLog) LossesAfter(lo int64) (losses []seqLoss, ok bool) {
	if c.base == 0 || lo < c.lossFrom {
		return nil, false
	}
	i := sort.Search(len(c.losses), func(i int) bool { return c.losses[i].seq > lo })
	return c.losses[i:], true
}

// ChangedAfter reports whether the log knows of a map after seq b that
// changed name's slots: a member it changed owes an acknowledgement, and
// knows it (see ackOwed).
func (c *changeLog) ChangedAfter(name string, b int64) bool {
	if c.base == 0 || b < c.base {
		return false
	}
	ch := c.at[name]
	return ch != nil && len(ch.seqs) > 0 && ch.seqs[len(ch.seqs)-1] > b
}

// Forget drops a member whose key went: a later member of that name starts
// from base (or from a change that names it).
func (c *changeLog) Forget(name string) { delete(c.at, name) }

// Still raises bound, a lower bound of a member's acknowledgement (it
// holds no slot that the maps from that seq on do not give it), to the
// newest seq x such that no map after bound up to x changed the member's
// slots: the maps from bound to x give it the same slots, so whatever it
// holds, the maps from x on give it too. That is the view's seq when
// nothing changed it since bound, and the seq before the first change
// after bound otherwise (the map before a change that takes slots away:
// an heir that applied it finds there that the member did not hold what
// it gains, whatever the member acknowledged long before). Bounds the log
// cannot tell about are returned as they are.
func (c *changeLog) Still(name string, bound int64) int64 {
	if c.base == 0 || bound < c.base || bound > c.seq {
		return bound
	}
	ch := c.at[name]
	if ch == nil {
		return c.seq
	}
	if bound < ch.lost {
		return bound
	}
	for _, s := range ch.seqs {
		if s > bound {
			return s - 1
		}
	}
	return c.seq
}

// movedFor reports whether cur gives the member at index ci other slots
// than prev gives the member at index pi (-1: not ranked there).
func movedFor(prev, cur *wire.Map, pi, ci int, delta *wire.MapDelta) bool {
	owns := func(m *wire.Map, i, s int) bool { return i >= 0 && s < len(m.Table) && int(m.Table[s]) == i }
	if delta != nil && !delta.Renamed {
		// The other slots kept their entries and those entries' names (so
		// none of them is pi or ci, if those differ: the index we left
		// was renamed or dropped, the one we took was renamed or is new);
		// the moved ones' entries in prev are the delta's (prev's table
		// may be cur's: see applyInPlace).
		for i, s := range delta.Moved {
			if (pi >= 0 && delta.Old[i] == pi) != owns(cur, ci, s) {
				return true
			}
		}
		return false
	}
	for s := range max(len(prev.Table), len(cur.Table)) {
		if owns(prev, pi, s) != owns(cur, ci, s) {
			return true
		}
	}
	return false
}

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
	if st.warmed > a.warm {
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
	if !f.Still || f.Lineage != st.lineage || f.Seq < 1 || st.changedSeq > 0 || st.selfIdx >= 0 || st.warmed > 0 || !f.SeqComplete {
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
