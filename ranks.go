package rink

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
)

// This file holds the pure part of rink: the rank map, how the leader derives
// the next map from the current one, and how roles hash to slots. Nothing here
// does I/O or reads a clock, so that it can be table-tested and fuzzed.

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
const schemaVersion = 3

// schemaReplicas is the protocol of maps with more than one replica per
// slot (see rankMap.Replicas).
const schemaReplicas = 4

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

// errMapInvalid reports a map that decodes but is internally inconsistent.
var errMapInvalid = fmt.Errorf("%w: invalid rank map", ErrIncompatible)

// Geometry is what a member requires of the rink's maps: its slot count
// and its replicas per slot. Zero in either takes what the map says
// (observers, tools).
type Geometry struct {
	Slots, Replicas int
}

// decodeMap parses and validates a proclaimed map. slots is the slot count
// this member was configured with; a map with another count is refused.
// Any number of replicas is accepted (see decodeMapFor).
func decodeMap(data []byte, slots int) (Map, error) {
	return decodeMapFor(data, Geometry{Slots: slots})
}

// decodeMapFor is decodeMap for a member that requires geometry g.
func decodeMapFor(data []byte, g Geometry) (Map, error) {
	m, ok := parseMap(data)
	if !ok {
		if err := json.Unmarshal(data, &m); err != nil {
			return Map{}, fmt.Errorf("%w: map does not decode: %v", ErrIncompatible, err)
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
	if !slices.Contains(speaks, m.Schema) {
		return fmt.Errorf("%w: map schema %d, this member speaks %v", errUnknownProtocol, m.Schema, speaks)
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
	if m.Replicas < 0 || m.Replicas > MaxReplicas || m.Replicas > 1 && m.Schema < schemaReplicas {
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
func slotOf(role string, slots int) int {
	return int(xxhash.Sum64String(role) % uint64(slots))
}

// planInput is what the leader knows when it computes the next map.
type planInput struct {
	// Live lists the members whose member keys exist, oldest join first.
	Live []string
	// Ready names the waiting members that have waited the rebalance delay.
	Ready map[string]bool
	// Since gives, for waiting members, when the leader first saw them.
	Since map[string]time.Time
	// Capacity gives members' capacities (see WithCapacity); a member it
	// does not name has capacity 1.
	Capacity map[string]float64
	// ByLoad plans a table balanced by load: live members keep their
	// slots, orphans go by Load (see placeOrphans), and members without
	// slots take their share of the slots (see fillNewcomers); load rounds
	// (rebalanceLoad) do the rest.
	ByLoad bool
	// Load is each slot's estimated load, when ByLoad (nil: none known).
	Load []float64
	// Replicas is the replicas per slot (0 or 1: one; see WithReplicas
	// and planMap).
	Replicas int
	// Zones gives members' zones (see WithZone); a member it does not name
	// has none.
	Zones map[string]string
	// balance, when set, balances the table in balance's stead (see
	// planMap: with replicas, moves go first where they keep roles warm).
	balance func(owners []string, members []string, capacity map[string]float64) SlotTable
	// Hold keeps every live member's replicas where they are (see
	// planMap): only orphans and missing secondaries are placed; promoted
	// primaries stay on their secondaries, however uneven, and no
	// secondary moves to balance. The leader holds them so for a TTL after
	// a crash, with more than one replica: the other members of a zone
	// that was lost are likely to end within that time too, and a balance
	// would move primaries onto them, and warm secondaries away from the
	// slots whose primaries they are about to take over.
	Hold bool
	// Handed names departed members that handed their slots over (a
	// graceful departure, a member leaving with a warm-up): a waiting
	// member takes each one's index with all its replicas, as in a rink
	// of one replica. Other departed members' primaries go to their
	// secondaries first (see planMap).
	Handed map[string]bool
}

// plan derives the map that follows cur. It is deterministic, and it moves as
// few slots as possible:
//
//   - A ranked member that is gone is replaced by the longest-waiting member,
//     which takes its index and all its slots.
//   - When nobody waits, the member with the highest index moves into the
//     hole (keeping its slots) and the departed member's slots are spread over
//     the survivors; no other slot moves.
//   - When nobody is ranked, the oldest live member is ranked at once.
//   - Waiting members that are ready are appended and take just the slots
//     they need from the most loaded members.
//
// The returned map has cur's version; the caller numbers it if it differs.
func plan(cur Map, in planInput) Map {
	live := make(map[string]bool, len(in.Live))
	for _, name := range in.Live {
		live[name] = true
	}

	// owners[s] is the member that owns slot s, "" for an orphan.
	owners := make([]string, cur.Slots)
	for s := range owners {
		owners[s] = cur.Owner(s)
	}

	ranked := make(map[string]bool, len(cur.Members))
	for _, name := range cur.Members {
		ranked[name] = true
	}
	var waiting []string
	for _, name := range in.Live {
		if !ranked[name] {
			waiting = append(waiting, name)
		}
	}

	// Fill the indexes of departed members: first with waiting members, then
	// by moving the highest surviving index down.
	members := slices.Clone(cur.Members)
	var holes []int
	for i, name := range members {
		if !live[name] {
			holes = append(holes, i)
		}
	}
	for len(holes) > 0 && len(waiting) > 0 {
		i := holes[0]
		gone, heir := members[i], waiting[0]
		holes, waiting = holes[1:], waiting[1:]
		for s, o := range owners {
			if o == gone {
				owners[s] = heir
			}
		}
		members[i] = heir
	}
	for _, i := range holes {
		gone := members[i]
		for s, o := range owners {
			if o == gone {
				owners[s] = ""
			}
		}
		members[i] = ""
	}
	members = compact(members)

	// An empty rink ranks its oldest live member at once.
	if len(members) == 0 && len(waiting) > 0 {
		members = append(members, waiting[0])
		waiting = waiting[1:]
	}
	// Ready members join the ranks, in join order.
	var still []string
	for _, name := range waiting {
		if in.Ready[name] {
			members = append(members, name)
		} else {
			still = append(still, name)
		}
	}

	next := Map{
		Schema:  schemaVersion,
		Version: cur.Version,
		Slots:   cur.Slots,
		Leader:  cur.Leader,
		Members: members,
	}
	for _, name := range still {
		next.Waiting = append(next.Waiting, Waiter{Name: name, Since: in.Since[name]})
	}
	switch {
	case len(members) == 0:
	case in.ByLoad:
		next.Table = placeOrphans(owners, members, in.Capacity, in.Load)
		fillNewcomers(next.Table, members, in.Capacity, in.Load)
		next.ByLoad = true
	case in.balance != nil:
		next.Table = in.balance(owners, members, in.Capacity)
	default:
		next.Table = balance(owners, members, in.Capacity)
	}
	return next
}

// compact closes the holes ("" entries) in an index list by moving the
// highest remaining entry into the lowest hole, repeatedly, so that every
// member that does not move keeps its index.
func compact(members []string) []string {
	lo, hi := 0, len(members)-1
	for {
		for hi >= 0 && members[hi] == "" {
			hi--
		}
		for lo < len(members) && members[lo] != "" {
			lo++
		}
		if lo >= hi {
			return members[:hi+1]
		}
		members[lo], members[hi] = members[hi], ""
	}
}

// sharesOf indexes members by name, counts the slots each owns in owners
// (slot -> owner name; names not in members own nothing), and returns each
// member's share of the slots by capacity (see shares).
func sharesOf(owners []string, members []string, capacity map[string]float64) (idx map[string]int, count, target []int) {
	idx = make(map[string]int, len(members))
	for i, name := range members {
		idx[name] = i
	}
	count = make([]int, len(members))
	for _, o := range owners {
		if i, ok := idx[o]; ok {
			count[i]++
		}
	}
	caps := make([]float64, len(members))
	for i, name := range members {
		caps[i] = capacityOr1(capacity[name])
	}
	return idx, count, shares(len(owners), caps, count)
}

// balance returns a slot table (slot -> index in members) in which every
// member owns its share of the S slots, S·c/Σc for its capacity c, rounded
// down or up (with equal capacities, floor(S/n) or ceil(S/n)), and as few
// slots as possible change owner: orphans ("" owners, or owners not in
// members) always move, and beyond them only the excess of over-full
// members moves. The shares rounded up go to the members that already own
// the most slots. capacity gives each member's capacity; a member it does
// not name has capacity 1.
func balance(owners []string, members []string, capacity map[string]float64) SlotTable {
	n, S := len(members), len(owners)
	idx, count, target := sharesOf(owners, members, capacity)
	table := make(SlotTable, S)
	var free []int
	// Walk slots from the top so that an over-full member gives up its
	// highest-numbered slots; the choice is arbitrary but deterministic.
	keep := slices.Clone(count)
	for s := S - 1; s >= 0; s-- {
		i, ok := idx[owners[s]]
		if !ok {
			free = append(free, s)
			continue
		}
		if keep[i] > target[i] {
			keep[i]--
			free = append(free, s)
			continue
		}
		table[s] = int32(i)
	}
	slices.Sort(free)
	f := 0
	for i := 0; i < n; i++ {
		for ; keep[i] < target[i]; keep[i]++ {
			table[free[f]] = int32(i)
			f++
		}
	}
	return table
}

// capacityOr1 returns c if it is a usable capacity (positive and finite),
// and 1 otherwise.
func capacityOr1(c float64) float64 {
	if c > 0 && !math.IsInf(c, 1) {
		return c
	}
	return 1
}

// shares returns each member's slot count out of S: its exact share
// S·caps[i]/Σcaps rounded down, and rounded up for as many members as the
// rounding left slots over. Those are members whose share is not whole:
// first those that already own more than their share rounded down (count;
// rounding them up saves a move), then those with the larger fractions,
// then those that own the most, then the lower indexes. So a table that is
// already within one slot of every share keeps every slot, and with equal
// capacities the larger shares go to the members that own the most. The arithmetic
// is exact (big.Rat), so equal capacities give exactly floor(S/n) or
// ceil(S/n).
func shares(S int, caps []float64, count []int) []int {
	n := len(caps)
	if n > 0 && !slices.ContainsFunc(caps, func(c float64) bool { return c != caps[0] }) {
		return equalShares(S, count)
	}
	return ratShares(S, caps, count)
}

// ratShares is shares in exact rational arithmetic, for any capacities.
func ratShares(S int, caps []float64, count []int) []int {
	n := len(caps)
	total := new(big.Rat)
	rats := make([]*big.Rat, n)
	for i, c := range caps {
		rats[i] = new(big.Rat).SetFloat64(c)
		total.Add(total, rats[i])
	}
	target := make([]int, n)
	frac := make([]*big.Rat, n)
	left := S
	for i := range caps {
		x := new(big.Rat).Mul(rats[i], new(big.Rat).SetInt64(int64(S)))
		x.Quo(x, total)
		q := new(big.Int).Quo(x.Num(), x.Denom()) // x >= 0: truncation is floor
		target[i] = int(q.Int64())
		frac[i] = x.Sub(x, new(big.Rat).SetInt(q))
		left -= target[i]
	}
	order := make([]int, 0, n)
	for i := range caps {
		if frac[i].Sign() > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		i, j := order[a], order[b]
		oi, oj := count[i]-target[i], count[j]-target[j] // owned above the floor
		if si, sj := oi > 0, oj > 0; si != sj {
			return si // rounding up saves a move
		}
		if c := frac[i].Cmp(frac[j]); c != 0 {
			return c > 0
		}
		return oi > oj
	})
	for _, i := range order[:min(left, len(order))] {
		target[i]++
	}
	return target
}

// equalShares is shares for equal capacities, in integers (the rational
// arithmetic took 13 % of the process's CPU while a 10,000-member rink was
// built, by a CPU profile): every share
// is S/n rounded down, and the S mod n left over go first to members that
// own more than that (rounding them up saves a move), then to those that
// own the most, then to the lower indexes, as shares gives them.
func equalShares(S int, count []int) []int {
	n := len(count)
	target := make([]int, n)
	for i := range target {
		target[i] = S / n
	}
	left := S % n
	if left == 0 {
		return target
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		oi, oj := count[i]-target[i], count[j]-target[j]
		if si, sj := oi > 0, oj > 0; si != sj {
			if si {
				return -1
			}
			return 1
		}
		return cmp.Compare(oj, oi)
	})
	for _, i := range order[:left] {
		target[i]++
	}
	return target
}

// Waits reports whether the map lists name as waiting.
func (m Map) Waits(name string) bool {
	return slices.ContainsFunc(m.Waiting, func(w Waiter) bool { return w.Name == name })
}
