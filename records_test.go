package rink

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// randomMap returns a valid map of S slots over some of names.
func randomMap(rng *rand.Rand, version int64, S int, names []string) wire.Map {
	m := wire.Map{Schema: wire.SchemaVersion, Version: version, Slots: S}
	pool := slices.Clone(names)
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	k := rng.IntN(len(pool) + 1)
	m.Members = pool[:k]
	rest := pool[k:]
	if len(m.Members) > 0 {
		m.Table = make(wire.SlotTable, S)
		for s := range m.Table {
			m.Table[s] = int32(rng.IntN(len(m.Members)))
		}
		m.Leader = m.Members[rng.IntN(len(m.Members))]
	}
	base := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, n := range rest {
		if rng.IntN(2) == 0 {
			m.Waiting = append(m.Waiting, wire.Waiter{Name: n, Since: base.Add(time.Duration(rng.IntN(5)) * time.Second)})
		}
	}
	m.ByLoad = rng.IntN(3) == 0
	if len(m.Members) > 0 && rng.IntN(3) == 0 {
		m.Incoming = map[string][]int{m.Members[0]: {rng.IntN(S)}}
	}
	if len(m.Members) > 0 && rng.IntN(4) == 0 {
		m.Leave = []string{m.Members[len(m.Members)-1]}
	}
	return m
}

// roundTrip is what a member applies: the record as JSON.
func roundTrip(t *testing.T, c wire.Record) wire.Record {
	t.Helper()
	var out wire.Record
	if err := json.Unmarshal(c.Encode(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameMap(a, b *wire.Map) bool {
	return a.SameAssignment(*b) && a.Version == b.Version && a.Leader == b.Leader && a.Slots == b.Slots && a.Schema == b.Schema &&
		slices.EqualFunc(a.Waiting, b.Waiting, wire.SameWaiter)
}

// A record applied to the map it was computed from gives the next map,
// through JSON, for any two maps of a rink.
func FuzzChangeRecord(f *testing.F) {
	f.Add(uint64(1), uint64(2), false)
	f.Add(uint64(5), uint64(8), true)
	f.Fuzz(func(t *testing.T, s1, s2 uint64, near bool) {
		rng := rand.New(rand.NewPCG(s1, s2))
		names := []string{"a", "b", "c", "d", "e", "f"}
		S := 1 + rng.IntN(9)
		prev := randomMap(rng, 1+int64(rng.IntN(5)), S, names)
		next := randomMap(rng, prev.Version+1, S, names)
		if near {
			// A step a leader takes: one member joins, leaves or waits.
			next = prev
			next.Version++
			next.Members = slices.Clone(prev.Members)
			next.Table = slices.Clone(prev.Table)
			next.Waiting = slices.Clone(prev.Waiting)
			switch {
			case len(next.Waiting) > 0:
				w := next.Waiting[0]
				next.Waiting = next.Waiting[1:]
				next.Members = append(next.Members, w.Name)
				if next.Table == nil {
					next.Table = make(wire.SlotTable, S)
				}
				next.Table[rng.IntN(S)] = int32(len(next.Members) - 1)
			case len(next.Members) > 1:
				last := len(next.Members) - 1
				for s := range next.Table {
					if int(next.Table[s]) == last {
						next.Table[s] = 0
					}
				}
				next.Members = next.Members[:last]
			}
		}
		if err := next.Validate(); err != nil {
			t.Fatalf("test map invalid: %v", err)
		}
		c := roundTrip(t, wire.Diff(&prev, &next))
		got, err := wire.Apply(&prev, &c)
		if err != nil {
			t.Fatalf("apply: %v\nprev %+v\nnext %+v\nrecord %s", err, prev, next, c.Encode())
		}
		if !sameMap(&got, &next) {
			t.Fatalf("apply(prev, diff(prev, next)) = %+v\nwant %+v\nrecord %s", got, next, c.Encode())
		}
		if len(prev.Members) > 0 && slices.Equal(prev.Members, next.Members) && prev.Table[0] == next.Table[0] && len(c.Encode()) > len(next.Encode()) {
			t.Logf("a record larger than the map: %d > %d", len(c.Encode()), len(next.Encode()))
		}
	})
}

// A record that does not fit the map it meets is refused, never applied
// in part and never a panic.
func FuzzApplyRecord(f *testing.F) {
	f.Add([]byte(`{"version":3,"moves":[0,1]}`))
	f.Add([]byte(`{"version":3,"size":1,"names":{"0":"x"},"moves":[0,0,1,0]}`))
	f.Add([]byte(`{"version":3,"names":{"7":"x"}}`))
	f.Add([]byte(`{"version":3,"moves":[9,0]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c wire.Record
		if json.Unmarshal(data, &c) != nil {
			return
		}
		for _, prev := range []wire.Map{
			{Schema: wire.SchemaVersion, Version: 2, Slots: 2, Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1}},
			{Schema: wire.SchemaVersion, Version: 2, Slots: 3, Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2}, Waiting: []wire.Waiter{{Name: "w"}}},
			{Schema: wire.SchemaVersion, Version: 2, Slots: 2},
		} {
			m, err := wire.Apply(&prev, &c)
			// apply checks only what the record changed: it must refuse
			// exactly the maps that validate refuses.
			whole, uerr := wire.ApplyUnchecked(&prev, &c, false)
			if uerr == nil {
				uerr = whole.Validate()
			}
			if (err == nil) != (uerr == nil) {
				t.Fatalf("apply: %v; applied whole and validated: %v", err, uerr)
			}
			if err == nil && !reflect.DeepEqual(m, whole) {
				t.Fatalf("apply: %+v, unchecked: %+v", m, whole)
			}
			// Laxly, it refuses no more than that, and what it takes
			// has every slot owned by an index in range.
			lm, lerr := wire.ApplyAs(&prev, &c, true)
			if err == nil && lerr != nil {
				t.Fatalf("lax apply refused what apply took: %v", lerr)
			}
			if lerr == nil {
				for s, idx := range lm.Table {
					if idx < 0 || int(idx) >= len(lm.Members) || len(lm.Table) != lm.Slots {
						t.Fatalf("lax apply: slot %d owned by index %d of %d", s, idx, len(lm.Members))
					}
				}
			}
			if prev.Version != 2 || len(prev.Members) > 0 && (prev.Members[0] != "a" || prev.Table[1] != 1) {
				t.Fatal("apply changed prev")
			}
			// In place, it takes what lax apply takes, the same map, and
			// leaves prev's table as it was when it refuses.
			own := prev
			own.Table = slices.Clone(prev.Table)
			own.Members = slices.Clone(prev.Members)
			delta := wire.DeltaOf(&own, &c)
			im, ierr := wire.ApplyInPlace(&own, &c, true)
			if (ierr == nil) != (lerr == nil) {
				t.Fatalf("in place: %v; lax apply: %v", ierr, lerr)
			}
			if ierr == nil && !reflect.DeepEqual(im, lm) {
				t.Fatalf("in place: %+v, lax apply: %+v", im, lm)
			}
			if ierr != nil && (!slices.Equal(own.Table, prev.Table) || !slices.Equal(own.Members, prev.Members)) {
				t.Fatalf("a refused in-place apply left the table %v and members %v, was %v and %v", own.Table, own.Members, prev.Table, prev.Members)
			}
			// The delta names every slot whose owner changed, with its
			// owner before, even with the table and names written in place.
			if ierr == nil && !delta.Renamed && len(prev.Table) > 0 {
				was := map[int]string{}
				for i, s := range delta.Moved {
					was[s] = delta.OldName(delta.Old[i], im.Members)
				}
				for s := range prev.Slots {
					w, ok := was[s]
					if !ok && prev.Owner(s) != im.Owner(s) {
						t.Fatalf("slot %d went from %q to %q outside the delta %v", s, prev.Owner(s), im.Owner(s), delta.Moved)
					}
					if ok && w != prev.Owner(s) {
						t.Fatalf("the delta says slot %d was %q's, it was %q's", s, w, prev.Owner(s))
					}
				}
			}
		}
		// Maps with no members pass validate whatever their slot count
		// (observers take any): a record must not make apply panic on one.
		for _, slots := range []int{-1, 0, MaxSlots + 1} {
			_, _ = wire.Apply(&wire.Map{Schema: wire.SchemaVersion, Version: 2, Slots: slots}, &c)
		}
	})
}

// A join in a rink of 1,000 members on 1,024 slots costs a record of tens
// of bytes, against a map of kilobytes.
func TestChangeRecordSize(t *testing.T) {
	const n, S = 1000, 1024
	prev := wire.Map{Schema: wire.SchemaVersion, Version: 7, Slots: S, Leader: "m0000"}
	for i := range n {
		prev.Members = append(prev.Members, fmt.Sprintf("m%04d", i))
	}
	prev.Table = make(wire.SlotTable, S)
	for s := range prev.Table {
		prev.Table[s] = int32(s % n)
	}
	next := prev
	next.Version = 8
	next.Members = append(slices.Clone(prev.Members), "m1000")
	next.Table = slices.Clone(prev.Table)
	next.Table[17] = n
	c := wire.Diff(&prev, &next)
	rec, whole := len(c.Encode()), len(next.Encode())
	t.Logf("record %d bytes, map %d bytes: %s", rec, whole, c.Encode())
	if rec > 100 || whole < 8000 {
		t.Errorf("record %d bytes, map %d", rec, whole)
	}
	got, err := wire.Apply(&prev, &c)
	if err != nil || !sameMap(&got, &next) {
		t.Fatalf("apply: %v", err)
	}
}

// The transition is read from the end of a record or of a whole map
// written alone, as withTransition and encode put it, and whole when the
// tail does not parse.
func TestTransitionOf(t *testing.T) {
	want := wire.Transition{From: 7, Gone: []string{"a", "b"}, Incs: map[string]int64{"c": 9}}
	m := wire.Map{Schema: wire.SchemaVersion, Version: 8, Slots: 2, Leader: "x", Members: []string{"from", "incs"}, Table: wire.SlotTable{0, 1}}
	whole := wire.WithTransition(m.Encode(), want)
	c := wire.Record{Schema: wire.SchemaVersion, Change: true, Version: 8, Moves: []int{0, 1}, Transition: want}
	gone := wire.Transition{From: 7, Gone: []string{"a"}}
	for name, v := range map[string][]byte{
		"whole map":       whole,
		"record":          c.Encode(),
		"fields in front": []byte(`{"incs":{"c":9},"from":7,"gone":["a","b"],"version":8}`),
	} {
		if got := wire.TransitionOf(v); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if got := wire.TransitionOf(wire.WithTransition(m.Encode(), gone)); !reflect.DeepEqual(got, gone) {
		t.Errorf("no incs: %+v", got)
	}
	if got := wire.TransitionOf(m.Encode()); !reflect.DeepEqual(got, wire.Transition{}) {
		t.Errorf("a map without one: %+v", got)
	}
}
