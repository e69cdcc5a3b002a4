package wire

import (
	"fmt"
	"slices"
	"strconv"
)

// apply returns the map that record c makes of prev, or an error when the
// record does not fit prev (another index or slot than prev has, a member
// twice): the member then reads the map whole. prev is not changed, and
// must be valid (see validate). What the record leaves alone is shared with
// prev, not copied, and only what it changes is checked: a join in a rink
// of n members costs a member O(n) string comparisons and no hashing, where
// validating the whole map cost every member O(n) hashing per change, and
// the rink O(n²) (issue 25).
func Apply(prev *Map, c *Record) (Map, error) { return ApplyAs(prev, c, false) }

// applyAs is apply; lax leaves out the checks that cost a member O(members)
// per record: that a new name is nowhere else among the members, and
// that a waiting member is not ranked. A member that does not lead
// applies records laxly: checked at every member, a batch of joins cost
// the rink O(members²). Such a map is no danger to the barrier (ownership
// goes by index; a member named twice holds the slots of its first index
// only, and the others see its name in the history of the rest), and the
// leader, which applies every record strictly, cannot apply it and
// writes a whole map over it (see underived), which every member decodes
// and checks whole.
func ApplyAs(prev *Map, c *Record, lax bool) (Map, error) {
	m, err := ApplyUnchecked(prev, c, false)
	if err != nil {
		return Map{}, err
	}
	if err := m.ValidateChange(prev, c, lax); err != nil {
		return Map{}, err
	}
	return m, nil
}

// applyInPlace is applyAs writing the record's moves into prev's slot
// table, and its renames into prev's member list, not into copies of
// them: the map it returns shares both with prev, whose entries for the
// moved slots and names for the renamed indexes are the new map's from
// then on (what they were is in deltaOf(prev, c), taken before). A copy cost every
// member O(slots) per change, the rink O(members × slots): 1.3 GB per
// change at 10,000 members (issue 25). On an error prev is as it was.
//
// The caller must own prev's table and member list: nothing may read
// them meanwhile (the run goroutine publishes its map to other goroutines
// under r.ownersMu) or need their old entries and names afterwards but
// through the delta (see slotHistory, prevOwner and noteGone).
func ApplyInPlace(prev *Map, c *Record, lax bool) (Map, error) {
	undo := make([]int, 0, len(c.Moves)) // slot, entry: in the order written
	for i := 0; i+1 < len(c.Moves); i += 2 {
		if s := c.Moves[i]; s >= 0 && s < len(prev.Table) {
			undo = append(undo, s, int(prev.Table[s]))
		}
	}
	var names map[int]string // the names c renames, as prev has them
	for k := range c.Names {
		if i, err := strconv.Atoi(k); err == nil && i >= 0 && i < len(prev.Members) {
			if names == nil {
				names = make(map[int]string, len(c.Names))
			}
			names[i] = prev.Members[i]
		}
	}
	m, err := ApplyUnchecked(prev, c, true)
	if err == nil {
		err = m.ValidateChange(prev, c, lax)
	}
	if err != nil {
		for i := len(undo) - 2; i >= 0; i -= 2 {
			prev.Table[undo[i]] = int32(undo[i+1])
		}
		for i, name := range names {
			prev.Members[i] = name
		}
		return Map{}, err
	}
	return m, nil
}

// growNames returns names grown to n entries, the new ones empty: in
// place when its capacity allows, else in a copy with room for at most
// maxNameRoom more (append's quarter more cost a member up to 40 KiB of
// empty entries at 10,000 members).
func growNames(names []string, n int) []string {
	if n <= cap(names) {
		out := names[:n]
		clear(out[len(names):]) // (a departure applied in place may have left names there)
		return out
	}
	out := make([]string, n, n+min(max(n/8, 8), maxNameRoom))
	copy(out, names)
	return out
}

// maxNameRoom bounds the room growNames leaves for later joins.
const maxNameRoom = 512

// applyUnchecked is apply without the checks that need the whole result:
// it refuses only what it cannot build. inPlace writes the moves into
// prev's table (see applyInPlace).
func ApplyUnchecked(prev *Map, c *Record, inPlace bool) (Map, error) {
	m := *prev
	m.Schema, m.Version = c.Schema, c.Version
	m.Leases = nil // (kept by name, by members that plan: see leaseBook)
	if c.Leader != nil {
		m.Leader = *c.Leader
	}
	n := len(prev.Members)
	if c.Size != nil {
		n = *c.Size
		if n < 0 || n > maxRecordMembers {
			return Map{}, fmt.Errorf("%w: record sizes the members to %d", errMapInvalid, n)
		}
	}
	switch {
	case n > len(prev.Members) && appendsOnly(c.Names, len(prev.Members)):
		// Members joined, nobody else renamed: grow prev's list in place,
		// past its end, which prev does not see (amortized O(joins), where
		// a copy cost every member O(members) per join). Safe because a
		// member derives one map from each it applies: the next map's
		// names beyond prev's end are written only by it.
		m.Members = growNames(prev.Members, n)
	case inPlace && n <= len(prev.Members) && (n < len(prev.Members) || len(c.Names) > 0):
		// Renames, and a departure (the highest index moves into the
		// gap), are written into prev's list too (see applyInPlace): its
		// old names are in deltaOf(prev, c). A copy cost every member
		// O(members) per departure.
		m.Members = prev.Members[:n]
	case n != len(prev.Members) || len(c.Names) > 0:
		m.Members = make([]string, n)
		copy(m.Members, prev.Members)
	}
	for k, name := range c.Names {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= n {
			return Map{}, fmt.Errorf("%w: record names index %q of %d", errMapInvalid, k, n)
		}
		m.Members[i] = name
	}
	switch {
	case n == 0:
		m.Table = nil
	case len(prev.Table) == 0:
		if prev.Slots < 1 || prev.Slots > MaxSlots {
			return Map{}, fmt.Errorf("%w: a record ranks members in a map of %d slots", errMapInvalid, prev.Slots)
		}
		m.Table = make(SlotTable, prev.TableLen())
	case len(c.Moves) > 0 && !inPlace:
		m.Table = slices.Clone(prev.Table)
	}
	if len(c.Moves)%2 != 0 {
		return Map{}, fmt.Errorf("%w: record moves an odd list", errMapInvalid)
	}
	for i := 0; i < len(c.Moves); i += 2 {
		s, idx := c.Moves[i], c.Moves[i+1]
		if s < 0 || s >= len(m.Table) || idx < 0 || idx > maxRecordMembers {
			return Map{}, fmt.Errorf("%w: record moves slot %d of %d to index %d", errMapInvalid, s, len(m.Table), idx)
		}
		m.Table[s] = int32(idx)
	}
	switch {
	case c.Waiting != nil:
		m.Waiting = slices.Clone(*c.Waiting)
	case c.Unwait != nil || c.Wait != nil:
		// As sets, so that a record put back unchanged changes nothing.
		gone := make(map[string]bool, len(c.Unwait)+len(c.Wait))
		for _, name := range c.Unwait {
			gone[name] = true
		}
		for _, w := range c.Wait {
			gone[w.Name] = true
		}
		m.Waiting = nil
		for _, w := range prev.Waiting {
			if !gone[w.Name] {
				m.Waiting = append(m.Waiting, w)
			}
		}
		m.Waiting = append(m.Waiting, c.Wait...)
	}
	if c.ByLoad != nil {
		m.ByLoad = *c.ByLoad
	}
	if c.Incoming != nil {
		m.Incoming = *c.Incoming
		if len(m.Incoming) == 0 {
			m.Incoming = nil
		}
	}
	if c.Leave != nil {
		m.Leave = *c.Leave
		if len(m.Leave) == 0 {
			m.Leave = nil
		}
	}
	return m, nil
}

// mapDelta is what a record changed, for a member that applied it to the
// map before it: the slots whose owner may have changed, with their
// entries before, and the old names of the indexes it renamed or dropped.
// A slot outside moved kept its entry and that entry's name: applying the
// map costs what the record says, not a pass over every slot (issue 25).
// A departure renames one index (the highest moves into the gap) and
// drops one: the slots whose entry is a renamed index changed owner
// without a move, and deltaOf finds them with one pass of integer
// comparisons over the table.
type MapDelta struct {
	// Moved lists the slots the record moves, then the slots whose entry
	// names an index the record renamed or dropped.
	Moved []int
	// Old holds, for each slot in moved, its entry in the map before
	// (-1: none), taken before the record was applied: the table itself
	// may have been written in place since (see applyInPlace).
	Old []int
	// Renames holds the names, in the map before, of the indexes the
	// record renamed or dropped (nil: none).
	Renames renames
	// Renamed says that the delta cannot tell what changed (the map
	// before had no table, or the record Renamed more than maxRenames
	// indexes): the passes that use it go over every slot.
	Renamed bool
}

// renames maps indexes to their names in the map before a record.
type renames map[int]string

// has reports whether the record renamed or dropped index i.
func (r renames) Has(i int) bool {
	_, ok := r[i]
	return ok
}

// maxRenames bounds the indexes a record may rename or drop for its delta
// to name the slots they own (a pass over the table per rename).
const maxRenames = 8

// deltaOf returns what record c changes in prev.
func DeltaOf(prev *Map, c *Record) *MapDelta {
	d := &MapDelta{Renamed: len(prev.Table) == 0, Moved: make([]int, 0, len(c.Moves)/2), Old: make([]int, 0, len(c.Moves)/2)}
	var renamed []int32
	rename := func(i int) {
		if _, ok := d.Renames[i]; !ok {
			if d.Renames == nil {
				d.Renames = renames{}
			}
			d.Renames[i] = prev.Members[i]
			renamed = append(renamed, int32(i))
		}
	}
	for k := range c.Names {
		i, err := strconv.Atoi(k)
		switch {
		case err != nil:
			d.Renamed = true
		case i >= 0 && i < len(prev.Members):
			rename(i)
		}
	}
	if c.Size != nil && *c.Size >= 0 {
		for i := *c.Size; i < len(prev.Members); i++ {
			rename(i)
			if len(renamed) > maxRenames {
				break
			}
		}
	}
	if len(renamed) > maxRenames {
		d.Renamed = true
	}
	for i := 0; i+1 < len(c.Moves); i += 2 {
		s, old := c.Moves[i], -1
		if s >= 0 && s < len(prev.Table) {
			old = int(prev.Table[s])
		}
		d.Moved, d.Old = append(d.Moved, s), append(d.Old, old)
	}
	if len(renamed) > 0 && !d.Renamed {
		moves := make(map[int]bool, len(d.Moved))
		for _, s := range d.Moved {
			moves[s] = true
		}
		for s, e := range prev.Table {
			if slices.Contains(renamed, e) && !moves[s] {
				d.Moved, d.Old = append(d.Moved, s), append(d.Old, int(e))
			}
		}
	}
	return d
}

// OldName returns the name entry o had in the map before the record, given
// the names after it.
func (d *MapDelta) OldName(o int, names []string) string {
	if name, ok := d.Renames[o]; ok {
		return name
	}
	if o >= 0 && o < len(names) {
		return names[o]
	}
	return ""
}

// Places reports whether the record put name into the map after it, cur
// (whose list has n names before it): at an index it renamed, or appended.
func (d *MapDelta) Places(name string, n int, cur []string) bool {
	for i := range d.Renames {
		if i < len(cur) && cur[i] == name {
			return true
		}
	}
	for i := n; i < len(cur); i++ {
		if cur[i] == name {
			return true
		}
	}
	return false
}

// appendsOnly reports whether every index names sets is at least n.
func appendsOnly(names map[string]string, n int) bool {
	for k := range names {
		if i, err := strconv.Atoi(k); err != nil || i < n {
			return false
		}
	}
	return true
}
