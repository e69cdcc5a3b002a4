package plan

import (
	"slices"

	"github.com/rink-go/rink/internal/wire"
)

// planMap is plan for a rink of in.Replicas replicas per slot: with one,
// plan itself; with more, the primaries are planned as plan plans a map of
// one replica, after promotion, and the secondaries are placed around them
// (placeSecondaries). The steps, in order:
//
//  1. A departed member's index goes to the longest-waiting member, as in
//     plan, with every replica it held, when it handed its slots over (a
//     graceful departure, a member leaving with a warm-up: in.Handed). A
//     rolling deploy so moves each primary once, as with one replica.
//  2. Every other departed member crashed: each of its primaries goes to
//     the slot's oldest live secondary (the loop over secs below). What is
//     left of it (its secondaries, and primaries with no live secondary)
//     goes to a waiting member with its index if one waits, and is placed
//     anew otherwise.
//  3. plan ranks, fills and balances the primaries.
//  4. placeSecondaries keeps every secondary that is still allowed, fills
//     the missing ones, and balances them.
//
// The returned map has cur's version; the caller numbers it if it differs.
// It is deterministic, and planning again what it returns changes nothing
// when the members do not change.
func PlanMap(cur wire.Map, in Input) wire.Map {
	k := max(1, in.Replicas)
	if k == 1 {
		next := Plan(PrimaryMap(cur), in)
		next.Replicas = 0
		return next
	}
	S := cur.Slots
	live := make(map[string]bool, len(in.Live))
	for _, name := range in.Live {
		live[name] = true
	}
	// Each slot's secondaries by name, oldest first (see
	// rankMap.Replicas), from the rows of a map of k' replicas (any k').
	secs := secondaryNames(&cur)
	// Which departed indexes a waiting member takes (plan's first step).
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
	heir := map[string]string{} // departed name -> the member taking its index
	for _, name := range cur.Members {
		if !live[name] && len(waiting) > 0 {
			heir[name], waiting = waiting[0], waiting[1:]
		}
	}
	// Promote the primaries of crashed members, and of handed-over ones
	// that no member takes over.
	base := PrimaryMap(cur)
	promoted := map[int]bool{}
	if len(base.Table) == S && len(base.Members) > 0 {
		base.Table = slices.Clone(base.Table)
		for s, p := range base.Table {
			gone := base.Members[p]
			if live[gone] || in.Handed[gone] && heir[gone] != "" {
				continue
			}
			for r, x := range secs[s] {
				if live[x] && ranked[x] {
					base.Table[s] = int32(base.Index(x))
					secs[s] = slices.Delete(secs[s], r, r+1)
					promoted[s] = true
					break
				}
			}
		}
	}
	in.Balance = func(owners, members []string, capacity map[string]float64) wire.SlotTable {
		if in.Hold && !in.ByLoad {
			return placeOrphansWarm(owners, members, capacity, secs)
		}
		return balanceWarm(owners, members, capacity, secs, promoted)
	}
	next := Plan(base, in)
	rename := map[string]string{}
	for gone, h := range heir {
		if !live[gone] {
			rename[gone] = h // (a departed member's secondaries go to its heir)
		}
	}
	return placeAround(next, secs, rename, in)
}

// withPrimaries returns next with table (a load round's) as its
// primaries, and its secondaries placed anew around them (placeAround):
// a secondary that became the primary of its slot is replaced.
func WithPrimaries(next wire.Map, table wire.SlotTable, in Input) wire.Map {
	if next.ReplicaCount() == 1 {
		next.Table = table
		return next
	}
	secs := secondaryNames(&next)
	next.Table = table
	return placeAround(next, secs, nil, in)
}

// placeAround returns next, whose table holds its primaries' row at least,
// with in.Replicas replicas per slot: its secondaries placed by
// placeSecondaries from secs (each slot's secondaries by name, oldest
// first, as the map before had them; rename maps a departed member's name
// to its heir's, which comes after the others, as the newest, and any
// other name next does not rank is dropped).
func placeAround(next wire.Map, secs [][]string, rename map[string]string, in Input) wire.Map {
	S, k := next.Slots, max(1, in.Replicas)
	next.Replicas = k
	next.Schema = max(next.Schema, wire.SchemaReplicas)
	if len(next.Members) == 0 || len(next.Table) < S {
		next.Table = nil
		return next
	}
	l := replicaLayout{K: k, Members: next.Members, Primary: next.Table[:S]}
	l.Zone = make([]string, len(next.Members))
	l.Capacity = make([]float64, len(next.Members))
	idx := make(map[string]int32, len(next.Members))
	for i, name := range next.Members {
		idx[name] = int32(i)
		l.Zone[i] = in.Zones[name]
		l.Capacity[i] = wire.CapacityOr1(in.Capacity[name])
	}
	prev := newSecondaryTable(S, k)
	for s, row := range secs {
		if s >= S {
			break
		}
		// The secondaries that stay, oldest first, then the heirs of
		// departed ones, as the newest: an heir has held the slot for no
		// time at all, and taking its predecessor's place in the order
		// made it the one promoted at the next crash, cold, over one that
		// had held the slot all along (found in review).
		n := 0
		for _, heirs := range [2]bool{false, true} {
			for _, name := range row {
				h, renamed := rename[name]
				if renamed != heirs {
					continue
				}
				if renamed {
					name = h
				}
				if i, ok := idx[name]; ok && n < k-1 && !slices.Contains(prev[s][:n], i) {
					prev[s][n] = i
					n++
				}
			}
		}
	}
	rows := placeSecondariesAs(&l, prev, !in.Hold)
	table := make(wire.SlotTable, S*k)
	copy(table, next.Table[:S])
	for s := range S {
		for r := 1; r < k; r++ {
			e := table[s] // (none: the primary's index)
			if x := rows[s][r-1]; x >= 0 {
				e = x
			}
			table[r*S+s] = e
		}
	}
	next.Table = table
	return next
}

// primaryMap returns m as a map of one replica: its primaries' row alone.
func PrimaryMap(m wire.Map) wire.Map {
	if m.Replicas > 1 && len(m.Table) >= m.Slots {
		m.Table = m.Table[:m.Slots:m.Slots]
	}
	m.Replicas = 0
	return m
}

// secondaryNames returns each slot's secondaries in m by name, oldest
// first: the entries of its rows past the primary's that name a member
// neither the primary nor an earlier row names.
func secondaryNames(m *wire.Map) [][]string {
	S, k := m.Slots, m.ReplicaCount()
	out := make([][]string, S)
	if k == 1 || len(m.Table) != S*k || len(m.Members) == 0 {
		return out
	}
	for s := range S {
		for r := 1; r < k; r++ {
			name := m.Owner(r*S + s)
			if name != "" && name != m.Owner(s) && !slices.Contains(out[s], name) {
				out[s] = append(out[s], name)
			}
		}
	}
	return out
}

// balanceWarm is balance for a rink of replicas: the same counts per
// member, the same number of moves (orphans, and the excess of over-full
// members), but the moves chosen to keep roles warm. An orphan goes
// first to a member below its share that holds it as a secondary (secs:
// each slot's secondaries by name); an over-full member gives up first the
// slots whose secondary is a member below its share, to that member (the
// roles stay warm: their new primary held them), then those it did not
// just take by promotion (promoted), highest first, then the rest: a role
// promoted after a crash stays where it is rather than move twice. The
// slots given up and not placed on a secondary go, lowest first, to the
// members below their share, lowest index first, as balance does.
func balanceWarm(owners []string, members []string, capacity map[string]float64, secs [][]string, promoted map[int]bool) wire.SlotTable {
	n, S := len(members), len(owners)
	idx, count, target := sharesOf(owners, members, capacity)
	table := make(wire.SlotTable, S)
	keep := slices.Clone(count)
	// room returns a member below its share that holds slot s as a
	// secondary, or -1.
	room := func(s int) int {
		if s >= len(secs) {
			return -1
		}
		for _, name := range secs[s] {
			if j, ok := idx[name]; ok && keep[j] < target[j] {
				return j
			}
		}
		return -1
	}
	var free []int
	owner := make([]int, S)
	for s := range S {
		i, ok := idx[owners[s]]
		if !ok {
			i = -1
		}
		owner[s] = i
	}
	// Orphans first: to a secondary with room, else to the pool.
	for s := range S {
		if owner[s] >= 0 {
			continue
		}
		if j := room(s); j >= 0 {
			owner[s] = j
			keep[j]++
			continue
		}
		free = append(free, s)
	}
	// The excess of over-full members, in four passes of preference: to a
	// secondary with room, the slots not just promoted, then the promoted
	// ones (to a younger secondary: warm still); then cold, likewise.
	for pass := range 4 {
		for s := S - 1; s >= 0; s-- {
			i := owner[s]
			if i < 0 || keep[i] <= target[i] || promoted[s] != (pass%2 == 1) {
				continue
			}
			if pass < 2 {
				if j := room(s); j >= 0 {
					owner[s] = j
					keep[i]--
					keep[j]++
				}
				continue
			}
			owner[s] = -1
			keep[i]--
			free = append(free, s)
		}
	}
	slices.Sort(free)
	f := 0
	for i := range n {
		for ; keep[i] < target[i] && f < len(free); keep[i]++ {
			owner[free[f]] = i
			f++
		}
	}
	for s, i := range owner {
		table[s] = int32(max(i, 0))
	}
	return table
}

// placeOrphansWarm is balanceWarm that moves nothing but orphans (see
// planInput.Hold): every live member keeps its primaries, and an
// orphan goes to a member below its share that holds it as a secondary,
// else to the members below their share, lowest index first, else to the
// member with the fewest.
func placeOrphansWarm(owners []string, members []string, capacity map[string]float64, secs [][]string) wire.SlotTable {
	n, S := len(members), len(owners)
	idx, count, target := sharesOf(owners, members, capacity)
	table := make(wire.SlotTable, S)
	for s, o := range owners {
		if i, ok := idx[o]; ok {
			table[s] = int32(i)
			continue
		}
		best := -1
		if s < len(secs) {
			for _, name := range secs[s] {
				if j, ok := idx[name]; ok && count[j] < target[j] {
					best = j
					break
				}
			}
		}
		for j := 0; best < 0 && j < n; j++ {
			if count[j] < target[j] {
				best = j
			}
		}
		if best < 0 {
			best = 0
			for j := range n {
				if count[j] < count[best] {
					best = j
				}
			}
		}
		table[s] = int32(best)
		count[best]++
	}
	return table
}
