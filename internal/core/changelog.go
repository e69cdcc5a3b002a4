package core

import (
	"cmp"
	"sort"

	"github.com/rink-go/rink/internal/wire"
)

// mapShape is what the leader's view keeps of the newest map: who owns
// which slot.
type MapShape struct {
	Members []string       `json:"members"`
	Table   wire.SlotTable `json:"table"`
}

// changedBetween calls mark for every member whose slots differ between a
// and b, once per name or more: lost says that b takes from it a slot that
// a gives it (else b gives it one that a does not).
func changedBetween(a, b *MapShape, mark func(name string, lost bool)) {
	owner := func(m *MapShape, s int) string {
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
type ChangeLog struct {
	Base, seq int64
	last      MapShape
	at        map[string]*memberChanges
	losses    []seqLoss
	lossFrom  int64
	// MaxLosses bounds losses (0: maxLosses; at least 2: the simulator
	// lowers it, see simhook.Knobs).
	MaxLosses int
}

// seqLoss says that the map of seq took a slot from name.
type seqLoss struct {
	Seq  int64
	Name string
}

// memberChanges is one member's entry in a changeLog.
type memberChanges struct {
	seqs []int64 // rising
	lost int64   // the newest change dropped from seqs (0: none)
	took int64   // the newest seq listed in losses for this member (0: none)
}

// Reset forgets everything (a listing, a new lineage, the map key gone).
func (c *ChangeLog) Reset() {
	c.Base, c.seq, c.last = 0, 0, MapShape{}
	clear(c.at)
	c.losses, c.lossFrom = c.losses[:0], 0
}

// See records the map put of seq seq. A put that does not follow the last
// one seen starts the log again at it.
func (c *ChangeLog) See(seq int64, m MapShape) {
	if c.Base == 0 || seq != c.seq+1 {
		c.Reset()
		c.Base, c.seq, c.last, c.lossFrom = seq, seq, m, seq
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
			if n := cmp.Or(c.MaxLosses, maxLosses); len(c.losses) == n {
				c.lossFrom = c.losses[n/2-1].Seq
				c.losses = append(c.losses[:0], c.losses[n/2:]...)
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
func (c *ChangeLog) LossesAfter(lo int64) (losses []seqLoss, ok bool) {
	if c.Base == 0 || lo < c.lossFrom {
		return nil, false
	}
	i := sort.Search(len(c.losses), func(i int) bool { return c.losses[i].Seq > lo })
	return c.losses[i:], true
}

// ChangedAfter reports whether the log knows of a map after seq b that
// changed name's slots: a member it changed owes an acknowledgement, and
// knows it (see ackOwed).
func (c *ChangeLog) ChangedAfter(name string, b int64) bool {
	if c.Base == 0 || b < c.Base {
		return false
	}
	ch := c.at[name]
	return ch != nil && len(ch.seqs) > 0 && ch.seqs[len(ch.seqs)-1] > b
}

// Forget drops a member whose key went: a later member of that name starts
// from base (or from a change that names it).
func (c *ChangeLog) Forget(name string) { delete(c.at, name) }

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
func (c *ChangeLog) Still(name string, bound int64) int64 {
	if c.Base == 0 || bound < c.Base || bound > c.seq {
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
func MovedFor(prev, cur *wire.Map, pi, ci int, delta *wire.MapDelta) bool {
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
