package plan

import (
	"math"
	"slices"

	"github.com/rink-go/rink/internal/wire"
)

// Load balancing, the pure part. Once members report their load (see
// load.go), the leader can balance by load rather than by slot count: it
// estimates each slot's load, and rebalanceLoad moves loaded slots from the
// most loaded members (by load per capacity) to the least loaded, one way,
// so that a member holding one very hot slot can give away everything
// else. Slot counts then drift from the count shares, and count balancing
// must stop correcting them (see placeOrphans): in a rink balanced by load,
// departures and promotions keep working as before (an heir takes all of
// its predecessor's slots), and orphaned slots go to the least loaded
// members.
//
// Like plan, it does no I/O and reads no clock.

// LoadInput is what rebalanceLoad needs beside the current table.
type LoadInput struct {
	// Load is each slot's estimated load (S entries, none negative).
	Load []float64
	// Capacity gives members' capacities; a member it does not name has
	// capacity 1.
	Capacity map[string]float64
	// Tolerance is how far above the mean a member's load per capacity may
	// be: a round starts only when the most loaded member is above
	// (1+Tolerance) times the mean, and then swaps until it is within
	// (1+Tolerance/2) times the mean, or nothing helps any more.
	Tolerance float64
	// Budget bounds the slots a round moves (two per swap).
	Budget int
	// Frozen marks slots that must not move (moved in a recent round).
	Frozen []bool
	// Continue runs the round even within the tolerance: the previous
	// round spent its budget before reaching (1+Tolerance/2).
	Continue bool
}

// memberLoads returns each member's load over its slots in table.
func memberLoads(table wire.SlotTable, n int, load []float64) []float64 {
	out := make([]float64, n)
	for s, i := range table {
		out[i] += load[s]
	}
	return out
}

// imbalance returns the most loaded member's load per capacity over the
// mean load per capacity: 1 is perfect balance. It is 1 when there is no
// load.
func Imbalance(m wire.Map, load []float64, capacity map[string]float64) float64 {
	if len(m.Members) == 0 {
		return 1
	}
	m = PrimaryMap(m) // (load is the primaries')
	loads := memberLoads(m.Table, len(m.Members), load)
	total, caps, worst := 0.0, 0.0, 0.0
	for i, name := range m.Members {
		c := wire.CapacityOr1(capacity[name])
		total += loads[i]
		caps += c
		worst = max(worst, loads[i]/c)
	}
	if total <= 0 {
		return 1
	}
	return worst / (total / caps)
}

// imbalanceBound returns the least imbalance any table could reach: the
// hottest slot on the member with the most capacity, beside the mean (or 1).
func imbalanceBound(m wire.Map, load []float64, capacity map[string]float64) float64 {
	total, caps, hot, top := 0.0, 0.0, 0.0, 0.0
	for _, x := range load {
		total += x
		hot = max(hot, x)
	}
	for _, name := range m.Members {
		c := wire.CapacityOr1(capacity[name])
		caps += c
		top = max(top, c)
	}
	if total <= 0 || caps == 0 {
		return 1
	}
	return max(1, (hot/top)/(total/caps))
}

// rebalanceLoad returns the table after one round of load balancing, and
// the slots it moved. The round:
//
//   - starts only if the most loaded member (by load per capacity) is more
//     than 1+Tolerance times the mean, or if Continue says that the round
//     before ran out of budget;
//   - then repeatedly moves one loaded slot from the most loaded member h
//     to the member l whose load per capacity it raises least: of the
//     moves that bring both within (1+Tolerance/2) times the mean, the one
//     that moves the least load; if none does, the one that leaves the
//     larger of the two lowest. A move is made only if it leaves l below
//     h's load before the move, so the most loaded member's load never
//     grows, and a slot moves at most once per round;
//   - stops at (1+Tolerance/2) times the mean, when Budget slots have
//     moved, when the most loaded member has one slot left (a member
//     without slots would take a count share back, see fillNewcomers), or
//     when no move lowers the most loaded member's load.
//
// Frozen slots, and slots without load, do not move.
func RebalanceLoad(cur wire.Map, in LoadInput) (table wire.SlotTable, moved []int) {
	n := len(cur.Members)
	cur = PrimaryMap(cur) // (load is the primaries': the caller places secondaries around them)
	table = slices.Clone(cur.Table)
	if n < 2 || len(in.Load) != len(table) || in.Budget < 1 {
		return table, nil
	}
	caps := make([]float64, n)
	capSum := 0.0
	for i, name := range cur.Members {
		caps[i] = wire.CapacityOr1(in.Capacity[name])
		capSum += caps[i]
	}
	loads := memberLoads(table, n, in.Load)
	count := make([]int, n)
	for _, i := range table {
		count[i]++
	}
	total := 0.0
	for _, x := range loads {
		total += x
	}
	if !(total > 0) || math.IsInf(total, 0) || math.IsInf(capSum, 0) {
		return table, nil
	}
	mean := total / capSum
	per := func(i int) float64 { return loads[i] / caps[i] }
	most := func() (h int) {
		for i := 1; i < n; i++ {
			if per(i) > per(h) {
				h = i
			}
		}
		return h
	}
	if h := most(); per(h) <= mean*(1+in.Tolerance) && !in.Continue {
		return table, nil
	}
	aim := mean * (1 + in.Tolerance/2)
	done := make([]bool, len(table)) // frozen, or moved in this round
	if in.Frozen != nil {
		copy(done, in.Frozen)
	}
	for len(moved) < in.Budget {
		h := most()
		if per(h) <= aim || count[h] < 2 {
			break // (a member keeps a slot: one left empty would take a count share back)
		}
		best, to, bestPeak, bestFits := -1, -1, per(h), false
		for s, i := range table {
			if int(i) != h || done[s] || !(in.Load[s] > 0) {
				continue
			}
			x := in.Load[s]
			// The member the slot raises least, by load per capacity.
			l := -1
			for j := range caps {
				if j != h && (l < 0 || (loads[j]+x)/caps[j] < (loads[l]+x)/caps[l]) {
					l = j
				}
			}
			hAfter, lAfter := (loads[h]-x)/caps[h], (loads[l]+x)/caps[l]
			if lAfter >= per(h) {
				continue // would not lower the larger of the two
			}
			peak := max(hAfter, lAfter)
			fits := hAfter <= aim && lAfter <= aim
			switch {
			case fits && (!bestFits || x < in.Load[best]):
				best, to, bestPeak, bestFits = s, l, peak, true
			case !fits && !bestFits && peak < bestPeak:
				best, to, bestPeak = s, l, peak
			}
		}
		if best < 0 {
			break
		}
		x := in.Load[best]
		table[best] = int32(to)
		loads[h] -= x
		loads[to] += x
		count[h]--
		count[to]++
		moved = append(moved, best)
		done[best] = true
	}
	return table, moved
}

// placeOrphans returns a table in which every slot owned by one of members
// keeps its owner, and every other slot (an orphan) goes to a member:
// the orphans by load, most loaded first, each to the member whose load per
// capacity it raises least, ties to the member with the fewest slots per
// capacity, then the lower index. It is balance for a rink balanced by
// load: live members' slots stay where the load rounds put them.
func placeOrphans(owners []string, members []string, capacity map[string]float64, load []float64) wire.SlotTable {
	n, S := len(members), len(owners)
	idx := make(map[string]int, n)
	for i, name := range members {
		idx[name] = i
	}
	table := make(wire.SlotTable, S)
	loads := make([]float64, n)
	count := make([]int, n)
	caps := make([]float64, n)
	for i, name := range members {
		caps[i] = wire.CapacityOr1(capacity[name])
	}
	var orphans []int
	for s, o := range owners {
		i, ok := idx[o]
		if !ok {
			orphans = append(orphans, s)
			continue
		}
		table[s] = int32(i)
		count[i]++
		if s < len(load) {
			loads[i] += load[s]
		}
	}
	at := func(s int) float64 {
		if s < len(load) {
			return load[s]
		}
		return 0
	}
	slices.SortStableFunc(orphans, func(a, b int) int {
		switch {
		case at(a) > at(b):
			return -1
		case at(a) < at(b):
			return 1
		}
		return 0
	})
	for _, s := range orphans {
		best := 0
		for i := 1; i < n; i++ {
			bi, ii := (loads[best]+at(s))/caps[best], (loads[i]+at(s))/caps[i]
			if ii < bi || ii == bi && float64(count[i])/caps[i] < float64(count[best])/caps[best] {
				best = i
			}
		}
		table[s] = int32(best)
		loads[best] += at(s)
		count[best]++
	}
	return table
}

// fillNewcomers gives every member of table that owns no slot its share of
// the slots by capacity (S·c/Σc, rounded down), as count balancing would,
// so a scale-out in a rink balanced by load moves as many slots as one
// balanced by count. Which slots it takes follows the load, so that the
// rink is balanced from the first spread on and no load round has to
// correct it (a move a later round would make, after the rink looked
// settled):
//
//   - while the newcomer's load is below its share of the total (by
//     capacity), it takes a loaded slot from the member with the most load
//     per capacity that has more than one slot and a loaded slot: the
//     largest that keeps it within its share, or, when none fits, the
//     smallest, if that leaves it nearer its share and below the donor's
//     load before the move;
//   - then it takes cold slots: one at a time from the member with the most
//     slots per capacity, its least loaded slot (ties to the
//     highest-numbered).
//
// Newcomers are served in index order. It changes table in place.
func fillNewcomers(table wire.SlotTable, members []string, capacity map[string]float64, load []float64) {
	n, S := len(members), len(table)
	count := make([]int, n)
	for _, i := range table {
		count[i]++
	}
	caps := make([]float64, n)
	total := 0.0
	for i, name := range members {
		caps[i] = wire.CapacityOr1(capacity[name])
		total += caps[i]
	}
	at := func(s int) float64 {
		if s < len(load) && load[s] > 0 && !math.IsInf(load[s], 1) {
			return load[s]
		}
		return 0
	}
	loads := make([]float64, n)
	sum := 0.0
	for s, i := range table {
		loads[i] += at(s)
		sum += at(s)
	}
	for i := range members {
		if count[i] > 0 {
			continue
		}
		want := int(math.Floor(float64(S) * caps[i] / total))
		share := sum * caps[i] / total
		loaded := true // a loaded slot may fit
		for ; count[i] < want; count[i]++ {
			s := -1
			if loaded && loads[i] < share {
				s = loadedSlot(table, i, count, caps, loads, at, share)
				loaded = s >= 0
			}
			if s < 0 {
				donor := -1
				for j := range members {
					if j != i && count[j] > 1 && (donor < 0 || float64(count[j])/caps[j] > float64(count[donor])/caps[donor]) {
						donor = j
					}
				}
				if donor < 0 {
					break
				}
				for t := S - 1; t >= 0; t-- {
					if int(table[t]) == donor && (s < 0 || at(t) < at(s)) {
						s = t
					}
				}
			}
			d := table[s]
			table[s] = int32(i)
			count[d]--
			loads[d] -= at(s)
			loads[i] += at(s)
		}
	}
}

// loadedSlot picks the loaded slot newcomer i takes next (see
// fillNewcomers), or -1.
func loadedSlot(table wire.SlotTable, i int, count []int, caps, loads []float64, at func(int) float64, share float64) int {
	donor := -1
	for j := range caps {
		if j == i || count[j] < 2 || (donor >= 0 && loads[j]/caps[j] <= loads[donor]/caps[donor]) {
			continue
		}
		for s, o := range table {
			if int(o) == j && at(s) > 0 {
				donor = j
				break
			}
		}
	}
	if donor < 0 {
		return -1
	}
	fit, small := -1, -1
	for s, o := range table {
		x := at(s)
		if int(o) != donor || x <= 0 {
			continue
		}
		if loads[i]+x <= share && (fit < 0 || x > at(fit)) {
			fit = s
		}
		if small < 0 || x < at(small) {
			small = s
		}
	}
	if fit >= 0 {
		return fit
	}
	x := at(small)
	if after := (loads[i] + x) / caps[i]; loads[i]+x-share < share-loads[i] && after < loads[donor]/caps[donor] {
		return small
	}
	return -1
}
