package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rink-go/rink/internal/wire"
)

// slotHistory answers heldBy as a history of whole maps would, through
// random maps, gaps and prunes.
func FuzzSlotHistory(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(3), uint64(5))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		rng := rand.New(rand.NewPCG(s1, s2))
		const S = 6
		names := []string{"a", "b", "c", "d"}
		var h SlotHistory
		var live wire.SlotTable       // the table last added to h
		whole := map[int64]wire.Map{} // the maps a member would have kept
		low := int64(0)               // nothing below it is kept
		seq := int64(0)
		for step := 0; step < 60; step++ {
			switch r := rng.IntN(10); {
			case r < 7 || seq == 0:
				seq++
				if rng.IntN(12) == 0 {
					seq += 1 + int64(rng.IntN(3)) // a gap: the history starts again
					clear(whole)
				}
				m := wire.Map{Slots: S}
				for _, n := range names {
					if rng.IntN(3) > 0 {
						m.Members = append(m.Members, n)
					}
				}
				if len(m.Members) > 0 {
					m.Table = make(wire.SlotTable, S)
					for s := range m.Table {
						m.Table[s] = int32(rng.IntN(len(m.Members)))
					}
				}
				// Half the time the map comes as a record applied to the
				// one before, with its delta (see mapDelta).
				// Such a record is written into the table the history last
				// saw, as a member that does not lead applies it (see
				// applyInPlace): the history must not need its old entries.
				var delta *wire.MapDelta
				added := m
				if prev, ok := whole[seq-1]; ok && rng.IntN(2) == 0 && len(prev.Members) > 0 {
					m.Schema, m.Version, prev.Schema, prev.Version = wire.SchemaVersion, seq, wire.SchemaVersion, seq-1
					c := wire.Diff(&prev, &m)
					delta = wire.DeltaOf(&prev, &c)
					if !delta.Renamed && len(live) == len(m.Table) {
						h.Settle() // (as applyMap does before a record is written in place)
						copy(live, m.Table)
						added.Table = live
					}
				}
				h.Add(seq, &added, delta)
				live = added.Table
				m.Table = slices.Clone(m.Table)
				whole[seq] = m
			case r < 8:
				p := seq - int64(rng.IntN(5))
				if _, ok := whole[seq]; ok && p == seq && rng.IntN(2) == 0 {
					h.Rebase(seq) // everybody at the newest map
				} else {
					h.Prune(p)
				}
				low = max(low, p)
				for v := range whole {
					if v < p {
						delete(whole, v)
					}
				}
			}
			// Every question a member may ask: a slot, a name, a bound
			// and a gain, both at most the newest seq.
			for q := 0; q < 8; q++ {
				s, name := rng.IntN(S), names[rng.IntN(len(names))]
				g := 1 + int64(rng.IntN(int(seq)))
				a := int64(rng.IntN(int(g) + 1))
				held, known := h.HeldBy(s, name, a, g)
				wantHeld, wantKnown := false, true
				for v := a; v < g; v++ {
					m, ok := whole[v]
					if !ok {
						wantKnown = false
						break
					}
					wantHeld = wantHeld || m.Owner(s) == name
				}
				if known && !wantKnown {
					t.Fatalf("heldBy(%d, %s, %d, %d) known, but the maps are not all kept (from %d top %d)", s, name, a, g, h.From, h.top)
				}
				if known && held != wantHeld {
					t.Fatalf("heldBy(%d, %s, %d, %d) = %v, want %v", s, name, a, g, held, wantHeld)
				}
				if wantKnown && !known && a >= low && a < g {
					t.Fatalf("heldBy(%d, %s, %d, %d) unknown, though every map is kept (from %d top %d low %d)", s, name, a, g, h.From, h.top, low)
				}
			}
		}
	})
}

// A map that moves nothing adds nothing; a prune keeps the entry in force
// at its seq, and drops a slot that has not changed since; a rebase to the
// newest map drops every change.
func TestSlotHistory(t *testing.T) {
	var h SlotHistory
	m1 := wire.Map{Slots: 2, Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1}}
	m2 := wire.Map{Slots: 2, Members: []string{"b", "a"}, Table: wire.SlotTable{1, 0}} // same owners
	m3 := wire.Map{Slots: 2, Members: []string{"a", "b"}, Table: wire.SlotTable{1, 1}} // slot 0 to b
	h.Add(1, &m1, nil)
	h.Add(2, &m2, nil)
	h.Add(3, &m3, nil)
	h.Settle() // (a whole map is compared with the one before later: see slotHistory.lazy)
	if h.entries != 2 || len(h.changes) != 1 {
		t.Fatalf("%d entries in %d slots, want 2 in 1 (the move and the slot's owner in the base; the base map is shared)", h.entries, len(h.changes))
	}
	for _, c := range []struct {
		s           int
		name        string
		a, g        int64
		held, known bool
	}{
		{0, "a", 1, 3, true, true},
		{0, "b", 1, 3, false, true},
		{0, "b", 1, 4, true, true},
		{0, "a", 3, 4, false, true},
		{0, "a", 0, 2, false, false}, // seq 0 was never added
		{0, "a", 3, 5, false, false}, // nor seq 4
		{1, "b", 2, 2, false, true},  // nothing to check
	} {
		if held, known := h.HeldBy(c.s, c.name, c.a, c.g); held != c.held || known != c.known {
			t.Errorf("heldBy(%d, %s, %d, %d) = %v, %v; want %v, %v", c.s, c.name, c.a, c.g, held, known, c.held, c.known)
		}
	}
	h.Prune(3)
	if _, known := h.HeldBy(0, "a", 2, 3); known {
		t.Error("seq 2 known after a prune to 3")
	}
	if held, known := h.HeldBy(0, "b", 3, 4); !held || !known {
		t.Error("seq 3 forgotten by a prune to 3")
	}
	if len(h.changes) != 0 || h.entries != 0 {
		t.Errorf("slot 0 has not changed since seq 3, and keeps %d entries after a prune to 3", h.entries)
	}
	h.Rebase(3)
	if held, known := h.HeldBy(0, "b", 3, 4); !held || !known || h.changes != nil || h.From != 3 {
		t.Errorf("after a rebase to 3: %v %v, changes %v, from %d", held, known, h.changes, h.From)
	}
	h.Add(5, &m1, nil) // a gap
	if _, known := h.HeldBy(0, "a", 3, 4); known || h.From != 5 {
		t.Errorf("after a gap: from %d, seq 3 still known", h.From)
	}
}

// churn adds to a history 2,999 maps on 4,096 slots, each moving one slot
// to the next of 64 members, as records, and calls after with the
// history, the seq added, the slot moved and the map before.
func churn(after func(h *SlotHistory, seq int64, s int, prev *wire.Map)) {
	const S, n = 4096, 64
	m := wire.Map{Schema: wire.SchemaVersion, Version: 1, Slots: S, Members: make([]string, n), Table: make(wire.SlotTable, S)}
	for i := range m.Members {
		m.Members[i] = string(rune('A' + i))
	}
	var h SlotHistory
	h.Add(1, &m, nil)
	for seq := int64(2); seq <= 3000; seq++ {
		prev := m
		m.Version = seq
		m.Table = slices.Clone(prev.Table)
		s := int(seq*7) % S
		m.Table[s] = (m.Table[s] + 1) % n
		c := wire.Diff(&prev, &m)
		h.Add(seq, &m, wire.DeltaOf(&prev, &c))
		after(&h, seq, s, &prev)
	}
}

// Under steady churn the floor never reaches the newest map, so the
// history never rebases: what it keeps must follow the slots moved since
// the floor, not every slot moved since it began (at 5f918f6 a member of
// a rink of 10,000 kept an entry for nearly every slot while members
// joined: about 600 KB each).
func TestSlotHistoryFollowsTheFloor(t *testing.T) {
	churn(func(h *SlotHistory, seq int64, _ int, _ *wire.Map) {
		h.Prune(seq - 2)
		if len(h.changes) > 3 || h.entries > 12 {
			t.Fatalf("seq %d: the history keeps %d entries over %d slots, with 3 maps since the floor", seq, h.entries, len(h.changes))
		}
	})
}

// When the floor does not move at all, the history still keeps at most
// the newest changes it is allowed (see maxHistChanges), and answers for
// the maps it keeps.
func TestSlotHistoryBounded(t *testing.T) {
	const keep = 100
	churn(func(h *SlotHistory, seq int64, s int, prev *wire.Map) {
		if low := h.KeepingAtMost(keep); low > h.From {
			h.Prune(low)
		}
		if h.entries > 2*keep+2 {
			t.Fatalf("seq %d: %d entries kept, for at most %d changes", seq, h.entries, keep)
		}
		if held, known := h.HeldBy(s, prev.Owner(s), seq-1, seq); !held || !known {
			t.Fatalf("seq %d: the map before is forgotten (from %d)", seq, h.From)
		}
	})
}

// A prune costs what it drops, amortized over the entries added: with
// many slots that changed several times since the floor, a floor that
// rises by a map at a time must not pass over every slot the history
// keeps (at 5,000 members building a rink, that pass, repeated at every
// watch batch, took 9 % of the process's CPU).
func TestSlotHistoryPruneCostFollowsTheChange(t *testing.T) {
	const S, n, maps = 512, 8, 4000
	m := wire.Map{Schema: wire.SchemaVersion, Version: 1, Slots: S, Members: make([]string, n), Table: make(wire.SlotTable, S)}
	for i := range m.Members {
		m.Members[i] = string(rune('A' + i))
	}
	var h SlotHistory
	h.Add(1, &m, nil)
	added := 0
	for seq := int64(2); seq <= maps; seq++ {
		prev := m
		m.Version = seq
		m.Table = slices.Clone(prev.Table)
		s := int(seq) % S
		m.Table[s] = (m.Table[s] + 1) % n
		c := wire.Diff(&prev, &m)
		h.Add(seq, &m, wire.DeltaOf(&prev, &c))
		added++
		if seq > 4*S { // the floor a few changes of every slot behind
			h.Prune(seq - 3*S)
		}
		if held, known := h.HeldBy(s, prev.Owner(s), seq-1, seq); !held || !known {
			t.Fatalf("seq %d: the map before is forgotten (from %d)", seq, h.From)
		}
	}
	if h.pruneWork > 8*added {
		t.Fatalf("prunes passed over %d slots for %d entries added: they cost what the history keeps, not what they drop", h.pruneWork, added)
	}
	if h.entries > 4*S+S {
		t.Fatalf("%d entries kept over %d slots, with 3 changes of each since the floor", h.entries, len(h.changes))
	}
}
