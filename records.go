package rink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Change records (protocol 3, issue 25). Every map put of protocol 3 comes
// with a small record of what it changed, written in the same transaction:
// the slots that moved, the indexes whose member changed, who began or
// stopped waiting. A member follows the records and applies each to the
// map it holds; it reads a whole map only when it joins, misses a record,
// or meets a new lineage. So a change costs every member what it changed,
// not the whole map.
//
// This file is the pure part: diff computes the record that takes one map
// to the next, apply applies one. Nothing here does I/O.

// maxRecordMembers bounds the members a record may rank: a record that
// says more is refused, not allocated.
const maxRecordMembers = 1 << 22

// Record is the JSON value of the Record record key. Absent fields did not
// Record.
type Record struct {
	// Schema is the map's protocol (3 or later), and Change marks the
	// value as a record: a whole map has no such field.
	Schema  int   `json:"schema"`
	Change  bool  `json:"change"`
	Version int64 `json:"version"`
	// Leader is the new leader's name, when it changed.
	Leader *string `json:"leader,omitempty"`
	// Size is the number of ranked members, when it changed; Names sets
	// the member at each index (by decimal string) whose member changed.
	Size  *int              `json:"size,omitempty"`
	Names map[string]string `json:"names,omitempty"`
	// Moves lists pairs: a slot, and the index of its owner now.
	Moves []int `json:"moves,omitempty"`
	// Waiting replaces the waiting list whole, when Unwait and Wait cannot
	// say the change: Unwait names members no longer waiting, Wait those
	// waiting now that were not, appended in order.
	Waiting  *[]Waiter         `json:"waiting,omitempty"`
	Unwait   []string          `json:"unwait,omitempty"`
	Wait     []Waiter          `json:"wait,omitempty"`
	ByLoad   *bool             `json:"byLoad,omitempty"`
	Incoming *map[string][]int `json:"incoming,omitempty"`
	Leave    *[]string         `json:"leave,omitempty"`
	// Leases sets, by name, the lease a ranked member holds its slots
	// under (see rankMap.Leases), for the names whose lease changed or
	// that the record ranks anew. Only members that plan keep leases
	// (see leaseBook); a map derived from a record has none.
	Leases map[string]int64 `json:"leases,omitempty"`
	// Leased says that the map records leases (its leader is of a build
	// that records them, since issue 42). A record without it is of a
	// leader that does not: the map records none, and a member starts
	// its slots without waiting for its lease to be recorded, as with a
	// whole map that records none (see keepOwnLease).
	Leased bool `json:"leased,omitempty"`
	Transition
}

// Transition is what a put of the map key says of the put before it,
// beyond the map: From, the version of the map it was computed from, and
// Gone, the members that map ranked or listed as waiting which this one
// drops because they hold nothing any more (their keys are gone: a
// departure, or a lease that ended). A member that follows only the map
// and the floor (see view.go) learns departures from it. Records carry it
// as fields; a whole map written alone carries it beside the map's own
// fields (see withTransition). Builds before it leave both out.
type Transition struct {
	// View is the revision of the leader's view the map was planned from
	// (0: a leader that does not say). A process whose member key is newer
	// starts nothing in the map: the map gives its name's slots to an
	// earlier incarnation of the name, and a newer map may already give
	// them to others, whose heirs count the name as gone (see tryAcquire).
	// It comes first, so that transitionOf finds it before the others.
	View int64    `json:"view,omitempty"`
	From int64    `json:"from,omitempty"`
	Gone []string `json:"gone,omitempty"`
	// Incs names, for a member name whose key was replaced while an
	// earlier incarnation of the name may still act (an operator deleted
	// its key and a new process took the name: see checkOwnName), the
	// create revision of the key that holds the name now. A process of
	// that name with another key fences before it applies the map: it
	// follows its own key on a watch of its own, which may lag the map's.
	Incs map[string]int64 `json:"incs,omitempty"`
	// ByLeader says that a leader planned the map from its view of
	// revision View, with its ghosts: Incs names every replaced name it
	// knew of. A departing member's map (planned from its own view, which
	// may know no ghost) and builds before it leave it out. A newcomer
	// skips its check for an earlier incarnation of its name only on such
	// a map (see checkOwnName).
	ByLeader bool `json:"byLeader,omitempty"`
	// Quiet says that the map's lineage replaced another less than a TTL
	// ago (issue 42): a member whose first map it is (a process new to
	// the rink) starts nothing for a TTL, as a member that saw the
	// lineage change does (see quietStarts). The lineage it replaced may
	// rank a member, cut off, whose keys and lease nothing in etcd names
	// any more, and which acts until it fences (rink-sim -keys seed
	// 53692).
	Quiet bool `json:"quiet,omitempty"`
}

// transitionOf returns the transition a map key's value carries (zero:
// none, or one that does not decode).
func transitionOf(value []byte) Transition {
	var t Transition
	// withTransition puts the fields last, and a record's are at its end
	// too (the embedded struct's fields are encoded last): parse from the
	// first of them, not the whole value (a whole map written alone is on
	// the path of a handover, and was parsed twice).
	i := bytes.LastIndex(value, []byte(`"from":`))
	if j := bytes.LastIndex(value, []byte(`"incs":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if j := bytes.LastIndex(value, []byte(`"view":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if j := bytes.LastIndex(value, []byte(`"byLeader":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if i < 0 {
		return Transition{}
	}
	if json.Unmarshal(append([]byte{'{'}, value[i:]...), &t) == nil {
		return t
	}
	t = Transition{}
	if json.Unmarshal(value, &t) != nil {
		return Transition{}
	}
	return t
}

// withTransition returns a whole map's JSON with t's fields added (as
// is, when t says nothing).
func withTransition(whole []byte, t Transition) []byte {
	if t.View == 0 && t.From == 0 && len(t.Incs) == 0 || len(whole) < 2 || whole[len(whole)-1] != '}' {
		return whole
	}
	tj, err := json.Marshal(t)
	if err != nil || len(tj) < 2 {
		return whole
	}
	out := make([]byte, 0, len(whole)+len(tj))
	out = append(out, whole[:len(whole)-1]...)
	out = append(out, ',')
	return append(out, tj[1:]...)
}

// diff returns the record that apply turns prev into next with. Both are
// maps of one rink (same schema and slots).
func diff(prev, next *Map) Record {
	c := Record{Schema: next.Schema, Change: true, Version: next.Version}
	if prev.Leader != next.Leader {
		c.Leader = &next.Leader
	}
	if len(prev.Members) != len(next.Members) {
		n := len(next.Members)
		c.Size = &n
	}
	for i, name := range next.Members {
		if i >= len(prev.Members) || prev.Members[i] != name {
			if c.Names == nil {
				c.Names = map[string]string{}
			}
			c.Names[strconv.Itoa(i)] = name
		}
	}
	for s := range next.Table {
		if s >= len(prev.Table) || prev.Table[s] != next.Table[s] {
			c.Moves = append(c.Moves, s, int(next.Table[s]))
		}
	}
	if !slices.EqualFunc(prev.Waiting, next.Waiting, sameWaiter) {
		c.Unwait, c.Wait = waitDiff(prev.Waiting, next.Waiting)
		if c.Unwait == nil && c.Wait == nil {
			w := slices.Clone(next.Waiting)
			c.Waiting = &w
		}
	}
	if prev.ByLoad != next.ByLoad {
		c.ByLoad = &next.ByLoad
	}
	if !maps.EqualFunc(prev.Incoming, next.Incoming, slices.Equal) {
		in := next.Incoming
		if in == nil {
			in = map[string][]int{}
		}
		c.Incoming = &in
	}
	if !slices.Equal(prev.Leave, next.Leave) {
		l := next.Leave
		if l == nil {
			l = []string{}
		}
		c.Leave = &l
	}
	c.Leases = leaseChanges(prev, next)
	c.Leased = len(next.Leases) == len(next.Members) && len(next.Members) > 0
	return c
}

// leaseChanges returns, by name, the leases next records that prev does
// not (nil: none, or next records none). A name prev ranks at the same
// index costs a comparison; others, a lookup in prev's names, made once.
func leaseChanges(prev, next *Map) map[string]int64 {
	if len(next.Leases) != len(next.Members) {
		return nil
	}
	var out map[string]int64
	var byName map[string]int64
	for i, name := range next.Members {
		l := next.Leases[i]
		var was int64
		switch {
		case len(prev.Leases) != len(prev.Members):
		case i < len(prev.Members) && prev.Members[i] == name:
			was = prev.Leases[i]
		default:
			if byName == nil {
				byName = make(map[string]int64, len(prev.Members))
				for j, n := range prev.Members {
					byName[n] = prev.Leases[j]
				}
			}
			was = byName[name]
		}
		if l != was {
			if out == nil {
				out = map[string]int64{}
			}
			out[name] = l
		}
	}
	return out
}

// waitDiff says how next's waiting list follows from prev's by dropping
// some members and appending others, or returns nil, nil when it does not.
func waitDiff(prev, next []Waiter) (unwait []string, wait []Waiter) {
	in := make(map[string]Waiter, len(next))
	for _, w := range next {
		in[w.Name] = w
	}
	var kept []Waiter
	for _, w := range prev {
		if n, ok := in[w.Name]; ok && n.Since.Equal(w.Since) {
			kept = append(kept, w)
		} else {
			unwait = append(unwait, w.Name)
		}
	}
	if len(kept) > len(next) || !slices.EqualFunc(kept, next[:len(kept)], sameWaiter) {
		return nil, nil
	}
	wait = next[len(kept):]
	if len(unwait) == 0 && len(wait) == 0 {
		return nil, nil
	}
	if unwait == nil {
		unwait = []string{}
	}
	return unwait, slices.Clone(wait)
}

func sameWaiter(a, b Waiter) bool { return a.Name == b.Name && a.Since.Equal(b.Since) }

// apply returns the map that record c makes of prev, or an error when the
// record does not fit prev (another index or slot than prev has, a member
// twice): the member then reads the map whole. prev is not changed, and
// must be valid (see validate). What the record leaves alone is shared with
// prev, not copied, and only what it changes is checked: a join in a rink
// of n members costs a member O(n) string comparisons and no hashing, where
// validating the whole map cost every member O(n) hashing per change, and
// the rink O(n²) (issue 25).
func apply(prev *Map, c *Record) (Map, error) { return applyAs(prev, c, false) }

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
func applyAs(prev *Map, c *Record, lax bool) (Map, error) {
	m, err := applyUnchecked(prev, c, false)
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
func applyInPlace(prev *Map, c *Record, lax bool) (Map, error) {
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
	m, err := applyUnchecked(prev, c, true)
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
func applyUnchecked(prev *Map, c *Record, inPlace bool) (Map, error) {
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
type mapDelta struct {
	// moved lists the slots the record moves, then the slots whose entry
	// names an index the record renamed or dropped.
	moved []int
	// old holds, for each slot in moved, its entry in the map before
	// (-1: none), taken before the record was applied: the table itself
	// may have been written in place since (see applyInPlace).
	old []int
	// renames holds the names, in the map before, of the indexes the
	// record renamed or dropped (nil: none).
	renames renames
	// renamed says that the delta cannot tell what changed (the map
	// before had no table, or the record renamed more than maxRenames
	// indexes): the passes that use it go over every slot.
	renamed bool
}

// renames maps indexes to their names in the map before a record.
type renames map[int]string

// has reports whether the record renamed or dropped index i.
func (r renames) has(i int) bool {
	_, ok := r[i]
	return ok
}

// maxRenames bounds the indexes a record may rename or drop for its delta
// to name the slots they own (a pass over the table per rename).
const maxRenames = 8

// deltaOf returns what record c changes in prev.
func deltaOf(prev *Map, c *Record) *mapDelta {
	d := &mapDelta{renamed: len(prev.Table) == 0, moved: make([]int, 0, len(c.Moves)/2), old: make([]int, 0, len(c.Moves)/2)}
	var renamed []int32
	rename := func(i int) {
		if _, ok := d.renames[i]; !ok {
			if d.renames == nil {
				d.renames = renames{}
			}
			d.renames[i] = prev.Members[i]
			renamed = append(renamed, int32(i))
		}
	}
	for k := range c.Names {
		i, err := strconv.Atoi(k)
		switch {
		case err != nil:
			d.renamed = true
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
		d.renamed = true
	}
	for i := 0; i+1 < len(c.Moves); i += 2 {
		s, old := c.Moves[i], -1
		if s >= 0 && s < len(prev.Table) {
			old = int(prev.Table[s])
		}
		d.moved, d.old = append(d.moved, s), append(d.old, old)
	}
	if len(renamed) > 0 && !d.renamed {
		moves := make(map[int]bool, len(d.moved))
		for _, s := range d.moved {
			moves[s] = true
		}
		for s, e := range prev.Table {
			if slices.Contains(renamed, e) && !moves[s] {
				d.moved, d.old = append(d.moved, s), append(d.old, int(e))
			}
		}
	}
	return d
}

// oldName returns the name entry o had in the map before the record, given
// the names after it.
func (d *mapDelta) oldName(o int, names []string) string {
	if name, ok := d.renames[o]; ok {
		return name
	}
	if o >= 0 && o < len(names) {
		return names[o]
	}
	return ""
}

// places reports whether the record put name into the map after it, cur
// (whose list has n names before it): at an index it renamed, or appended.
func (d *mapDelta) places(name string, n int, cur []string) bool {
	for i := range d.renames {
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
