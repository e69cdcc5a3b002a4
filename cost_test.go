package rink

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cost guards, counted rather than timed, so that they fail on any
// machine: what a member spends on one watch event must not grow with the
// rink. A clone of the whole member view per batch (for ghosts) made a join
// at 1,000 members six times slower, and no test noticed (issues 22, 25).

// eventBytes returns the bytes a member with n others in its view
// allocates, on average, to fold in one watch batch that changes one
// member key, as an ordinary join or leave elsewhere does.
func eventBytes(t *testing.T, n int) float64 {
	b := newBare(t, "self", 64, 1)
	k := newKeys("bare")
	var evs []*clientv3.Event
	for i := 0; i < n; i++ {
		rev := int64(10 + i)
		evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{
			Key: []byte(k.Member(fmt.Sprintf("member-%05d", i))), Value: []byte(`{"protocols":[2]}`), CreateRevision: rev, ModRevision: rev, Lease: rev}})
	}
	rev := int64(10 + n)
	b.r.onWatch(watchBatch{wide: true, events: evs, rev: rev})
	const rounds = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < rounds; i++ {
		// A member joins and leaves, outside the map: one put, one delete.
		rev++
		kv := &mvccpb.KeyValue{Key: []byte(k.Member("newcomer")), Value: []byte(`{"protocols":[2]}`), CreateRevision: rev, ModRevision: rev, Lease: rev}
		b.r.onWatch(watchBatch{wide: true, events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}}, rev: rev})
		rev++
		del := &mvccpb.KeyValue{Key: kv.Key, ModRevision: rev}
		b.r.onWatch(watchBatch{wide: true, events: []*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: del}}, rev: rev})
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / (2 * rounds)
}

// TestWatchEventCostFlat: a watch event about one member costs a member
// the same bytes in a rink of 2,000 as in one of 50 (836 bytes in both; at
// d85b50e 6,980 against 426,587, from cloning the view).
func TestWatchEventCostFlat(t *testing.T) {
	small, large := eventBytes(t, 50), eventBytes(t, 2000)
	t.Logf("bytes allocated per watch event: %.0f with 50 members, %.0f with 2,000", small, large)
	if large > 1.5*small+512 {
		t.Fatalf("a watch event costs %.0f bytes with 2,000 members, %.0f with 50: it grows with the rink", large, small)
	}
}

// recordBytes returns the bytes a member that does not lead allocates, on
// average, to apply one change record that moves one slot between two
// other members, in a rink of n members on S slots.
func recordBytes(t *testing.T, n, S int) float64 {
	return changeBytes(t, n, S, func(m wire.Map, i int) wire.Map {
		next := m
		next.Table = slices.Clone(m.Table)
		s := 1 + i%(S-1)
		if s%n == 0 {
			s++ // (not one of ours)
		}
		next.Table[s] = 1 + next.Table[s]%int32(n-1)
		return next
	})
}

// departureBytes is recordBytes for records of departures: another member
// leaves, the highest index takes its place, and its slots go to the
// member after it (a waiting member joins at the end first, so that the
// rink keeps its size).
func departureBytes(t *testing.T, n, S int) float64 {
	return changeBytes(t, n, S, func(m wire.Map, i int) wire.Map {
		next := m
		next.Table = slices.Clone(m.Table)
		next.Members = slices.Clone(m.Members)
		if i%2 == 1 {
			next.Members = append(next.Members, fmt.Sprintf("joiner-%05d", i))
			return next
		}
		gone := int32(1 + i%(n-2))
		return departure(next, gone, gone+1)
	})
}

// departure returns m (whose table and members the caller owns) without
// the member at index gone: its slots go to the member at index heir, and
// the highest index takes its place.
func departure(m wire.Map, gone, heir int32) wire.Map {
	last := int32(len(m.Members) - 1)
	for s, o := range m.Table {
		switch o {
		case gone:
			m.Table[s] = heir
		case last:
			m.Table[s] = gone
		}
	}
	m.Members[gone] = m.Members[last]
	m.Members = m.Members[:last]
	return m
}

// recordBase is the revision of the map key's creation in narrowWithMap.
const recordBase = 10

// narrowWithMap returns member "self" of the narrow view, having applied
// a map of n members on S slots (self at index 0, slot s at index s mod n),
// and that map.
func narrowWithMap(t *testing.T, n, S int) (*bare, wire.Map) {
	b := newBare(t, "self", S, 5)
	b.narrowView()
	b.put(memberKV("self", 5, 5, 0, 0))
	m := wire.Map{Schema: wire.SchemaVersion, Version: 1, Slots: S, Members: make([]string, n), Table: make(wire.SlotTable, S)}
	for i := range m.Members {
		m.Members[i] = fmt.Sprintf("member-%05d", i)
	}
	m.Members[0] = "self"
	for s := range m.Table {
		m.Table[s] = int32(s % n)
	}
	b.r.onWatch(watchBatch{snapshot: true, kvs: []*mvccpb.KeyValue{mapKV(m, recordBase, recordBase)}, rev: recordBase})
	return b, m
}

// recordBatch is the watch batch of next put as the change record that
// follows m, with transition tr; next takes the version after m's.
func recordBatch(m wire.Map, next *wire.Map, tr wire.Transition) watchBatch {
	next.Version = m.Version + 1
	c := wire.Diff(&m, next)
	c.Transition = tr
	kv := mapKV(*next, recordBase, recordBase+next.Version)
	kv.Value = c.Encode()
	return watchBatch{events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}}, rev: recordBase + next.Version}
}

// changeBytes returns the bytes a member that does not lead allocates, on
// average, to apply the change records of the maps step makes, in a rink
// of n members on S slots.
func changeBytes(t *testing.T, n, S int, step func(m wire.Map, i int) wire.Map) float64 {
	b, m := narrowWithMap(t, n, S)
	const rounds = 50
	var total uint64
	for i := 1; i <= rounds; i++ {
		next := step(m, i)
		batch := recordBatch(m, &next, wire.Transition{})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.r.onWatch(batch)
		runtime.ReadMemStats(&after)
		total += after.TotalAlloc - before.TotalAlloc
		if b.r.st.cur.Version != next.Version {
			t.Fatalf("version %d not applied", next.Version)
		}
		if got := b.r.ownersNow(); !slices.Equal(got.Members, next.Members) || !slices.Equal(got.Table, next.Table) {
			t.Fatalf("version %d applied as another map", next.Version)
		}
		m = next
	}
	return float64(total) / rounds
}

// TestRecordCostFlat: a record that moves one slot between two other
// members costs a member about the same bytes with 16,384 slots and 2,000
// members as with 1,024 slots and 50: it must not copy the slot table (at
// 8731f83 each record cloned it: 131 KiB per member per change at 16,384
// slots, 1.3 GB per change over a rink of 10,000).
func TestRecordCostFlat(t *testing.T) {
	small, large := recordBytes(t, 50, 1024), recordBytes(t, 2000, 16384)
	t.Logf("bytes allocated per record: %.0f with 50 members on 1,024 slots, %.0f with 2,000 on 16,384", small, large)
	if large > 1.5*small+1024 {
		t.Fatalf("a record costs %.0f bytes with 2,000 members on 16,384 slots, %.0f with 50 on 1,024: it grows with the rink", large, small)
	}
}

// TestDepartureCostFlat: so does a departure, which renames an index (the
// highest moves into the gap) and drops one (at 07f5a41 every member copied
// the member list and the table, and went over every slot three times:
// 3.5 s of CPU for one leave at 5,000 members).
func TestDepartureCostFlat(t *testing.T) {
	small, large := departureBytes(t, 50, 1024), departureBytes(t, 2000, 16384)
	t.Logf("bytes allocated per join or departure: %.0f with 50 members on 1,024 slots, %.0f with 2,000 on 16,384", small, large)
	if large > 1.5*small+1024 {
		t.Fatalf("a departure costs %.0f bytes with 2,000 members on 16,384 slots, %.0f with 50 on 1,024: it grows with the rink", large, small)
	}
}

// noteGone follows records at the cost of what they changed, and keeps
// what a pass over every member would: a departure is recorded, and a
// name that comes back (appended, or at a renamed index) is dropped.
func TestNoteGoneByRecords(t *testing.T) {
	b, m := narrowWithMap(t, 40, 256)
	put := func(next wire.Map, gone ...string) {
		t.Helper()
		b.r.onWatch(recordBatch(m, &next, wire.Transition{From: m.Version, Gone: gone}))
		if b.r.st.cur.Version != next.Version {
			t.Fatalf("version %d not applied", next.Version)
		}
		m = next
	}
	depart := func(gone int32) wire.Map {
		next := m
		next.Table, next.Members = slices.Clone(m.Table), slices.Clone(m.Members)
		return departure(next, gone, 0)
	}
	gone := func() []string { return slices.Sorted(maps.Keys(b.r.st.view.goneAt)) }
	// Five leave, one at a time: each is recorded.
	for i := range 5 {
		name := m.Members[3]
		put(depart(3), name)
		if g := gone(); len(g) != i+1 || !slices.Contains(g, name) {
			t.Fatalf("after %s left: gone %v", name, g)
		}
	}
	left := gone()
	// One comes back at the end, another into a renamed index.
	next := m
	next.Members = append(slices.Clone(m.Members), left[0])
	put(next)
	next = depart(5)
	next.Members = slices.Clone(next.Members)
	next.Members[5] = left[1] // (the last member leaves the ranks, and left[1] takes its index)
	put(next, m.Members[5])
	if g := gone(); slices.Contains(g, left[0]) || slices.Contains(g, left[1]) || !slices.Contains(g, left[2]) {
		t.Fatalf("after %s and %s came back: gone %v", left[0], left[1], g)
	}
	// A transition that says gone a member the record still ranks (at an
	// index it did not touch, or one it placed it at) says nothing of it.
	kept, moved := m.Members[1], m.Members[7]
	next = depart(7)
	next.Members = slices.Clone(next.Members)
	next.Members = append(next.Members, moved) // (7 renamed away, and moved appended)
	put(next, kept, moved)
	if g := gone(); slices.Contains(g, kept) || slices.Contains(g, moved) {
		t.Fatalf("%s and %s, still ranked, recorded as gone: %v", kept, moved, g)
	}
}

// TestRecordLeasesFollowTheChange: what a change record says of leases
// (issue 42) costs what the change changed, whatever the rink's size: a
// join names the newcomer's lease alone, a departure whose heir takes the
// leaver's index the heir's alone, a map that moves slots between members
// none.
func TestRecordLeasesFollowTheChange(t *testing.T) {
	for _, n := range []int{8, 1000, 10000} {
		prev := wire.Map{Schema: wire.SchemaVersion, Version: 5, Slots: 1024, Table: make(wire.SlotTable, 1024)}
		for i := range n {
			prev.Members = append(prev.Members, fmt.Sprintf("m%05d", i))
			prev.Leases = append(prev.Leases, 7587879283487342080+int64(i))
		}
		join := prev
		join.Members = append(slices.Clone(prev.Members), "new")
		join.Leases = append(slices.Clone(prev.Leases), 42)
		leave := prev
		leave.Members, leave.Leases = slices.Clone(prev.Members), slices.Clone(prev.Leases)
		leave.Members[1], leave.Leases[1] = "heir", 43
		moved := prev
		moved.Table = slices.Clone(prev.Table)
		moved.Table[7] = 1
		for _, c := range []struct {
			what string
			next wire.Map
			want map[string]int64
		}{{"join", join, map[string]int64{"new": 42}}, {"leave", leave, map[string]int64{"heir": 43}}, {"move", moved, nil}} {
			if got := wire.Diff(&prev, &c.next).Leases; !maps.Equal(got, c.want) {
				t.Errorf("%d members, %s: the record's leases are %v, want %v", n, c.what, got, c.want)
			}
		}
	}
}
