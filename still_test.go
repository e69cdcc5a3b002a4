package rink

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func shapeOf(m *wire.Map) mapShape {
	return mapShape{Members: m.Members, Table: m.Table}
}

// changedBetween and movedFor say the same of every member: the leader
// counts a member as having acknowledged a map exactly when the member
// does not owe an acknowledgement for it.
func TestChangedBetween(t *testing.T) {
	a := wire.Map{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2, 0}}
	b := wire.Map{Members: []string{"a", "c", "d"}, Table: wire.SlotTable{0, 1, 1, 2}, Incoming: map[string][]int{"a": {1}}}
	got := map[string]bool{}
	sa, sb := shapeOf(&a), shapeOf(&b)
	changedBetween(&sa, &sb, func(name string, _ bool) { got[name] = true })
	// slot 1: b -> c; slot 2: c (index 2) -> c (index 1): unchanged;
	// slot 3: a -> d. (Announcements are not slots.)
	want := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changed %v, want %v", got, want)
	}
	c := wire.Map{Members: []string{"c", "a", "d"}, Table: wire.SlotTable{1, 0, 0, 2}, Incoming: map[string][]int{"a": {1}}}
	got = map[string]bool{}
	sc := shapeOf(&c)
	changedBetween(&sb, &sc, func(name string, _ bool) { got[name] = true })
	if len(got) != 0 {
		t.Fatalf("reordered members, same owners: changed %v", got)
	}
	for name, want := range map[string]bool{"a": false, "c": false, "d": false, "b": false} {
		if moved := movedFor(&b, &c, b.Index(name), c.Index(name), nil); moved != want {
			t.Errorf("movedFor(%s) = %v, want %v", name, moved, want)
		}
	}
}

func FuzzChanged(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(7))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		rng := rand.New(rand.NewPCG(s1, s2))
		names := []string{"a", "b", "c", "d", "e"}
		random := func() wire.Map {
			m := wire.Map{}
			for _, n := range names {
				if rng.IntN(3) > 0 {
					m.Members = append(m.Members, n)
				}
			}
			rng.Shuffle(len(m.Members), func(i, j int) { m.Members[i], m.Members[j] = m.Members[j], m.Members[i] })
			if len(m.Members) > 0 {
				m.Table = make(wire.SlotTable, 6)
				for s := range m.Table {
					m.Table[s] = int32(rng.IntN(len(m.Members)))
				}
			}
			for _, n := range names {
				if rng.IntN(4) == 0 {
					m.Incoming = map[string][]int{}
					m.Incoming[n] = []int{rng.IntN(6)}
				}
			}
			return m
		}
		a := random()
		b := a
		if rng.IntN(3) > 0 {
			b = random()
		}
		got := map[string]bool{}
		sa, sb := shapeOf(&a), shapeOf(&b)
		changedBetween(&sa, &sb, func(name string, _ bool) { got[name] = true })
		for _, n := range names {
			if moved := movedFor(&a, &b, a.Index(n), b.Index(n), nil); moved != got[n] {
				t.Fatalf("%s: movedFor %v, changedBetween %v\na %+v\nb %+v", n, moved, got[n], a, b)
			}
			// And from the record that takes a to b (see mapDelta).
			a.Version, b.Version = 1, 2
			c := wire.Diff(&a, &b)
			if moved := movedFor(&a, &b, a.Index(n), b.Index(n), wire.DeltaOf(&a, &c)); moved != got[n] {
				t.Fatalf("%s: movedFor with the record's delta %v, changedBetween %v\na %+v\nb %+v", n, moved, got[n], a, b)
			}
		}
	})
}

// The change log knows the changes of the puts it saw, one after another,
// from its first (base) on; a gap starts it again.
func TestChangeLog(t *testing.T) {
	var c changeLog
	if c.Still("a", 3) != 3 {
		t.Fatal("an empty log raises nothing")
	}
	m1 := mapShape{Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1}}
	m2 := mapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 2}} // b -> c
	m3 := mapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 2}}
	m4 := mapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{1, 2}} // a -> b
	c.See(5, m1)
	c.See(6, m2)
	c.See(7, m3)
	c.See(8, m3)
	c.See(9, m4)
	for _, x := range []struct {
		name        string
		bound, want int64
	}{
		{"a", 5, 8}, // a unchanged until 9
		{"a", 9, 9},
		{"a", 4, 4}, // below the base: unknown
		{"b", 5, 5}, // b lost slot 1 at 6
		{"b", 6, 8}, // and gained slot 0 at 9
		{"b", 9, 9},
		{"c", 6, 9}, // c gained slot 1 at 6: nothing since
		{"c", 5, 5},
		{"c", 0, 0},
		{"a", 10, 10}, // beyond the log
	} {
		if got := c.Still(x.name, x.bound); got != x.want {
			t.Errorf("still(%s, %d) = %d, want %d", x.name, x.bound, got, x.want)
		}
	}
	c.See(11, m3) // a gap: seq 10 unseen
	if c.base != 11 || c.Still("a", 9) != 9 || c.Still("b", 11) != 11 {
		t.Fatalf("after a gap: %+v", c)
	}
	// Only the newest maxChanges changes of a member are kept: a bound
	// before the ones dropped is not raised.
	tables := []wire.SlotTable{{0, 1}, {1, 0}}
	for i := range maxChanges + 2 {
		c.See(12+int64(i), mapShape{Members: []string{"a", "b"}, Table: tables[i%2]})
	}
	if got := c.Still("a", 11); got != 11 {
		t.Errorf("still(a, 11) past dropped changes = %d, want 11", got)
	}
	if got := c.Still("a", c.seq-1); got != c.seq-1 {
		t.Errorf("still(a, %d) = %d: a changed at %d", c.seq-1, got, c.seq)
	}
	if got := c.Still("a", c.seq-2); got != c.seq-2 {
		t.Errorf("still(a, %d) = %d: a changed at %d", c.seq-2, got, c.seq-1)
	}
	if got := c.Still("a", c.seq); got != c.seq {
		t.Errorf("still(a, %d) = %d", c.seq, got)
	}
}

// The floor of a leader that says Still counts members whose slots no map
// since their acknowledgement changed as having acknowledged the newest
// map, in seqs and in versions; the others keep their own.
func TestFloorStill(t *testing.T) {
	k := newKeys("bare")
	v := &ackView{members: map[string]ackMember{}, acks: map[string]ackKey{}, ranked: map[string]bool{}}
	member := func(name string, lease, createRev int64) {
		v.put(k, &mvccpb.KeyValue{Key: []byte(k.Member(name)), Value: []byte(wire.MemberValue(1)), Lease: lease, CreateRevision: createRev, ModRevision: createRev}, false)
	}
	ack := func(name string, lease, seq int64) {
		val, _ := json.Marshal(wire.AckValue{Ack: seq, Lineage: 10, Seq: seq})
		v.put(k, &mvccpb.KeyValue{Key: []byte(k.Ack(name)), Value: val, Lease: lease}, false)
	}
	mapAt := func(seq, rev int64, m wire.Map) {
		m.Version, m.Slots, m.Schema = seq, len(m.Table), wire.SchemaVersion
		v.put(k, &mvccpb.KeyValue{Key: []byte(k.Map()), Value: m.Encode(), CreateRevision: 10, ModRevision: rev, Version: seq}, false)
	}
	member("a", 1, 11)
	member("b", 2, 12)
	member("c", 3, 13)
	mapAt(1, 14, wire.Map{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2}})
	ack("a", 1, 1)
	ack("b", 2, 1)
	ack("c", 3, 1)
	mapAt(2, 20, wire.Map{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2}, Waiting: []wire.Waiter{{Name: "n"}}})
	member("n", 4, 19)
	f := v.compute()
	// (n's acknowledgement is unknown: its bound, the map current when
	// it joined, rises to seq 2 and counts, in seqs and versions, as n is
	// not ranked: a join alone changes no floor.)
	if !f.Still || f.Base != 1 || f.SeqFloor != 2 || f.Floor != 2 || len(f.SeqLagging) != 0 || len(f.Lagging) != 0 {
		t.Fatalf("a map that moves nothing: %+v, want everyone at seq and version 2", f)
	}
	mapAt(3, 30, wire.Map{Members: []string{"a", "b", "c", "n"}, Table: wire.SlotTable{0, 3, 2}}) // b -> n
	f = v.compute()
	// b acknowledged 1 and n joined while map 1 was current: both are
	// raised to 2, the map before the change. (n, ranked now and its
	// acknowledgement unknown, holds the seq floor at 0.)
	want := map[string]int64{"b": 2, "n": 2}
	if f.SeqFloor != 0 || !reflect.DeepEqual(f.SeqLagging, want) || !reflect.DeepEqual(f.Lagging, map[string]int64{"b": 1, "n": 0}) {
		t.Fatalf("b's slot moves to n: %+v, want seq lagging %v", f, want)
	}
	ack("b", 2, 3)
	ack("n", 4, 3)
	if f = v.compute(); f.SeqFloor != 3 || f.Floor != 3 || len(f.SeqLagging) != 0 {
		t.Fatalf("b and n acknowledged: %+v", f)
	}
	// A listing: nothing is known of the changes before it.
	v.put(k, &mvccpb.KeyValue{Key: []byte(k.Map()), Value: (&wire.Map{Schema: wire.SchemaVersion, Version: 3, Slots: 3, Members: []string{"a", "b", "c", "n"}, Table: wire.SlotTable{0, 3, 2}}).Encode(), CreateRevision: 10, ModRevision: 30, Version: 3}, true)
	if f = v.compute(); f.Base != 3 || !reflect.DeepEqual(f.SeqLagging, map[string]int64{"a": 1, "c": 1}) {
		t.Fatalf("after a listing: %+v, want a and c lagging at 1", f)
	}
	if !slices.Contains([]int64{3}, f.Seq) {
		t.Fatal(f.Seq)
	}
}

// The change log lists which member each map took slots from, once per
// map, and knows when it has forgotten some.
func TestChangeLogLosses(t *testing.T) {
	var c changeLog
	if _, ok := c.LossesAfter(0); ok {
		t.Fatal("an empty log knows losses")
	}
	c.See(5, mapShape{Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1, 0, 1}})
	c.See(6, mapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{2, 1, 2, 2}}) // a and b lose to c
	c.See(7, mapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{2, 1, 2, 2}})
	c.See(8, mapShape{Members: []string{"c", "b"}, Table: wire.SlotTable{0, 1, 1, 1}}) // c loses to b
	got, ok := c.LossesAfter(5)
	want := []seqLoss{{6, "a"}, {6, "b"}, {8, "c"}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("losses after 5: %v %v, want %v", got, ok, want)
	}
	if got, ok := c.LossesAfter(6); !ok || !reflect.DeepEqual(got, want[2:]) {
		t.Fatalf("losses after 6: %v %v", got, ok)
	}
	if _, ok := c.LossesAfter(4); ok {
		t.Fatal("losses before the base are known")
	}
	if !c.ChangedAfter("b", 7) || c.ChangedAfter("a", 6) || c.ChangedAfter("b", 4) {
		t.Fatal("changedAfter")
	}
	// Past maxLosses, the oldest half goes.
	tables := []wire.SlotTable{{0, 1, 0, 1}, {1, 0, 1, 0}}
	for i := range maxLosses/2 + 1 {
		c.See(9+int64(i), mapShape{Members: []string{"a", "b"}, Table: tables[i%2]})
	}
	if _, ok := c.LossesAfter(5); ok || c.lossFrom <= 8 {
		t.Fatalf("after %d losses, those after 5 are known (from %d)", len(c.losses), c.lossFrom)
	}
	if got, ok := c.LossesAfter(c.seq - 1); !ok || len(got) != 2 {
		t.Fatalf("the newest map's losses: %v %v", got, ok)
	}
}
