package plan

import (
	"cmp"
	"math/big"
	"slices"
	"sort"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// This file holds the pure part of rink: the rank map, how the leader derives
// the next map from the current one, and how roles hash to slots. Nothing here
// does I/O or reads a clock, so that it can be table-tested and fuzzed.

// Input is what the leader knows when it computes the next map.
type Input struct {
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
	// Balance, when set, balances the table in Balance's stead (see
	// planMap: with replicas, moves go first where they keep roles warm).
	Balance func(owners []string, members []string, capacity map[string]float64) wire.SlotTable
	// Hold keeps every live member's replicas where they are (see
	// planMap), by count and by load: only orphans and missing
	// secondaries are placed, and no newcomer takes its share; promoted
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
func Plan(cur wire.Map, in Input) wire.Map {
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

	next := wire.Map{
		Schema:  wire.SchemaVersion,
		Version: cur.Version,
		Slots:   cur.Slots,
		Leader:  cur.Leader,
		Members: members,
	}
	for _, name := range still {
		next.Waiting = append(next.Waiting, wire.Waiter{Name: name, Since: in.Since[name]})
	}
	switch {
	case len(members) == 0:
	case in.ByLoad:
		next.Table = placeOrphans(owners, members, in.Capacity, in.Load)
		if !in.Hold {
			// (Held, a crash's promotions stay where they are: a newcomer
			// filled now would take promoted primaries, cold. It takes
			// its share once the hold ends, as by count.)
			fillNewcomers(next.Table, members, in.Capacity, in.Load)
		}
		next.ByLoad = true
	case in.Balance != nil:
		next.Table = in.Balance(owners, members, in.Capacity)
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
		caps[i] = wire.CapacityOr1(capacity[name])
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
func balance(owners []string, members []string, capacity map[string]float64) wire.SlotTable {
	n, S := len(members), len(owners)
	idx, count, target := sharesOf(owners, members, capacity)
	table := make(wire.SlotTable, S)
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
