package core

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/rink-go/rink/internal/wire"
)

func shapeOf(m *wire.Map) MapShape {
	return MapShape{Members: m.Members, Table: m.Table}
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
		if moved := MovedFor(&b, &c, b.Index(name), c.Index(name), nil); moved != want {
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
			if moved := MovedFor(&a, &b, a.Index(n), b.Index(n), nil); moved != got[n] {
				t.Fatalf("%s: movedFor %v, changedBetween %v\na %+v\nb %+v", n, moved, got[n], a, b)
			}
			// And from the record that takes a to b (see mapDelta).
			a.Version, b.Version = 1, 2
			c := wire.Diff(&a, &b)
			if moved := MovedFor(&a, &b, a.Index(n), b.Index(n), wire.DeltaOf(&a, &c)); moved != got[n] {
				t.Fatalf("%s: movedFor with the record's delta %v, changedBetween %v\na %+v\nb %+v", n, moved, got[n], a, b)
			}
		}
	})
}

// The change log knows the changes of the puts it saw, one after another,
// from its first (base) on; a gap starts it again.
func TestChangeLog(t *testing.T) {
	var c ChangeLog
	if c.Still("a", 3) != 3 {
		t.Fatal("an empty log raises nothing")
	}
	m1 := MapShape{Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1}}
	m2 := MapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 2}} // b -> c
	m3 := MapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 2}}
	m4 := MapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{1, 2}} // a -> b
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
	if c.Base != 11 || c.Still("a", 9) != 9 || c.Still("b", 11) != 11 {
		t.Fatalf("after a gap: %+v", c)
	}
	// Only the newest maxChanges changes of a member are kept: a bound
	// before the ones dropped is not raised.
	tables := []wire.SlotTable{{0, 1}, {1, 0}}
	for i := range maxChanges + 2 {
		c.See(12+int64(i), MapShape{Members: []string{"a", "b"}, Table: tables[i%2]})
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

// The change log lists which member each map took slots from, once per
// map, and knows when it has forgotten some.
func TestChangeLogLosses(t *testing.T) {
	var c ChangeLog
	if _, ok := c.LossesAfter(0); ok {
		t.Fatal("an empty log knows losses")
	}
	c.See(5, MapShape{Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1, 0, 1}})
	c.See(6, MapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{2, 1, 2, 2}}) // a and b lose to c
	c.See(7, MapShape{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{2, 1, 2, 2}})
	c.See(8, MapShape{Members: []string{"c", "b"}, Table: wire.SlotTable{0, 1, 1, 1}}) // c loses to b
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
		c.See(9+int64(i), MapShape{Members: []string{"a", "b"}, Table: tables[i%2]})
	}
	if _, ok := c.LossesAfter(5); ok || c.lossFrom <= 8 {
		t.Fatalf("after %d losses, those after 5 are known (from %d)", len(c.losses), c.lossFrom)
	}
	if got, ok := c.LossesAfter(c.seq - 1); !ok || len(got) != 2 {
		t.Fatalf("the newest map's losses: %v %v", got, ok)
	}
}
