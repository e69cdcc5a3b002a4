package plan

import (
	"cmp"
	"slices"

	"github.com/rink-go/rink/internal/wire"
)

// Replicas and zones (issue 26), the planning half: where each slot's
// secondaries go, and which of them a slot's departed primary hands the
// slot to (planMap, which the leader and a departing member call). Pure
// logic over a map's indexes: no I/O, no clock.
//
// A slot has k replicas on k distinct members: replica 0, its primary, is
// the slot's owner in the map's table (the holder of its roles, fenced by
// the barrier); replicas 1..k-1 are its secondaries, kept in the order
// they began to hold the slot, so that the first live one has held it
// longest.

// replicaLayout is what placing secondaries needs of a map: its members,
// their zones and capacities, and each slot's primary.
//
// Invariant: Zone and Capacity, when set, have an entry per member index;
// Primary has an entry per slot, an index of Members or -1.
type replicaLayout struct {
	// K is the replicas a slot has, its primary included (at least 1).
	K int
	// Members are the map's members by index; "" marks an index no live
	// member holds (a vacated one), which holds no replica.
	Members []string
	// Zone is each member's failure domain ("" : none given). Members with
	// no zone count as one zone of their own.
	Zone []string
	// Capacity is each member's capacity (0 or absent: 1), by which its
	// share of the secondaries is weighed.
	Capacity []float64
	// Primary is each slot's primary, by index (-1: none).
	Primary []int32
}

// secondaryTable holds each slot's secondaries: entry r of slot s is the
// index of replica r+1 (-1: none). Each slot's entries list its
// secondaries first, oldest first, then -1s.
type secondaryTable [][]int32

// newSecondaryTable returns a table of slots slots with no secondaries,
// room for k-1 per slot.
func newSecondaryTable(slots, k int) secondaryTable {
	t := make(secondaryTable, slots)
	cells := make([]int32, slots*max(0, k-1))
	for i := range cells {
		cells[i] = -1
	}
	for s := range t {
		t[s], cells = cells[:max(0, k-1):max(0, k-1)], cells[max(0, k-1):]
	}
	return t
}

// clone returns a deep copy of t.
func (t secondaryTable) clone() secondaryTable {
	if len(t) == 0 {
		return nil
	}
	c := newSecondaryTable(len(t), len(t[0])+1)
	for s := range t {
		copy(c[s], t[s])
	}
	return c
}

// live reports whether index i holds a live member.
func (l *replicaLayout) live(i int) bool {
	return i >= 0 && i < len(l.Members) && l.Members[i] != ""
}

func (l *replicaLayout) zone(i int) string {
	if i >= 0 && i < len(l.Zone) {
		return l.Zone[i]
	}
	return ""
}

func (l *replicaLayout) capacity(i int) float64 {
	if i >= 0 && i < len(l.Capacity) {
		return wire.CapacityOr1(l.Capacity[i])
	}
	return 1
}

// placeSecondaries returns the secondaries that follow prev under l: as
// few changes as possible, such that
//
//   - no member holds two replicas of a slot;
//   - every slot has min(k-1, live members - 1) secondaries;
//   - a slot's replicas sit in as many distinct zones as the live members'
//     zones allow, up to k (distinct zones outrank stickiness and balance);
//   - a secondary stays where it is unless one of the rules above moves it,
//     or its member holds more than its share (see secondaryShares);
//   - placing again what it returns changes nothing (a rink at rest moves
//     nothing).
//
// The slots' primaries are l.Primary's, as planning and promotion left them.
//
// Cost: each pick passes over the live members, and balancing picks for
// every secondary of a member above its share, so a placement costs
// O(slots × k × members) per pass: fine for the leader of tens of members,
// not yet for 10,000 (a queue of members by room would serve them).
func placeSecondaries(l *replicaLayout, prev secondaryTable) secondaryTable {
	return placeSecondariesAs(l, prev, true)
}

// placeSecondariesAs is placeSecondaries; without balance it keeps and
// fills, and moves nothing to balance (see planInput.Hold).
func placeSecondariesAs(l *replicaLayout, prev secondaryTable, balance bool) secondaryTable {
	slots, k := len(l.Primary), max(1, l.K)
	next := newSecondaryTable(slots, k)
	var live []int
	zones := map[string]bool{}
	for i := range l.Members {
		if l.live(i) {
			live = append(live, i)
			zones[l.zone(i)] = true
		}
	}
	if k == 1 || len(live) < 2 {
		return next
	}
	want := min(k-1, len(live)-1)        // secondaries per slot
	wantZones := min(k, len(zones))      // distinct zones per slot, primary included
	count := make([]int, len(l.Members)) // secondaries held, by index
	shares := secondaryShares(l, live, slots*want)
	pairs := pairCounts{}        // secondaries held, by primary and secondary
	fresh := map[[2]int32]bool{} // (slot, member): a secondary this placement made

	// Keep what prev placed that is still allowed, oldest first; then, if
	// the slot would lack distinct zones the rink has, drop its newest
	// secondaries in zones it already uses until fill can add them.
	for s := range slots {
		row := next[s]
		var keep []int32
		if s < len(prev) {
			keep = prev[s]
		}
		n := 0
		for _, x := range keep {
			if n < want && l.live(int(x)) && x != l.Primary[s] && !slices.Contains(row[:n], x) {
				row[n] = x
				n++
			}
		}
		for r := n - 1; r >= 0 && l.zonesOf(s, row[:n]) < min(want+1, wantZones)-(want-n); r-- {
			if l.zoneTaken(s, row[:n], r) {
				copy(row[r:n], row[r+1:n])
				n--
				row[n] = -1
			}
		}
		for _, x := range row[:n] {
			count[x]++
			pairs.add(l.Primary[s], x, 1)
		}
	}

	// Fill every slot's missing secondaries, slot by slot: a member in a
	// zone the slot does not use yet, if any; then the member furthest
	// below its share; then the lowest index.
	for s := range slots {
		row := next[s]
		for {
			n := slices.Index(row, -1)
			if n < 0 || n >= want {
				break
			}
			i := pickSecondary(l, live, row[:n], int(l.Primary[s]), count, shares, pairs)
			if i < 0 {
				break
			}
			row[n] = int32(i)
			count[i]++
			pairs.add(l.Primary[s], int32(i), 1)
			fresh[[2]int32{int32(s), int32(i)}] = true
		}
	}

	// Balance: a member hands a secondary to the member fill would pick
	// in its stead when that narrows the spread of the members' loads
	// relative to their shares (Σ (count-share)²/capacity falls by every
	// such move, so the passes end; placing again finds none to make).
	// First the secondaries this placement made (fresh), then, if that
	// did not suffice, the ones it kept, newest first: a secondary that
	// has held its slot for a while is warm, and the slot's primary may
	// be about to fail over to it (a zone's members' leases end one by
	// one, and each ending is a map: moving the warm secondary of a slot
	// whose primary is the next to go promoted a cold one).
	for _, onlyFresh := range [2]bool{true, false} {
		if balance {
			balanceSecondaries(l, next, live, count, shares, pairs, fresh, onlyFresh)
		}
	}
	return next
}

// balanceSecondaries is placeSecondaries' balancing (see there), of the
// fresh secondaries alone when onlyFresh is set.
//
// It makes the moves that even out the pairs too first (the slot's primary
// is backed by the giving member more than by the taking one: see
// pickSecondary), then the others: which of an over-full member's
// secondaries goes decides how its primaries fail over later, and a
// newcomer that took the newest secondaries of the members a crash had
// filled backed one zone's primaries half again as much as the others.
func balanceSecondaries(l *replicaLayout, next secondaryTable, live []int, count []int, shares []float64, pairs pairCounts, fresh map[[2]int32]bool, onlyFresh bool) {
	for _, evens := range [2]bool{true, false} {
		balanceSecondariesAs(l, next, live, count, shares, pairs, fresh, onlyFresh, evens)
	}
}

// balanceSecondariesAs is balanceSecondaries; with evens, only the moves
// that even out the pairs.
func balanceSecondariesAs(l *replicaLayout, next secondaryTable, live []int, count []int, shares []float64, pairs pairCounts, fresh map[[2]int32]bool, onlyFresh, evens bool) {
	for moved := true; moved; {
		moved = false
		for s := range next {
			row := next[s]
			for r := len(row) - 1; r >= 0; r-- {
				i := int(row[r])
				if i < 0 || float64(count[i]) <= shares[i] || onlyFresh && !fresh[[2]int32{int32(s), int32(i)}] {
					continue
				}
				rest := slices.Delete(slices.Clone(row), r, r+1)
				n := slices.Index(rest, -1)
				if n < 0 {
					n = len(rest)
				}
				count[i]--
				pairs.add(l.Primary[s], int32(i), -1)
				j := pickSecondary(l, live, rest[:n], int(l.Primary[s]), count, shares, pairs)
				count[i]++
				pairs.add(l.Primary[s], int32(i), 1)
				if j == i || j < 0 || !narrows(l, count, shares, i, j) {
					continue
				}
				if p := l.Primary[s]; evens && pairs[[2]int32{p, int32(i)}] <= pairs[[2]int32{p, int32(j)}]+1 {
					continue
				}
				copy(row[r:], row[r+1:])
				row[n] = int32(j)
				count[i]--
				count[j]++
				pairs.add(l.Primary[s], int32(i), -1)
				pairs.add(l.Primary[s], int32(j), 1)
				delete(fresh, [2]int32{int32(s), int32(i)})
				fresh[[2]int32{int32(s), int32(j)}] = true
				moved = true
			}
		}
	}
}

// narrows reports whether moving one secondary from member i to member j
// lowers Σ (count-share)²/capacity over the members.
func narrows(l *replicaLayout, count []int, shares []float64, i, j int) bool {
	oi := (2*(float64(count[i])-shares[i]) - 1) / l.capacity(i)
	oj := (2*(float64(count[j])-shares[j]) + 1) / l.capacity(j)
	return oi > oj+1e-9
}

// zonesOf counts the distinct zones of slot s's primary and secondaries.
func (l *replicaLayout) zonesOf(s int, row []int32) int {
	zones := map[string]bool{}
	if p := int(l.Primary[s]); l.live(p) {
		zones[l.zone(p)] = true
	}
	for _, x := range row {
		zones[l.zone(int(x))] = true
	}
	return len(zones)
}

// zoneTaken reports whether row[r]'s zone is that of slot s's primary or
// of an earlier secondary.
func (l *replicaLayout) zoneTaken(s int, row []int32, r int) bool {
	z := l.zone(int(row[r]))
	if p := int(l.Primary[s]); l.live(p) && l.zone(p) == z {
		return true
	}
	return slices.ContainsFunc(row[:r], func(x int32) bool { return l.zone(int(x)) == z })
}

// pairCounts counts, per primary and secondary member, the slots whose
// primary is the one and a secondary the other.
type pairCounts map[[2]int32]int

func (c pairCounts) add(p, x int32, d int) {
	if n := c[[2]int32{p, x}] + d; n != 0 {
		c[[2]int32{p, x}] = n
	} else {
		delete(c, [2]int32{p, x})
	}
}

// pickSecondary returns the member to add as a secondary of a slot whose
// primary is p and whose secondaries are row, or -1 when none can be: a
// member in a zone the slot does not use yet, if any; of those, one that
// is a whole secondary below its share, if any (so that no move is needed
// later to balance); of those, the one that is a secondary of the fewest
// of p's slots (pairs), so that when p fails its primaries are promoted
// evenly over the members that can take them (a zone's loss then leaves
// the survivors balanced, and moves no other primary); then the one with
// the most room below its share; then the lowest index.
func pickSecondary(l *replicaLayout, live []int, row []int32, p int, count []int, shares []float64, pairs pairCounts) int {
	used := map[string]bool{}
	if l.live(p) {
		used[l.zone(p)] = true
	}
	for _, x := range row {
		used[l.zone(int(x))] = true
	}
	best := -1
	better := func(i, j int) bool { // is i a better pick than j?
		if j < 0 {
			return true
		}
		if ni, nj := !used[l.zone(i)], !used[l.zone(j)]; ni != nj {
			return ni
		}
		// The member with the most room below its share, relative to it.
		ri := (shares[i] - float64(count[i])) / l.capacity(i)
		rj := (shares[j] - float64(count[j])) / l.capacity(j)
		if fi, fj := shares[i]-float64(count[i]) >= 1, shares[j]-float64(count[j]) >= 1; fi != fj {
			return fi // (below its share by a whole secondary: no move later to balance)
		}
		if pi, pj := pairs[[2]int32{int32(p), int32(i)}], pairs[[2]int32{int32(p), int32(j)}]; pi != pj && l.capacity(i) == l.capacity(j) {
			return pi < pj
		}
		if c := cmp.Compare(ri, rj); c != 0 {
			return c > 0
		}
		return i < j
	}
	for _, i := range live {
		if i == p || slices.Contains(row, int32(i)) {
			continue
		}
		if better(i, best) {
			best = i
		}
	}
	return best
}

// secondaryShares returns each member's share of total secondaries, by
// capacity (0 for indexes no live member holds).
func secondaryShares(l *replicaLayout, live []int, total int) []float64 {
	shares := make([]float64, len(l.Members))
	var sum float64
	for _, i := range live {
		sum += l.capacity(i)
	}
	for _, i := range live {
		shares[i] = float64(total) * l.capacity(i) / sum
	}
	return shares
}
