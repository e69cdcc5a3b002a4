package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// schemaVersion is the newest version of the JSON map layout, the newest
// protocol this build speaks (see protocol.go). A member refuses a map
// whose schema it does not know rather than guessing at its meaning.
//
// Schema 2 moved acknowledgements out of the member keys (see acks.go):
// members of schema 1 and 2 cannot share a rink. Schema 3 writes a change
// record into the map key, and the whole map beside it (see records.go);
// its map has the layout of schema 2. Schema 4 (issue 26) is schema 3 with
// replicas: the table holds a row of Slots entries per replica (see
// rankMap.Replicas). A rink of one replica stays at schema 3, its map as
// before byte for byte; one of more needs schema 4, which members of
// earlier releases do not speak.
const SchemaVersion = 3

// schemaReplicas is the protocol of maps with more than one replica per
// slot (see rankMap.Replicas).
const SchemaReplicas = 4

// Map is the state the leader proclaims: who is ranked at which index,
// who waits, and which ranked member owns each slot.
//
// It is stored as JSON under <prefix>/map so that it can be read with etcdctl.
type Map struct {
	Schema  int        `json:"schema"`
	Version int64      `json:"version"`
	Slots   int        `json:"slots"`
	Leader  string     `json:"leader,omitempty"`
	Members MemberList `json:"members"`
	Waiting []Waiter   `json:"waiting,omitempty"`
	// Table maps each slot to the index of its owner in Members. It has
	// Slots entries per replica (see Replicas) when Members is non-empty
	// and none otherwise.
	Table SlotTable `json:"table,omitempty"`
	// Replicas is the members that hold each slot, its primary included
	// (0: one; see WithReplicas); only maps of schema 4 have more than
	// one. The table then holds one row of Slots entries per replica:
	// entry r·Slots+s is slot s's replica r, replica 0 its primary (its
	// owner, as in a map of one replica) and replicas 1 to Replicas-1 its
	// secondaries. A secondary's entry that is the primary's index, or
	// that an earlier replica of the slot already names, says that the
	// slot has no secondary there (fewer live members than replicas).
	// Each row entry is a slot of its own to the handover history and
	// the barrier (see secondary.go).
	Replicas int `json:"replicas,omitempty"`
	// ByLoad says that the leader balances the table by load (see
	// loadplan.go), not by slot count: planning keeps every live member's
	// slots. Members of 636d84c do not know the field, and their leaders
	// balance by count.
	ByLoad bool `json:"byLoad,omitempty"`
	// Incoming announces planned moves (see warmup.go): per heir, the
	// slots that will move to it once it is ready. Entries that name no
	// slot of the map are ignored. Members of 636d84c do not know it.
	Incoming map[string][]int `json:"incoming,omitempty"`
	// Leave lists leaving members whose heirs are ready (see warmup.go):
	// each hands its slots over with its own departure transaction.
	Leave []string `json:"leave,omitempty"`
	// Leases records, index by index with Members, the lease under which
	// each ranked member may hold its slots (0: not known), so that a
	// planner with no history of a member's keys can still ask etcd
	// whether that lease has ended before it frees the member's slots
	// (see leases.go). Whole maps of leaders from issue 42 on carry it;
	// a map derived from a change record leaves it nil (a member that
	// plans keeps the leases by name: see leaseBook). Older members
	// ignore it.
	Leases []int64 `json:"leases,omitempty"`
}

// Waiter is a live member that has not been ranked yet.
type Waiter struct {
	Name string `json:"name"`
	// Since is when the leader that proclaimed the map first saw the member
	// waiting, in that leader's wall clock. It is informative only: the
	// rebalance delay runs on the leader's monotonic clock.
	Since time.Time `json:"since"`
}

// ErrMapDamaged reports a map value nobody can use: it does not decode, or
// it decodes but breaks a map's invariants (an edit by hand, a broken
// script). It says nothing of the member that reads it, unlike the rest of
// ErrIncompatible: members keep what they hold, and the leader writes a
// whole map over it, as over a record nobody can apply (ErrUnderived).
var ErrMapDamaged = fmt.Errorf("%w: damaged rank map", ErrIncompatible)

// errMapInvalid reports a map that decodes but is internally inconsistent.
var errMapInvalid = fmt.Errorf("%w: invalid", ErrMapDamaged)

// Geometry is what a member requires of the rink's maps: its slot count
// and its replicas per slot. Zero in either takes what the map says
// (observers, tools).
type Geometry struct {
	Slots, Replicas int
}

// decodeMap parses and validates a proclaimed map. slots is the slot count
// this member was configured with; a map with another count is refused.
// Any number of replicas is accepted (see decodeMapFor).
func DecodeMap(data []byte, slots int) (Map, error) {
	return decodeMapFor(data, Geometry{Slots: slots})
}

// decodeMapFor is decodeMap for a member that requires geometry g.
func decodeMapFor(data []byte, g Geometry) (Map, error) {
	m, ok := ParseMap(data)
	if !ok {
		if err := json.Unmarshal(data, &m); err != nil {
			return Map{}, fmt.Errorf("%w: map does not decode: %v", ErrMapDamaged, err)
		}
	}
	if err := m.UsableBy(g); err != nil {
		return Map{}, err
	}
	return m, nil
}

// UsableBy checks that a member that requires g can use m: a protocol it
// speaks, its slot count and replicas, and validate's invariants.
func (m Map) UsableBy(g Geometry) error {
	if !slices.Contains(Speaks, m.Schema) {
		return fmt.Errorf("%w: map schema %d, this member speaks %v", ErrUnknownProtocol, m.Schema, Speaks)
	}
	if m.Slots < 1 || m.Slots > MaxSlots {
		return fmt.Errorf("%w: %d slots", errMapInvalid, m.Slots) // (damaged, not another configuration: see Validate)
	}
	if g.Slots != 0 && m.Slots != g.Slots {
		return fmt.Errorf("%w: rink has %d slots, this member is configured with %d", ErrIncompatible, m.Slots, g.Slots)
	}
	if err := m.ReplicasFit(g.Replicas); err != nil {
		return err
	}
	return m.Validate()
}

// ReplicasFit checks that m has the replicas per slot a member requires
// (0: any).
func (m Map) ReplicasFit(k int) error {
	if k != 0 && m.Replicas >= 0 && m.Replicas <= MaxReplicas && m.ReplicaCount() != k {
		return fmt.Errorf("%w: the rink has %d replicas per slot, this member is configured with %d", ErrReplicaMismatch, m.ReplicaCount(), k)
	}
	return nil
}

// ReplicaCount returns the ReplicaCount per slot, the primary included.
func (m *Map) ReplicaCount() int { return max(1, m.Replicas) }

// TableLen returns the entries m's table has when it ranks anybody.
func (m *Map) TableLen() int { return m.Slots * m.ReplicaCount() }

// Validate checks the structural invariants every proclaimed map keeps.
func (m Map) Validate() error {
	if m.Version < 1 {
		return fmt.Errorf("%w: version %d", errMapInvalid, m.Version)
	}
	if m.Slots < 1 || m.Slots > MaxSlots {
		return fmt.Errorf("%w: %d slots", errMapInvalid, m.Slots)
	}
	seen := make(map[string]bool, len(m.Members)+len(m.Waiting))
	for _, name := range m.Members {
		if name == "" || seen[name] {
			return fmt.Errorf("%w: member %q empty or listed twice", errMapInvalid, name)
		}
		seen[name] = true
	}
	for _, w := range m.Waiting {
		if w.Name == "" || seen[w.Name] {
			return fmt.Errorf("%w: waiting member %q empty or listed twice", errMapInvalid, w.Name)
		}
		seen[w.Name] = true
	}
	if m.Replicas < 0 || m.Replicas > MaxReplicas || m.Replicas > 1 && m.Schema < SchemaReplicas {
		return fmt.Errorf("%w: %d replicas per slot in a map of schema %d", errMapInvalid, m.Replicas, m.Schema)
	}
	if len(m.Members) == 0 {
		if len(m.Table) != 0 {
			return fmt.Errorf("%w: slot table without members", errMapInvalid)
		}
		return nil
	}
	if len(m.Table) != m.TableLen() {
		return fmt.Errorf("%w: slot table has %d entries, want %d", errMapInvalid, len(m.Table), m.TableLen())
	}
	for s, idx := range m.Table {
		if idx < 0 || int(idx) >= len(m.Members) {
			return fmt.Errorf("%w: slot %d owned by index %d of %d", errMapInvalid, s, idx, len(m.Members))
		}
	}
	return nil
}

// Encode renders the map as JSON.
func (m Map) Encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// A rankMap holds only strings, ints and times: Marshal cannot fail.
		panic(fmt.Sprintf("rink: encoding rank map: %v", err))
	}
	return b
}

// Owner returns the member that owns slot s (an entry of the table: s at
// or past Slots is a secondary's, see Replicas), or "" when nobody is
// ranked.
func (m Map) Owner(s int) string {
	if len(m.Members) == 0 || s < 0 || s >= len(m.Table) {
		return ""
	}
	return m.Members[m.Table[s]]
}

// Index returns the Index of name in Members, or -1.
func (m Map) Index(name string) int {
	return slices.Index(m.Members, name)
}

// SameAssignment reports whether two maps rank, order and assign alike and
// list the same waiting members; versions, leader and times are ignored.
func (m Map) SameAssignment(o Map) bool {
	if !slices.Equal(m.Members, o.Members) || !slices.Equal(m.Table, o.Table) || m.Replicas != o.Replicas || len(m.Waiting) != len(o.Waiting) || m.ByLoad != o.ByLoad ||
		!maps.EqualFunc(m.Incoming, o.Incoming, slices.Equal) || !slices.Equal(m.Leave, o.Leave) {
		return false
	}
	for i := range m.Waiting {
		if m.Waiting[i].Name != o.Waiting[i].Name {
			return false
		}
	}
	return true
}

// slotOf maps a role to its slot. The hash is fixed for the life of a rink.
func SlotOf(role string, slots int) int {
	return int(xxhash.Sum64String(role) % uint64(slots))
}

// Waits reports whether the map lists name as waiting.
func (m Map) Waits(name string) bool {
	return slices.ContainsFunc(m.Waiting, func(w Waiter) bool { return w.Name == name })
}

// ReplicaNames returns the members slot s's replicas name in m, its
// primary first, then its secondaries oldest first, each once.
func (m *Map) ReplicaNames(s int) []string {
	var out []string
	for v := s; v < len(m.Table) && v < m.TableLen(); v += max(1, m.Slots) {
		if name := m.Owner(v); name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// capacityOr1 returns c if it is a usable capacity (positive and finite),
// and 1 otherwise.
func CapacityOr1(c float64) float64 {
	if c > 0 && !math.IsInf(c, 1) {
		return c
	}
	return 1
}
