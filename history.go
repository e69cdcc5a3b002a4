package rink

import "sort"

// slotHistory is what the handover check (free) needs of the maps a member
// applied: who owned each slot in every map from seq from to seq top. It
// keeps, per slot, the seqs at which its owner changed, not whole maps: a
// member's memory for it is O(slots + moves), not O(maps × members), and a
// map that moves nothing costs a comparison per slot (issue 25).
//
// Invariants: from = 0 (nothing known; top = 0) or 1 ≤ from ≤ top, every
// map from from to top was added, in order, with no gap; for every slot
// s, log[s] is non-empty, rises strictly by seq, log[s][0].seq ≤ from,
// and the owner of s in the map of seq v (from ≤ v ≤ top) is the name of
// the last entry whose seq ≤ v ("" when nobody is ranked). Entries below
// from are dropped lazily (see prune), keeping the one in force at from.
type slotHistory struct {
	from, top int64
	log       [][]ownerSince
	entries   int // entries over all slots, for prune
}

// ownerSince is one owner of a slot, from the map of seq seq on.
type ownerSince struct {
	seq  int64
	name string
}

// reset forgets every map.
func (h *slotHistory) reset() {
	h.from, h.top, h.entries = 0, 0, 0
	for s := range h.log {
		h.log[s] = h.log[s][:0]
	}
}

// add records the map of seq seq. A map that does not follow the last one
// added (a gap, a new lineage) starts the history again at it.
func (h *slotHistory) add(seq int64, m *rankMap, delta *mapDelta) {
	if len(h.log) != m.Slots {
		h.log = make([][]ownerSince, m.Slots)
		h.from, h.top = 0, 0
	}
	if h.top == 0 || seq != h.top+1 {
		h.entries = 0
		for s := range h.log {
			h.log[s] = append(h.log[s][:0], ownerSince{seq, m.owner(s)})
		}
		h.from, h.top, h.entries = seq, seq, len(h.log)
		return
	}
	var only []int
	if delta != nil && !delta.renamed {
		only = delta.moved // (no other slot's owner changed)
	}
	for s := range slotRange(only, len(h.log)) {
		if s >= len(h.log) {
			continue
		}
		if o := m.owner(s); o != h.log[s][len(h.log[s])-1].name {
			h.log[s] = append(h.log[s], ownerSince{seq, o})
			h.entries++
		}
	}
	h.top = seq
}

// prune forgets the maps below seq low: a later check that needs them
// fails, which is safe (the caller waits). Entries are dropped once they
// are as many again as the slots, so a prune costs O(1) amortized per
// entry added.
func (h *slotHistory) prune(low int64) {
	if h.top == 0 || low <= h.from {
		return
	}
	if low > h.top {
		h.reset()
		return
	}
	h.from = low
	if h.entries <= 2*len(h.log) {
		return
	}
	h.entries = 0
	for s, l := range h.log {
		i := sort.Search(len(l), func(i int) bool { return l[i].seq > low }) - 1 // the entry in force at low
		h.log[s] = append(l[:0], l[i:]...)
		h.entries += len(h.log[s])
	}
}

// heldBy reports whether any map of seq a to g-1 gives slot s to name, and
// known: whether the history covers those maps (else held says nothing).
func (h *slotHistory) heldBy(s int, name string, a, g int64) (held, known bool) {
	if a >= g {
		return false, true
	}
	if h.top == 0 || a < h.from || g-1 > h.top || s >= len(h.log) {
		return false, false
	}
	l := h.log[s]
	i := sort.Search(len(l), func(i int) bool { return l[i].seq > a }) - 1
	for ; i < len(l) && l[i].seq < g; i++ {
		if l[i].name == name {
			return true, true
		}
	}
	return false, true
}

// during returns the owners of slot s in the maps of seq a to g-1 (some
// may repeat), and known: whether the history covers those maps.
func (h *slotHistory) during(s int, a, g int64) (owners []string, known bool) {
	if a >= g {
		return nil, true
	}
	if h.top == 0 || a < h.from || g-1 > h.top || s >= len(h.log) {
		return nil, false
	}
	l := h.log[s]
	for i := sort.Search(len(l), func(i int) bool { return l[i].seq > a }) - 1; i < len(l) && l[i].seq < g; i++ {
		owners = append(owners, l[i].name)
	}
	return owners, true
}

// covers reports whether the history holds the map of seq v.
func (h *slotHistory) covers(v int64) bool { return h.top != 0 && v >= h.from && v <= h.top }

// slotRange yields the slots in only, or every slot below n when only is
// nil.
func slotRange(only []int, n int) func(yield func(int) bool) {
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
