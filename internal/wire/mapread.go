package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// maxChecked bounds the changed names (and waiting members) that
// validateChange compares one by one: past it, it validates the whole map.
const maxChecked = 8

// ValidateChange is validate for m, which record c made of prev (valid):
// it checks what c changed, and validates the whole map when c changed
// much (a reshuffle, a long waiting list).
func (m *Map) ValidateChange(prev *Map, c *Record, lax bool) error {
	if m.Version < 1 {
		return fmt.Errorf("%w: version %d", errMapInvalid, m.Version)
	}
	n := len(m.Members)
	var changed []int // indexes whose name is new
	for k := range c.Names {
		i, _ := strconv.Atoi(k) // (applyUnchecked parsed them)
		changed = append(changed, i)
	}
	for i := len(prev.Members); i < n; i++ {
		if _, ok := c.Names[strconv.Itoa(i)]; !ok {
			changed = append(changed, i) // a new index left unnamed: ""
		}
	}
	waitChanged := c.Waiting != nil || c.Unwait != nil || c.Wait != nil
	if lax {
		return m.validateLax(prev, c, changed, waitChanged)
	}
	if len(changed) > maxChecked || (waitChanged || len(changed) > 0) && len(m.Waiting) > maxChecked {
		return m.Validate()
	}
	// Names: a changed name must be non-empty and nowhere else, among
	// the members or the waiting.
	for _, i := range changed {
		name := m.Members[i]
		if name == "" {
			return fmt.Errorf("%w: member %q empty or listed twice", errMapInvalid, name)
		}
		for j, o := range m.Members {
			if j != i && len(o) == len(name) && o == name {
				return fmt.Errorf("%w: member %q empty or listed twice", errMapInvalid, name)
			}
		}
	}
	if waitChanged || len(changed) > 0 {
		for wi, w := range m.Waiting {
			if w.Name == "" {
				return fmt.Errorf("%w: waiting member %q empty or listed twice", errMapInvalid, w.Name)
			}
			for _, o := range m.Waiting[:wi] {
				if o.Name == w.Name {
					return fmt.Errorf("%w: waiting member %q empty or listed twice", errMapInvalid, w.Name)
				}
			}
			for _, o := range m.Members {
				if len(o) == len(w.Name) && o == w.Name {
					return fmt.Errorf("%w: waiting member %q empty or listed twice", errMapInvalid, w.Name)
				}
			}
		}
	}
	return m.validateTable(prev, c)
}

// validateTable checks that m's table, which record c made of prev's,
// has a slot per slot and points at members: every entry when c dropped
// members or made the table anew (any may point past the end), else the
// entries c moved.
func (m *Map) validateTable(prev *Map, c *Record) error {
	n := len(m.Members)
	if n == 0 {
		return nil // (applyUnchecked left no table)
	}
	if len(m.Table) != m.TableLen() {
		return fmt.Errorf("%w: slot table has %d entries, want %d", errMapInvalid, len(m.Table), m.TableLen())
	}
	if n < len(prev.Members) || len(prev.Table) == 0 {
		for s, idx := range m.Table {
			if idx < 0 || int(idx) >= n {
				return fmt.Errorf("%w: slot %d owned by index %d of %d", errMapInvalid, s, idx, n)
			}
		}
		return nil
	}
	for i := 0; i < len(c.Moves); i += 2 {
		if s, idx := c.Moves[i], c.Moves[i+1]; idx < 0 || idx >= n {
			return fmt.Errorf("%w: slot %d owned by index %d of %d", errMapInvalid, s, idx, n)
		}
	}
	return nil
}

// validateLax is validateChange for applyAs's lax mode: the new names
// are not empty and differ from each other, the waiting members' names are
// not empty and differ from each other when the list changed, and the
// table points at members.
func (m *Map) validateLax(prev *Map, c *Record, changed []int, waitChanged bool) error {
	if len(changed) > 0 {
		seen := make(map[string]bool, len(changed))
		for _, i := range changed {
			if name := m.Members[i]; name == "" || seen[name] {
				return fmt.Errorf("%w: member %q empty or listed twice", errMapInvalid, name)
			}
			seen[m.Members[i]] = true
		}
	}
	if waitChanged {
		seen := make(map[string]bool, len(m.Waiting))
		for _, w := range m.Waiting {
			if w.Name == "" || seen[w.Name] {
				return fmt.Errorf("%w: waiting member %q empty or listed twice", errMapInvalid, w.Name)
			}
			seen[w.Name] = true
		}
	}
	return m.validateTable(prev, c)
}

// decodeRecord reports whether a map key's value is a change record, and
// decodes it. A value that is not one (a whole map, or one that does not
// decode) returns false.
func DecodeRecord(value []byte) (Record, bool) {
	// A whole map has no "change" field: it is not parsed twice (members
	// decode the map on the path of every handover).
	if !bytes.Contains(value, []byte(`"change"`)) {
		return Record{}, false
	}
	c, ok := ParseRecord(value)
	if !ok && json.Unmarshal(value, &c) != nil || !c.Change {
		return Record{}, false
	}
	return c, true
}

// Encode renders the record as JSON.
func (c *Record) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		// A change holds only strings, ints, bools and times.
		panic(fmt.Sprintf("rink: encoding a change record: %v", err))
	}
	return b
}

// errUnderived reports a change record that cannot be applied: the map
// before it is not the one it was computed from (a member that joined or
// listed the rink after it, or missed a put), and no whole map was written
// with it. The member reads the rink again (see relist).
var ErrUnderived = fmt.Errorf("%w: a change record without the map it applies to", ErrIncompatible)

// WrittenOver reports whether err, from ReadMap, says the map value is one
// the leader writes a whole map over (a record nobody can apply, or a
// damaged value), which members wait for, holding what they hold.
func WrittenOver(err error) bool {
	return errors.Is(err, ErrUnderived) || errors.Is(err, ErrMapDamaged)
}

// readMap returns the map that a put of the map key (kv) holds: the whole
// map it holds (protocol 2, or the first map of a lineage), or the one its
// change record makes of prev (the map of seq prevSeq in lineage
// prevLineage; ok says whether it is usable), or the whole map written
// with the record in the same transaction (snap, the snapshot key, when
// at hand). g is what the map must have (zeros: what it says).
func ReadMap(kv, snap *mvccpb.KeyValue, prev *Map, ok bool, prevSeq, prevLineage int64, g Geometry) (Map, error) {
	return ReadMapAs(kv, snap, prev, ok, prevSeq, prevLineage, g, false, false, nil)
}

// readMapAs is readMap, applying a record laxly when lax is set (see
// applyAs), and into prev's table and member list when inPlace is (see
// applyInPlace). rec is the record kv holds, if the caller decoded it
// (nil: readMapAs decodes it).
func ReadMapAs(kv, snap *mvccpb.KeyValue, prev *Map, ok bool, prevSeq, prevLineage int64, g Geometry, lax, inPlace bool, rec *Record) (Map, error) {
	slots := g.Slots
	var c Record
	isRecord := rec != nil
	if isRecord {
		c = *rec // (decoded by the caller: a record is decoded once per member per change)
	} else {
		c, isRecord = DecodeRecord(kv.Value)
	}
	if !isRecord {
		if slots == 0 {
			slots = PeekSlots(kv.Value)
		}
		return decodeMapFor(kv.Value, Geometry{slots, g.Replicas})
	}
	if !slices.Contains(Speaks, c.Schema) {
		return Map{}, fmt.Errorf("%w: map schema %d, this member speaks %v", ErrUnknownProtocol, c.Schema, Speaks)
	}
	if snap != nil && snap.ModRevision == kv.ModRevision {
		if slots == 0 {
			slots = PeekSlots(snap.Value)
		}
		m, err := decodeMapFor(snap.Value, Geometry{slots, g.Replicas})
		if err == nil && m.Version != c.Version {
			err = fmt.Errorf("%w: the whole map (version %d) is not the record's (version %d)", errMapInvalid, m.Version, c.Version)
		}
		return m, err
	}
	if !ok || kv.CreateRevision != prevLineage || kv.Version != prevSeq+1 {
		return Map{}, ErrUnderived
	}
	if slots != 0 && prev.Slots != slots {
		// (Before applying: an in-place apply must not be refused after.)
		return Map{}, fmt.Errorf("%w: rink has %d slots, this member is configured with %d", ErrIncompatible, prev.Slots, slots)
	}
	if err := prev.ReplicasFit(g.Replicas); err != nil {
		return Map{}, err
	}
	Apply := ApplyAs
	if inPlace {
		Apply = ApplyInPlace
	}
	m, err := Apply(prev, &c, lax)
	if err != nil {
		// A record that does not fit the map before it (an older record
		// put back by hand): nobody can apply it, and the leader writes a
		// whole map over it (see plan). Refused as unusable, it would make
		// every member leave, the leader too, for good.
		return Map{}, fmt.Errorf("%w (%v)", ErrUnderived, err)
	}
	if slots == 0 {
		slots = m.Slots
	}
	// (apply validated m, and a record keeps prev's slot count.)
	if m.Slots != slots {
		return Map{}, fmt.Errorf("%w: rink has %d slots, this member is configured with %d", ErrIncompatible, m.Slots, slots)
	}
	return m, nil
}

// peekSlots returns the slot count a whole map says it has.
func PeekSlots(value []byte) int {
	var peek struct {
		Slots int `json:"slots"`
	}
	_ = json.Unmarshal(value, &peek)
	return peek.Slots
}
