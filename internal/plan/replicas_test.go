package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// layoutOf returns a layout of n members (index i named m<i>, in zone
// zones[i % len(zones)] if zones are given) with primaries dealt round
// robin over slots.
func layoutOf(k, n, slots int, zones ...string) *replicaLayout {
	l := &replicaLayout{K: k, Primary: make([]int32, slots)}
	for i := range n {
		l.Members = append(l.Members, fmt.Sprintf("m%d", i))
		z := ""
		if len(zones) > 0 {
			z = zones[i%len(zones)]
		}
		l.Zone = append(l.Zone, z)
	}
	for s := range slots {
		l.Primary[s] = int32(s % n)
	}
	return l
}

// checkReplicas fails t unless sec is a valid placement under l: no member
// twice on a slot, every slot filled, as many distinct zones as allowed.
func checkReplicas(t testing.TB, l *replicaLayout, sec secondaryTable) {
	t.Helper()
	live, zones := 0, map[string]bool{}
	for i := range l.Members {
		if l.live(i) {
			live++
			zones[l.zone(i)] = true
		}
	}
	want := 0
	if l.K > 1 && live >= 2 {
		want = min(l.K-1, live-1)
	}
	for s := range l.Primary {
		p := int(l.Primary[s])
		seen := map[int32]bool{l.Primary[s]: true}
		used := map[string]bool{l.zone(p): true}
		n := 0
		for r, x := range sec[s] {
			if x < 0 {
				if slices.ContainsFunc(sec[s][r:], func(y int32) bool { return y >= 0 }) {
					t.Fatalf("slot %d: a gap in its secondaries %v", s, sec[s])
				}
				break
			}
			if !l.live(int(x)) {
				t.Fatalf("slot %d: secondary %d is not live", s, x)
			}
			if seen[x] {
				t.Fatalf("slot %d: member %d holds two replicas (primary %d, secondaries %v)", s, x, p, sec[s])
			}
			seen[x] = true
			used[l.zone(int(x))] = true
			n++
		}
		if n != want {
			t.Fatalf("slot %d: %d secondaries, want %d (%v)", s, n, want, sec[s])
		}
		if l.live(p) && len(used) < min(n+1, len(zones)) {
			t.Fatalf("slot %d: replicas in %d zones, want %d (primary %d, secondaries %v, zones %v)", s, len(used), min(n+1, len(zones)), p, sec[s], l.Zone)
		}
	}
}

// secondaryCounts returns each member's secondaries in sec.
func secondaryCounts(l *replicaLayout, sec secondaryTable) []int {
	c := make([]int, len(l.Members))
	for _, row := range sec {
		for _, x := range row {
			if x >= 0 {
				c[x]++
			}
		}
	}
	return c
}

// movedSecondaries counts the (slot, member) secondary holdings in b that a lacks.
func movedSecondaries(a, b secondaryTable) int {
	n := 0
	for s := range b {
		for _, x := range b[s] {
			if x >= 0 && (s >= len(a) || !slices.Contains(a[s], x)) {
				n++
			}
		}
	}
	return n
}

func TestPlaceSecondaries(t *testing.T) {
	for _, c := range []struct {
		name         string
		k, n, slots  int
		zones        []string
		maxOverShare float64 // most secondaries a member may hold above its share
	}{
		{"one replica", 1, 5, 64, nil, 0},
		{"one member", 3, 1, 64, nil, 0},
		{"two replicas", 2, 5, 1024, nil, 1},
		{"three replicas", 3, 7, 1024, nil, 1},
		{"more replicas than members", 5, 3, 64, nil, 1},
		{"three zones, three each", 2, 9, 1024, []string{"a", "b", "c"}, 1},
		{"two zones, three replicas", 3, 6, 256, []string{"a", "b"}, 1},
		{"three zones, one member short", 3, 8, 256, []string{"a", "b", "c"}, math.Inf(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := layoutOf(c.k, c.n, c.slots, c.zones...)
			sec := placeSecondaries(l, nil)
			checkReplicas(t, l, sec)
			if again := placeSecondaries(l, sec); movedSecondaries(sec, again) != 0 || !slices.EqualFunc(sec, again, slices.Equal) {
				t.Fatalf("placing again moved %d secondaries", movedSecondaries(sec, again))
			}
			total := 0
			for _, x := range secondaryCounts(l, sec) {
				total += x
			}
			live := make([]int, c.n)
			for i := range live {
				live[i] = i
			}
			shares := secondaryShares(l, live, total)
			for i, x := range secondaryCounts(l, sec) {
				if float64(x) > shares[i]+c.maxOverShare {
					t.Errorf("member %d holds %d secondaries, share %.1f", i, x, shares[i])
				}
			}
		})
	}
}

// A departure moves the departed member's secondaries and nothing else,
// and its primaries go to their oldest secondaries.
func TestReplicasDeparture(t *testing.T) {
	l := layoutOf(3, 7, 1024)
	sec := placeSecondaries(l, nil)
	held := secondaryCounts(l, sec)[4]
	var primaries []int
	for s, p := range l.Primary {
		if p == 4 {
			primaries = append(primaries, s)
		}
	}
	oldest := map[int]int32{}
	for _, s := range primaries {
		oldest[s] = sec[s][0]
	}

	l.Members[4] = ""
	next := sec.clone()
	promoted := promote(l, next)
	if !slices.Equal(promoted, primaries) {
		t.Fatalf("promoted %v, want the departed member's primaries %v", promoted, primaries)
	}
	for _, s := range primaries {
		if l.Primary[s] != oldest[s] {
			t.Fatalf("slot %d went to %d, not to its oldest secondary %d", s, l.Primary[s], oldest[s])
		}
	}
	next = placeSecondaries(l, next)
	checkReplicas(t, l, next)
	if got, want := movedSecondaries(sec, next), held+len(primaries); got != want {
		t.Fatalf("%d secondaries moved; want the departed member's %d and one for each of its %d promoted primaries", got, held, len(primaries))
	}
}

// A newcomer takes its share of the secondaries from the members above
// theirs, and no more moves.
func TestReplicasJoin(t *testing.T) {
	l := layoutOf(2, 6, 1024)
	sec := placeSecondaries(l, nil)
	l.Members = append(l.Members, "m6")
	l.Zone = append(l.Zone, "")
	next := placeSecondaries(l, sec)
	checkReplicas(t, l, next)
	got := secondaryCounts(l, next)[6]
	if share := 1024.0 / 7; float64(got) < math.Floor(share)-1 {
		t.Fatalf("the newcomer holds %d secondaries, share %.1f", got, share)
	}
	if moved := movedSecondaries(sec, next); moved != got {
		t.Fatalf("%d secondaries moved; the newcomer took %d", moved, got)
	}
}

// Losing a zone moves only what its members held, and every primary it
// held goes to a secondary in another zone.
func TestReplicasZoneLoss(t *testing.T) {
	l := layoutOf(2, 9, 1024, "a", "b", "c")
	sec := placeSecondaries(l, nil)
	lost := 0
	var primaries []int
	for i := range l.Members {
		if l.Zone[i] == "c" {
			lost += secondaryCounts(l, sec)[i]
			for s, p := range l.Primary {
				if int(p) == i {
					primaries = append(primaries, s)
				}
			}
			l.Members[i] = ""
		}
	}
	next := sec.clone()
	promoted := promote(l, next)
	slices.Sort(primaries)
	if !slices.Equal(promoted, primaries) {
		t.Fatalf("promoted %d slots, want the lost zone's %d primaries", len(promoted), len(primaries))
	}
	for _, s := range promoted {
		if z := l.Zone[l.Primary[s]]; z == "c" {
			t.Fatalf("slot %d promoted within the lost zone", s)
		}
	}
	next = placeSecondaries(l, next)
	checkReplicas(t, l, next)
	if got, want := movedSecondaries(sec, next), lost+len(primaries); got != want {
		t.Fatalf("%d secondaries moved, want %d (the lost zone's) + %d (promoted primaries')", got, lost, len(primaries))
	}
}

// FuzzPlaceSecondaries places secondaries for random layouts and earlier
// tables, including invalid entries, and checks the rules of
// placeSecondaries, and that placing again changes nothing.
func FuzzPlaceSecondaries(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(5), uint8(3))
	f.Add(uint64(7), uint8(3), uint8(9), uint8(3))
	f.Add(uint64(9), uint8(4), uint8(3), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, k, n, nz uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		K, N := 1+int(k%5), 1+int(n%12)
		slots := 1 + rng.IntN(96)
		var zones []string
		for z := range int(nz % 5) {
			zones = append(zones, string(rune('a'+z)))
		}
		l := &replicaLayout{K: K, Primary: make([]int32, slots)}
		for i := range N {
			name := fmt.Sprintf("m%d", i)
			if rng.IntN(6) == 0 {
				name = "" // vacated
			}
			l.Members = append(l.Members, name)
			z := ""
			if len(zones) > 0 {
				z = zones[rng.IntN(len(zones))]
			}
			l.Zone = append(l.Zone, z)
			l.Capacity = append(l.Capacity, float64(1+rng.IntN(3)))
		}
		for s := range l.Primary {
			l.Primary[s] = int32(rng.IntN(N+2) - 1) // -1 and N: out of range
		}
		prev := newSecondaryTable(slots, 1+rng.IntN(6))
		for _, row := range prev {
			for r := range row {
				row[r] = int32(rng.IntN(N+2) - 1)
			}
		}
		promote(l, prev)
		// The primary planner gives every slot a live primary when one lives.
		var live []int32
		for i := range l.Members {
			if l.live(i) {
				live = append(live, int32(i))
			}
		}
		for s, p := range l.Primary {
			if !l.live(int(p)) && len(live) > 0 {
				l.Primary[s] = live[rng.IntN(len(live))]
			}
		}
		// No zones, equal capacities and primaries dealt evenly (as plan
		// deals them): the secondaries are balanced too.
		plain := len(zones) == 0 && seed%2 == 0
		if plain {
			clear(l.Capacity)
			for s := range l.Primary {
				if len(live) > 0 {
					l.Primary[s] = live[s%len(live)]
				}
			}
		}
		sec := placeSecondaries(l, prev)
		checkReplicas(t, l, sec)
		if plain && len(live) > 1 {
			got, total := secondaryCounts(l, sec), 0
			for _, x := range got {
				total += x
			}
			idx := make([]int, len(live))
			for i, x := range live {
				idx[i] = int(x)
			}
			shares := secondaryShares(l, idx, total)
			for _, i := range idx {
				if float64(got[i]) > math.Ceil(shares[i])+1 {
					t.Fatalf("member %d holds %d secondaries, share %.2f (counts %v)", i, got[i], shares[i], got)
				}
			}
		}
		if again := placeSecondaries(l, sec); !slices.EqualFunc(sec, again, slices.Equal) {
			for s := range sec {
				if !slices.Equal(sec[s], again[s]) {
					t.Logf("slot %d primary %d (zone %q): %v -> %v", s, l.Primary[s], l.zone(int(l.Primary[s])), sec[s], again[s])
				}
			}
			t.Logf("members %q zones %q caps %v counts %v -> %v", l.Members, l.Zone, l.Capacity, secondaryCounts(l, sec), secondaryCounts(l, again))
			t.Fatalf("placing again changed %d secondaries", movedSecondaries(sec, again))
		}
	})
}

// planReplicated plans a first map of members names (zones by index, if
// given) with k replicas per slot over slots slots.
func planReplicated(k, slots int, names []string, zones map[string]string) wire.Map {
	cur := wire.Map{Schema: wire.SchemaReplicas, Slots: slots}
	ready := map[string]bool{}
	for _, n := range names {
		ready[n] = true
	}
	next := PlanMap(cur, Input{Live: names, Ready: ready, Replicas: k, Zones: zones})
	next.Schema, next.Version = wire.SchemaReplicas, 1
	return next
}

// checkPlanned fails t unless m is a valid map of k replicas per slot: it
// validates, every slot's replicas name min(k, members) distinct members,
// in as many distinct zones as the members' zones allow.
func checkPlanned(t testing.TB, m wire.Map, k int, zones map[string]string) {
	t.Helper()
	if err := m.UsableBy(wire.Geometry{Slots: m.Slots, Replicas: k}); err != nil {
		t.Fatalf("planned map unusable: %v", err)
	}
	distinct := map[string]bool{}
	for _, name := range m.Members {
		distinct[zones[name]] = true
	}
	for s := range m.Slots {
		names := m.ReplicaNames(s)
		if len(names) != min(k, len(m.Members)) {
			t.Fatalf("slot %d: replicas %v, want %d", s, names, min(k, len(m.Members)))
		}
		used := map[string]bool{}
		for _, n := range names {
			used[zones[n]] = true
		}
		if len(used) < min(len(names), len(distinct)) {
			t.Fatalf("slot %d: replicas %v in %d zones, want %d", s, names, len(used), min(len(names), len(distinct)))
		}
	}
}

// planMap: a crash promotes each of the crashed member's primaries to the
// slot's oldest live secondary (balanced by load, nothing else moves; by
// count, the members it left above their share give primaries to the
// members below theirs that hold them as secondaries first); a graceful
// departure with a waiting member hands its index and every replica to
// it; without one it promotes; a join takes its share and nothing else;
// planning again what planMap returned changes nothing.
func TestPlanMap(t *testing.T) {
	const S = 240
	names := []string{"a", "b", "c", "d", "e", "f"}
	zones := map[string]string{"a": "z1", "b": "z2", "c": "z3", "d": "z1", "e": "z2", "f": "z3", "g": "z3"} // (g takes c's place: the same zone)
	for _, k := range []int{2, 3} {
		for _, byLoad := range []bool{false, true} {
			name := fmt.Sprintf("k=%d byLoad=%v", k, byLoad)
			cur := planReplicated(k, S, names, zones)
			cur.ByLoad = byLoad
			checkPlanned(t, cur, k, zones)
			input := func(live []string, handed ...string) Input {
				in := Input{Live: live, Replicas: k, Zones: zones, ByLoad: byLoad, Ready: map[string]bool{}}
				for _, h := range handed {
					if in.Handed == nil {
						in.Handed = map[string]bool{}
					}
					in.Handed[h] = true
				}
				return in
			}
			again := PlanMap(cur, input(names))
			if !again.SameAssignment(cur) {
				t.Fatalf("%s: planning again changed the map", name)
			}
			without := func(gone string) []string {
				return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == gone })
			}
			warm := func(next wire.Map, what string) {
				t.Helper()
				for s := range S {
					was, now := cur.Owner(s), next.Owner(s)
					if was == "c" && now != cur.ReplicaNames(s)[1] && (byLoad || !slices.Contains(cur.ReplicaNames(s)[1:], now)) {
						// (By count, a member the promotions left above its
						// share may pass one on to a younger secondary.)
						t.Fatalf("%s %s: slot %d went to %s, not to its oldest secondary (replicas were %v)", name, what, s, now, cur.ReplicaNames(s))
					}
					if was != now && !slices.Contains(cur.ReplicaNames(s), now) {
						t.Fatalf("%s %s: slot %d moved cold from %s to %s (replicas were %v)", name, what, s, was, now, cur.ReplicaNames(s))
					}
					if byLoad && was != "c" && was != now {
						t.Fatalf("%s %s: slot %d moved from %s to %s", name, what, s, was, now)
					}
				}
			}

			// A crash of c: its primaries go to their oldest secondary.
			next := PlanMap(cur, input(without("c")))
			checkPlanned(t, next, k, zones)
			warm(next, "crash")
			if again := PlanMap(next, input(without("c"))); !again.SameAssignment(next) {
				t.Fatalf("%s crash: planning again changed the map", name)
			}

			// A graceful departure of c with g waiting: g takes c's index
			// and every replica c held, nothing else moves.
			next = PlanMap(cur, input(append(without("c"), "g"), "c"))
			checkPlanned(t, next, k, zones)
			if next.Index("g") != cur.Index("c") {
				t.Fatalf("%s rolling: g at index %d, c was at %d", name, next.Index("g"), cur.Index("c"))
			}
			for v := range cur.Table {
				want := cur.Owner(v)
				if want == "c" {
					want = "g"
				}
				if next.Owner(v) != want {
					t.Fatalf("%s rolling: entry %d is %s, want %s", name, v, next.Owner(v), want)
				}
			}

			// A graceful departure with nobody waiting promotes.
			next = PlanMap(cur, input(without("c"), "c"))
			checkPlanned(t, next, k, zones)
			warm(next, "leave")

			// A join: the newcomer takes its share of primaries, and moves
			// no primary between others.
			in := input(append(slices.Clone(names), "g"))
			in.Ready["g"] = true
			next = PlanMap(cur, in)
			checkPlanned(t, next, k, zones)
			for s := range S {
				if next.Owner(s) != cur.Owner(s) && next.Owner(s) != "g" {
					t.Fatalf("%s join: slot %d moved from %s to %s", name, s, cur.Owner(s), next.Owner(s))
				}
			}
			if n := countOwned(next, "g"); !byLoad && (n < S/7 || n > S/7+1) || byLoad && n == 0 {
				t.Fatalf("%s join: newcomer owns %d primaries, want about %d", name, n, S/7)
			}
		}
	}
}

// countOwned counts the primaries of name in m.
func countOwned(m wire.Map, name string) int {
	n := 0
	for s := range m.Slots {
		if m.Owner(s) == name {
			n++
		}
	}
	return n
}

// TestPlanMapZoneLoss: losing a zone moves only what its members held, and
// each of their primaries goes to a secondary in another zone.
func TestPlanMapZoneLoss(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	zones := map[string]string{}
	for i, n := range names {
		zones[n] = fmt.Sprint("z", i%3)
	}
	for _, byLoad := range []bool{false, true} {
		cur := planReplicated(2, 1024, names, zones)
		cur.ByLoad = byLoad
		checkPlanned(t, cur, 2, zones)
		var live []string
		for _, n := range names {
			if zones[n] != "z0" {
				live = append(live, n)
			}
		}
		next := PlanMap(cur, Input{Live: live, Replicas: 2, Zones: zones, ByLoad: byLoad})
		checkPlanned(t, next, 2, zones)
		others := 0
		for s := range cur.Slots {
			was, now := cur.Owner(s), next.Owner(s)
			if zones[was] != "z0" {
				if now != was {
					others++
					if !slices.Contains(cur.ReplicaNames(s), now) {
						t.Fatalf("byLoad=%v slot %d: moved cold from %s to %s", byLoad, s, was, now)
					}
				}
				continue
			}
			if sec := cur.ReplicaNames(s)[1]; now != sec || zones[sec] == "z0" {
				t.Fatalf("byLoad=%v slot %d: the lost zone's primary went to %s, not to its secondary %s in another zone", byLoad, s, now, sec)
			}
		}
		if others > 0 {
			// (Secondaries spread evenly over the members that can take a
			// member's primaries (pickSecondary): the survivors' shares
			// come out even, and nothing else moves, by load or by count.)
			t.Fatalf("byLoad=%v: %d primaries of live zones moved", byLoad, others)
		}
	}
}

// FuzzPlanMap plans random histories of joins, crashes, graceful leaves
// and zones with 1 to 4 replicas: every map is valid with distinct
// replicas in as many zones as allowed, a crash moves only the primaries
// of the crashed, and planning again changes nothing.
func FuzzPlanMap(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(9))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		rng := rand.New(rand.NewPCG(s1, s2))
		k := 1 + rng.IntN(4)
		S := 1 + rng.IntN(64)
		zones := map[string]string{}
		nz := rng.IntN(4)
		var live []string
		cur := wire.Map{Schema: wire.SchemaReplicas, Slots: S, Version: 1}
		next := 0
		for step := 0; step < 30; step++ {
			switch r := rng.IntN(10); {
			case r < 4 || len(live) == 0:
				name := fmt.Sprint("m", next)
				next++
				live = append(live, name)
				if nz > 0 {
					zones[name] = fmt.Sprint("z", rng.IntN(nz))
				}
			default:
				i := rng.IntN(len(live))
				live = slices.Delete(live, i, i+1)
			}
			handed := map[string]bool{}
			for _, n := range cur.Members {
				if !slices.Contains(live, n) && rng.IntN(2) == 0 {
					handed[n] = true
				}
			}
			ready := map[string]bool{}
			for _, n := range live {
				ready[n] = rng.IntN(3) > 0
			}
			in := Input{Live: live, Ready: ready, Replicas: k, Zones: zones, Handed: handed}
			m := PlanMap(cur, in)
			m.Schema, m.Version = wire.SchemaReplicas, cur.Version+1
			if k == 1 {
				m.Schema = wire.SchemaVersion
			}
			if len(m.Members) > 0 {
				checkPlanned(t, m, k, zones)
			}
			// A crashed member's primary goes to its oldest live
			// secondary, which keeps it.
			if len(handed) == 0 && len(m.Members) == len(live) && len(cur.Members) > 0 && k > 1 {
				for s := range S {
					o := cur.Owner(s)
					if slices.Contains(live, o) {
						continue
					}
					for _, sec := range cur.ReplicaNames(s)[1:] {
						if slices.Contains(live, sec) {
							if m.Owner(s) != sec {
								t.Fatalf("slot %d: crashed %s's primary went to %s, not its oldest live secondary %s", s, o, m.Owner(s), sec)
							}
							break
						}
					}
				}
			}
			again := in
			again.Handed = nil
			stable := PlanMap(m, again)
			if len(m.Members) > 0 && !stable.SameAssignment(m) {
				t.Fatalf("planning again moved: %v -> %v", m.Table, stable.Table)
			}
			cur = m
		}
	})
}

// TestPlanMapCrashKeepsOtherSecondaries: a crash moves no secondary of a
// slot the crashed member did not hold; so when a zone's members' leases
// end one by one (a map each), every primary of the zone is promoted to a
// secondary that held it before the zone was lost.
func TestPlanMapCrashKeepsOtherSecondaries(t *testing.T) {
	for _, c := range []struct{ members, slots int }{{6, 64}, {9, 1024}, {6, 1024}} {
		var names []string
		zones := map[string]string{}
		for i := range c.members {
			n := fmt.Sprint("m", i)
			names = append(names, n)
			zones[n] = fmt.Sprint("z", i%3)
		}
		cur := planReplicated(2, c.slots, names, zones)
		live := slices.Clone(names)
		maps := []wire.Map{cur}
		for _, gone := range names {
			if zones[gone] != "z2" {
				continue
			}
			live = slices.DeleteFunc(live, func(n string) bool { return n == gone })
			prev := maps[len(maps)-1]
			next := PlanMap(prev, Input{Live: live, Replicas: 2, Zones: zones, ByLoad: true})
			checkPlanned(t, next, 2, zones)
			for s := range c.slots {
				if slices.Contains(prev.ReplicaNames(s), gone) {
					continue
				}
				if !slices.Equal(prev.ReplicaNames(s), next.ReplicaNames(s)) {
					t.Errorf("%d members, %d slots: %s's crash moved slot %d's replicas %v -> %v", c.members, c.slots, gone, s, prev.ReplicaNames(s), next.ReplicaNames(s))
				}
			}
			maps = append(maps, next)
		}
		last := maps[len(maps)-1]
		for s := range c.slots {
			if zones[cur.Owner(s)] == "z2" && !slices.Contains(cur.ReplicaNames(s), last.Owner(s)) {
				t.Errorf("%d members, %d slots: slot %d went cold to %s (replicas were %v)", c.members, c.slots, s, last.Owner(s), cur.ReplicaNames(s))
			}
		}
	}
}

// TestPlanMapStaggeredZoneLoss: a zone's members crash at once, and their
// leases end one by one, each a map; the leader holds the replicas for a
// TTL after each crash (planInput.Hold): every primary of the zone goes to
// a secondary that held it before the loss. (Balancing between the two
// maps moved primaries onto the zone's other member, about to go, and
// warm secondaries off the slots whose primaries it held: they were
// promoted cold.) By count and by load, after an earlier crash and its
// balance.
func TestPlanMapStaggeredZoneLoss(t *testing.T) {
	for _, byLoad := range []bool{false, true} {
		var names []string
		zones := map[string]string{}
		for i := range 6 {
			n := fmt.Sprint("m", i)
			names = append(names, n)
			zones[n] = fmt.Sprint("z", i%3)
		}
		cur := planReplicated(2, 64, names, zones)
		cur.ByLoad = byLoad
		live := slices.Clone(names)
		drop := func(g string) { live = slices.DeleteFunc(live, func(n string) bool { return n == g }) }
		step := func(m wire.Map, hold bool) wire.Map {
			n := PlanMap(m, Input{Live: live, Replicas: 2, Zones: zones, Hold: hold, ByLoad: byLoad})
			n.Version = m.Version + 1
			checkPlanned(t, n, 2, zones)
			return n
		}
		drop("m0")
		held := step(cur, true)
		before := step(held, false) // (a TTL later: balanced)
		if again := step(before, false); !again.SameAssignment(before) {
			t.Fatalf("byLoad=%v: planning again moved", byLoad)
		}
		drop("m2")
		first := step(before, true)
		drop("m5")
		last := step(first, true)
		for s := range 64 {
			if zones[before.Owner(s)] == "z2" && !slices.Contains(before.ReplicaNames(s), last.Owner(s)) {
				t.Errorf("byLoad=%v slot %d: cold, %v -> %v -> %v", byLoad, s, before.ReplicaNames(s), first.ReplicaNames(s), last.ReplicaNames(s))
			}
		}
	}
}

// TestOneReplicaEncodesAsBefore: with one replica and no zone, the map,
// the change record and the member key are what b696319 (the release
// before replicas) wrote, byte for byte. The strings were printed by that
// release's encoders from the same maps.
func TestOneReplicaEncodesAsBefore(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	in := Input{Live: []string{"a", "b", "c"}, Ready: map[string]bool{"a": true, "b": true, "c": true}, Since: map[string]time.Time{}, Replicas: 1}
	prev := PlanMap(wire.Map{Schema: wire.SchemaVersion, Slots: 16}, in)
	prev.Version, prev.Leader = 1, "a"
	in2 := Input{Live: []string{"a", "c", "d", "e"}, Ready: map[string]bool{"d": true}, Since: map[string]time.Time{"e": t0}, Replicas: 1}
	next := PlanMap(prev, in2)
	next.Version = 2
	c := wire.Diff(&prev, &next)
	c.Transition = wire.Transition{From: 1, View: 77}
	for _, x := range []struct{ name, got, want string }{
		{"map", string(prev.Encode()), `{"schema":3,"version":1,"slots":16,"leader":"a","members":["a","b","c"],"table":[0,0,0,0,0,0,1,1,1,1,1,2,2,2,2,2]}`},
		{"next map", string(next.Encode()), `{"schema":3,"version":2,"slots":16,"leader":"a","members":["a","d","c"],"waiting":[{"name":"e","since":"2026-11-27T00:00:00Z"}],"table":[0,0,0,0,0,0,1,1,1,1,1,2,2,2,2,2]}`},
		{"record", string(c.Encode()), `{"schema":3,"change":true,"version":2,"names":{"1":"d"},"wait":[{"name":"e","since":"2026-11-27T00:00:00Z"}],"view":77,"from":1}`},
		{"member key", wire.MemberValueOf(1, "", false, 1), `{"protocols":[2,3]}`},
		{"member key, capacity, leaving", wire.MemberValueOf(2.5, "", true, 1), `{"protocols":[2,3],"capacity":2.5,"leaving":true}`},
	} {
		if x.got != x.want {
			t.Errorf("%s:\n got %s\nwant %s", x.name, x.got, x.want)
		}
	}
}

// promote hands every slot whose primary is gone (not a live index of
// the layout) to its oldest live secondary, which leaves the slot's
// secondaries; the secondaries after it move up. It returns the slots it
// promoted. A test helper: PlanMap promotes by name, with a loop of its
// own (the mutant replicas-promote-newest).
func promote(l *replicaLayout, sec secondaryTable) (promoted []int) {
	for s, p := range l.Primary {
		if l.live(int(p)) || s >= len(sec) {
			continue
		}
		row := sec[s]
		for r, x := range row {
			if !l.live(int(x)) {
				continue
			}
			l.Primary[s] = x
			copy(row[r:], row[r+1:])
			row[len(row)-1] = -1
			promoted = append(promoted, s)
			break
		}
	}
	return promoted
}

// TestPlanMapByLoadCrashHeirStaysCold: by load, a crashed member's
// primaries go to their secondaries, and the waiting member that takes
// the crashed member's index takes none of them while the leader holds
// the replicas (Hold, a TTL after a crash). Filling the heir's share at
// once, by load, moved promoted slots to it cold in the same map (the
// simulator's warm-promotion check, once its members ran their load
// reporter as production's do: seed 2 with -replicas 2 -zones 3).
func TestPlanMapByLoadCrashHeirStaysCold(t *testing.T) {
	names := []string{"m0", "m1", "m2", "m3"}
	cur := planReplicated(2, 16, names, nil)
	load := make([]float64, 16)
	for s := range load {
		load[s] = 1
	}
	cur.ByLoad = true
	live := []string{"m0", "m2", "m3", "m9"}
	for _, hold := range []bool{true, false} {
		next := PlanMap(cur, Input{Live: live, Ready: map[string]bool{"m9": true}, Replicas: 2, ByLoad: true, Load: load, Hold: hold})
		checkPlanned(t, next, 2, nil)
		for s := range 16 {
			if cur.Owner(s) != "m1" {
				continue
			}
			if secs := cur.ReplicaNames(s)[1:]; !slices.Contains(secs, next.Owner(s)) && hold {
				t.Errorf("hold: slot %d of m1 (crashed) goes to %s, not to its secondary %v", s, next.Owner(s), secs)
			}
		}
		n := 0
		for s := range 16 {
			if next.Owner(s) == "m9" {
				n++
			}
		}
		if hold && n != 0 || !hold && n == 0 {
			t.Errorf("hold %v: the heir m9 owns %d slots", hold, n)
		}
	}
}
