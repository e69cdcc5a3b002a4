package core

import (
	"slices"
	"sort"

	"github.com/rink-go/rink/internal/wire"
)

// slotHistory is what the handover check (free) needs of the maps a member
// applied: who owned each slot in every map from seq from to seq top. It
// keeps the newest map's owners (its table and members, shared with that
// map, not copied) and, per slot whose owner changed since from, the seqs
// at which it did: a member's memory for it is O(slots that moved since
// the floor's lowest bound), and a map applied from a record costs what
// the record moved (see mapDelta). As the floor rises (see prune) the
// changes below it go, and a slot that has not changed since goes whole
// (issue 25).
//
// Invariants: from = 0 (nothing known; top = 0) or from ≤ top; every map
// from from to top was added, in order, with no gap; curTable and
// curNames are the table and members of the map of seq top (the table
// may be written in place by the next record before it is added: see
// applyInPlace, and add); for every slot s, changes[s] is empty, and s
// had its owner in the map of seq top in every map from from on, or it
// rises strictly by seq, its first entry's seq is at most from, and the
// owner of s in the map of seq v (from ≤ v ≤ top) is the name of the last
// entry whose seq ≤ v; order lists (seq, slot) for every entry added
// after a slot's first, by rising seq, from the oldest not yet pruned.
// Entries below from are dropped when a prune passes them in order,
// keeping the one in force at from.
type SlotHistory struct {
	From, top int64
	curTable  wire.SlotTable // the newest map's table (shared)
	curNames  []string       // the newest map's members (shared: a record renames in place only after add reads it)
	changes   map[int][]ownerSince
	entries   int          // entries over all slots, for prune
	order     []slotChange // see the invariants
	block     []ownerSince // what carve cuts slots' first entries from
	// pruneWork counts the slots prune's compaction looked at, for the
	// cost test (see TestSlotHistoryPruneCostFollowsTheChange).
	pruneWork int
	// Lazy is a whole map added after top and not yet compared with it
	// (seq 0: none; see settle). Every method settles it first, but
	// owners for maps up to top, which it does not change: a member that
	// takes over half of 1,024 slots in a whole map starts the awaited
	// ones before it records what moved (see step).
	Lazy lazyMap
}

// lazyMap is a whole map that add has not compared yet (see settle).
type lazyMap struct {
	Seq   int64
	slots int // the table's entries (see rankMap.tableLen)
	table wire.SlotTable
	names []string
}

// ownerSince is one owner of a slot, from the map of seq seq on.
type ownerSince struct {
	seq  int64
	name string
}

// slotChange is a change of slot's owner at the map of seq seq.
type slotChange struct {
	seq  int64
	slot int
}

// Reset forgets every map.
func (h *SlotHistory) Reset() {
	*h = SlotHistory{}
}

// Rebase drops every change when seq is the newest map's and the oldest
// the history must keep: nothing before it is needed any more.
func (h *SlotHistory) Rebase(seq int64) {
	h.Settle()
	if h.top == 0 || seq != h.top {
		return
	}
	h.From, h.changes, h.entries, h.order = seq, nil, 0, nil
}

// CurOwner returns slot s's owner in the newest map added.
func (h *SlotHistory) CurOwner(s int) string {
	if s < 0 || s >= len(h.curTable) || len(h.curNames) == 0 {
		return ""
	}
	if i := h.curTable[s]; i >= 0 && int(i) < len(h.curNames) {
		return h.curNames[i]
	}
	return ""
}

// Last returns slot s's owner in the newest map added.
func (h *SlotHistory) Last(s int) string {
	if len(h.changes) > 0 { // (no lookup per slot in a rink at rest: see rebase)
		if l := h.changes[s]; len(l) > 0 {
			return l[len(l)-1].name
		}
	}
	return h.CurOwner(s)
}

// Add records the map of seq seq, which record delta made of the map
// before it (nil: a whole map). A map that does not follow the last one
// added (a gap, a new lineage) starts the history again at it.
func (h *SlotHistory) Add(seq int64, m *wire.Map, delta *wire.MapDelta) {
	h.Settle()
	if h.top == 0 || seq != h.top+1 {
		h.Reset()
		h.From, h.top = seq, seq
		h.curTable, h.curNames = m.Table, m.Members
		return
	}
	if delta != nil && !delta.Renamed {
		// No other slot's owner changed: a moved slot's owner in the map
		// before is its last entry, or the old name of its old entry (the
		// table may have been written in place since).
		for i, s := range delta.Moved {
			was := ""
			if l := h.changes[s]; len(l) > 0 {
				was = l[len(l)-1].name
			} else {
				was = delta.OldName(delta.Old[i], m.Members)
			}
			if o := m.Owner(s); o != was {
				h.Change(s, was, seq, o)
			}
		}
	} else {
		h.Lazy = lazyMap{Seq: seq, slots: m.TableLen(), table: m.Table, names: m.Members}
		return
	}
	h.top = seq
	h.curTable, h.curNames = m.Table, m.Members
}

// Settle records what the whole map that add left for later moved. It
// finds the slots first, so that the changes are made room for at once: a
// departure from a rink of two moves half its slots, and a map grown slot
// by slot and a slice allocated per slot were a third of a handover's
// time in the member that takes over.
func (h *SlotHistory) Settle() {
	l := h.Lazy
	if l.Seq == 0 {
		return
	}
	h.Lazy = lazyMap{}
	m := wire.Map{Slots: l.slots, Table: l.table, Members: l.names} // (l.slots: every entry of the table, replicas included)
	// (A whole map's table is its own: the newest map's, which curTable
	// holds, was not written over, and gives each slot's owner in it, as
	// its last entry does.)
	var moved []int
	for s := range m.Slots {
		if m.Owner(s) != h.CurOwner(s) {
			moved = append(moved, s)
		}
	}
	if len(moved) > 0 {
		first := len(moved) // (slots with no entry yet: carve's)
		if h.changes == nil {
			h.changes = make(map[int][]ownerSince, len(moved))
		} else {
			for _, s := range moved {
				if len(h.changes[s]) > 0 {
					first--
				}
			}
		}
		h.order = slices.Grow(h.order, len(moved))
		h.block = make([]ownerSince, 2*first)
	}
	for _, s := range moved {
		h.Change(s, h.Last(s), l.Seq, m.Owner(s))
	}
	h.top = l.Seq
	h.curTable, h.curNames = l.table, l.names
}

// Change records that slot s, owned by was until now, is owned by o from
// the map of seq seq on. The first Change of a slot records was as its
// owner from from on (see the invariants).
func (h *SlotHistory) Change(s int, was string, seq int64, o string) {
	if h.changes == nil {
		h.changes = map[int][]ownerSince{}
	}
	l := h.changes[s]
	if len(l) == 0 {
		l = append(h.Carve(), ownerSince{h.From, was})
		h.entries++
	}
	h.changes[s] = append(l, ownerSince{seq, o})
	h.entries++
	h.order = append(h.order, slotChange{seq, s})
}

// Carve returns an empty slice with room for a slot's first two entries,
// cut from the block add made room in (a third entry moves the slot to a
// slice of its own).
func (h *SlotHistory) Carve() []ownerSince {
	if len(h.block) < 2 {
		return nil
	}
	l := h.block[:0:2]
	h.block = h.block[2:]
	return l
}

// KeepingAtMost returns the lowest seq from which the history keeps at
// most n changes (0 when it keeps no more than n).
func (h *SlotHistory) KeepingAtMost(n int) int64 {
	h.Settle()
	if len(h.order) <= n {
		return 0
	}
	return h.order[len(h.order)-n].seq
}

// Prune forgets the maps below seq low: a later check that needs them
// fails, which is safe (the caller waits). A slot that has not changed
// since low goes whole (its owner is the newest map's); of the others,
// only those with an entry that low passed are looked at, and keep their
// entries from the one in force at low. It costs O(log) per entry that a
// Prune passes, and each entry is passed once: a floor that rises by one
// map at a time no longer costs a pass over every slot the history keeps.
func (h *SlotHistory) Prune(low int64) {
	h.Settle()
	if h.top == 0 || low <= h.From {
		return
	}
	if low > h.top {
		h.Reset()
		return
	}
	h.From = low
	n := 0
	for n < len(h.order) && h.order[n].seq <= low {
		c := h.order[n]
		n++
		l := h.changes[c.slot]
		if len(l) == 0 {
			continue
		}
		if l[len(l)-1].seq == c.seq {
			// Its owner since c.seq ≤ low is the newest map's.
			h.entries -= len(l)
			delete(h.changes, c.slot)
			continue
		}
		// Entries before the one in force at low go (at c.seq ≤ low a
		// later entry exists, so the slot stays).
		h.pruneWork++
		i := sort.Search(len(l), func(i int) bool { return l[i].seq > low }) - 1
		if i > 0 {
			h.entries -= i
			h.changes[c.slot] = append(l[:0], l[i:]...)
		}
	}
	h.order = h.order[n:] // (append moves what is left when it grows: O(1) amortized, where a copy here cost every prune the whole list)
}

// Owners calls f with the Owners of slot s in the maps of seq a to g-1,
// in order (some may repeat), and reports whether the history covers
// those maps (else it calls f with nothing). It stops when f returns
// false.
func (h *SlotHistory) Owners(s int, a, g int64, f func(name string) bool) (known bool) {
	if a >= g {
		return true
	}
	if h.Lazy.Seq != 0 && g-1 >= h.Lazy.Seq {
		h.Settle()
	}
	if h.top == 0 || a < h.From || g-1 > h.top {
		return false
	}
	l := h.changes[s]
	if len(l) == 0 {
		f(h.CurOwner(s)) // (the same in every map from from on)
		return true
	}
	i := max(sort.Search(len(l), func(i int) bool { return l[i].seq > a })-1, 0) // in force at a (the first is at most from)
	for ; i < len(l) && l[i].seq < g; i++ {
		if !f(l[i].name) {
			return true
		}
	}
	return true
}

// HeldBy reports whether any map of seq a to g-1 gives slot s to name, and
// known: whether the history covers those maps (else held says nothing).
func (h *SlotHistory) HeldBy(s int, name string, a, g int64) (held, known bool) {
	known = h.Owners(s, a, g, func(o string) bool {
		held = held || o == name
		return !held
	})
	return held && known, known
}

// During returns the owners of slot s in the maps of seq a to g-1 (some
// may repeat), and known: whether the history covers those maps.
func (h *SlotHistory) During(s int, a, g int64) (owners []string, known bool) {
	known = h.Owners(s, a, g, func(o string) bool {
		owners = append(owners, o)
		return true
	})
	return owners, known
}

// Gave reports whether a map the history holds before the newest Gave
// name a slot: it is asked only of names the newest map does not rank
// (see noteCandidates), which own no slot in it. It costs a pass over the
// changes kept since from. Maps below from are forgotten (the floor rose
// past them, or a gap reset the history): what they Gave, Gave tells
// nothing of.
func (h *SlotHistory) Gave(name string) bool {
	h.Settle()
	for _, l := range h.changes {
		for _, o := range l {
			if o.name == name {
				return true
			}
		}
	}
	return false
}

// Covers reports whether the history holds the map of seq v.
func (h *SlotHistory) Covers(v int64) bool {
	h.Settle()
	return h.top != 0 && v >= h.From && v <= h.top
}

// slotRange yields the slots in only, or every slot below n when only is
// nil.
func SlotRange(only []int, n int) func(yield func(int) bool) {
	return func(yield func(int) bool) {
		if only == nil {
			for s := range n {
				if !yield(s) {
					return
				}
			}
			return
		}
		for _, s := range only {
			if s >= 0 && s < n && !yield(s) {
				return
			}
		}
	}
}
