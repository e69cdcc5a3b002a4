package rink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

func changes(cs []Change) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return strings.Join(out, "; ")
}

// awaitState waits for an observer state that satisfies cond.
func awaitState(t *testing.T, ob *Observer, what string, cond func(State) bool) State {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s := ob.State()
		if cond(s) {
			return s
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("observer never saw: %s (last: version %d, leader %q, members %+v, waiting %+v, joining %v)", what, s.Version, s.Leader, s.Members, s.Waiting, s.Joining)
		}
	}
}

func TestObserver(t *testing.T) {
	name := rinkName(t)
	cli := newClient(t)
	ob, err := NewObserver(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if s := ob.State(); s.Version != 0 || len(s.Members) != 0 {
		t.Fatalf("state of an empty rink: %+v", s)
	}
	a := join(t, newClient(t), name, WithMemberName("a"), WithRebalanceDelay(time.Hour)) // a leads: its delay counts
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	join(t, newClient(t), name, WithMemberName("b"))
	s := awaitState(t, ob, "a ranked, b waiting", func(s State) bool {
		return len(s.Members) == 1 && s.Members[0].Name == "a" && s.Leader == "a" && len(s.Waiting) == 1
	})
	if s.Members[0].Slots != DefaultSlots || s.Slots != DefaultSlots || !s.Members[0].Live {
		t.Fatalf("member a: %+v of %d slots", s.Members[0], s.Slots)
	}
	// One replica per slot: no secondaries, no zone.
	if s.Replicas != 1 || s.Members[0].Secondaries != 0 || s.Members[0].Zone != "" || s.Waiting[0].Zone != "" {
		t.Fatalf("a rink of one replica: %d replicas, member a %+v, waiting %+v", s.Replicas, s.Members[0], s.Waiting[0])
	}
	// The observer agrees with members on every owner.
	for _, role := range []string{"leader", "BTC/ETH", "partition:42"} {
		if o, _ := ob.Owner(role); o != "a" {
			t.Errorf("observer: owner of %s = %q", role, o)
		}
		if o, ok := ob.Owners(role); !ok || !slices.Equal(o, []string{"a"}) {
			t.Errorf("observer: owners of %s = %v", role, o)
		}
	}
	prev := ob.State()
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	next := awaitState(t, ob, "b promoted", func(s State) bool {
		return len(s.Members) == 1 && s.Members[0].Name == "b" && s.Leader == "b"
	})
	diff := changes(Diff(prev, next))
	for _, want := range []string{"leader b", "b promoted to index 0", "a left", "1024 slots moved"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff %q lacks %q", diff, want)
		}
	}
	// The observer never joined: no member key of its own.
	if got := len(next.Joining) + len(next.Waiting); got != 0 {
		t.Errorf("observer state lists %d unranked members", got)
	}
}

func TestObserverBadInput(t *testing.T) {
	if _, err := NewObserver(nil, "x"); !errors.Is(err, ErrNilClient) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := NewObserver(newClient(t), "a b"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad name: %v", err)
	}
	dead := freeURL()
	if _, err := NewObserver(newClient(t, dead.Host), "x", WithJoinTimeout(300*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unreachable etcd: %v", err)
	}
}

// TestEvents checks what WithEvents reports through a graceful handover
// and a partition.
func TestEvents(t *testing.T) {
	h := &history{}
	a, b, _ := pair(t, h, "a", "b")
	settle(t, h, a, b)
	mark := time.Now()
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b holds everything", func() bool {
		held := h.holders()
		for s := 0; s < DefaultSlots; s++ {
			if len(held[s]) != 1 || held[s][0] != "b" {
				return false
			}
		}
		return true
	})
	var fromA, applied, ranks int
	for _, e := range h.snapshot() {
		if e.Rink != b.Name() || !e.Time.After(mark) || e.Member != "b" {
			continue
		}
		switch e.Kind {
		case EventAcquired:
			if e.From == "a" && e.Token > 0 && e.Wait >= 0 && e.Slot >= 0 {
				fromA++
			}
		case EventMapApplied:
			applied++
		case EventRankChanged:
			ranks++
		}
	}
	if fromA != DefaultSlots/2 || applied == 0 || ranks == 0 {
		t.Fatalf("b's events: %d acquisitions from a (want %d), %d maps applied, %d rank changes", fromA, DefaultSlots/2, applied, ranks)
	}
	if _, err := New(newClient(t), "x", WithEvents(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil events function: %v", err)
	}
}

// TestObserverUnusableMapAndDiff: the observer refuses the maps members
// refuse, reports a re-created map, and Done ends change loops.
func TestObserverUnusableMapAndDiff(t *testing.T) {
	name := rinkName(t)
	cli := newClient(t)
	a := join(t, newClient(t), name, WithMemberName("a"))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	ob, err := NewObserver(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	awaitState(t, ob, "a ranked", func(s State) bool { return len(s.Members) == 1 })

	// A map of an unknown schema: members refuse it, so does the observer.
	older := wire.Map{Schema: 99, Version: 1, Slots: DefaultSlots, Members: []string{"ghost"}, Table: make(wire.SlotTable, DefaultSlots)}
	if _, err := cli.Put(context.Background(), newKeys(name).Map(), string(older.Encode())); err != nil {
		t.Fatal(err)
	}
	s := awaitState(t, ob, "map refused", func(s State) bool { return s.MapError != "" })
	if o, ok := s.Owner("x"); ok {
		t.Fatalf("owner under an unusable map: %q", o)
	}
	// Deleting it lets the rink start a new lineage.
	prev := s
	if _, err := cli.Delete(context.Background(), newKeys(name).Map()); err != nil {
		t.Fatal(err)
	}
	next := awaitState(t, ob, "new lineage", func(s State) bool { return s.Lineage != prev.Lineage && s.MapError == "" && len(s.Members) == 1 })
	if d := changes(Diff(prev, next)); !strings.Contains(d, "map re-created (lineage") {
		t.Errorf("diff %q lacks the new lineage", d)
	}
	ob.Close()
	select {
	case <-ob.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

func TestDiffUnranked(t *testing.T) {
	prev := State{Members: []MemberState{{Name: "a", Index: 0}, {Name: "b", Index: 1}}}
	next := State{Members: []MemberState{{Name: "a", Index: 0}}, Waiting: []WaitingState{{Name: "b"}}}
	if d := changes(Diff(prev, next)); d != "b unranked (rejoined, waiting)" {
		t.Fatalf("diff = %q", d)
	}
	if d := changes(Diff(next, State{Members: next.Members})); d != "b left while waiting" {
		t.Fatalf("diff = %q", d)
	}
}

// What the floor says of the leader's plans turns into State.Settled only
// for the map it names, with every member's acknowledgement, nobody
// waiting, joining or gone, and nothing announced.
func TestSettleState(t *testing.T) {
	m := wire.Map{Version: 7, Slots: 4, Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1, 0, 1}}
	at := func(f wire.AckFloor, mod func(*State, *wire.Map)) State {
		s := State{Version: m.Version, Members: []MemberState{{Name: "a", Live: true}, {Name: "b", Live: true}}}
		cur := m
		if mod != nil {
			mod(&s, &cur)
		}
		settleState(&s, cur, 3, 9, &f)
		return s
	}
	rest := wire.AckFloor{Lineage: 3, Version: 7, Floor: 7, Seq: 9, SeqFloor: 9, Rest: 7, Imbalance: 1.04, Tolerance: 0.1}
	if s := at(rest, nil); !s.Settled || s.Imbalance != 1.04 || s.Tolerance != 0.1 || s.LoadRound {
		t.Errorf("at rest: %+v", s)
	}
	for _, c := range []struct {
		why string
		f   func(*wire.AckFloor)
		mod func(*State, *wire.Map)
	}{
		{"moves planned", func(f *wire.AckFloor) { f.Rest = 0 }, nil},
		{"rest of an older map", func(f *wire.AckFloor) { f.Rest, f.Version = 6, 6 }, nil},
		{"another lineage", func(f *wire.AckFloor) { f.Lineage = 2 }, nil},
		{"an acknowledgement missing", func(f *wire.AckFloor) { f.Floor = 6 }, nil},
		{"a seq acknowledgement missing", func(f *wire.AckFloor) { f.SeqFloor = 8 }, nil},
		{"another map of the same version", func(f *wire.AckFloor) { f.Seq, f.SeqFloor = 8, 8 }, nil},
		{"a load round", func(f *wire.AckFloor) { f.Rest, f.Round = 0, true }, nil},
		{"a member waiting", nil, func(s *State, _ *wire.Map) { s.Waiting = []WaitingState{{Name: "c"}} }},
		{"a member joining", nil, func(s *State, _ *wire.Map) { s.Joining = []string{"c"} }},
		{"a member gone", nil, func(s *State, _ *wire.Map) { s.Members[1].Live = false }},
		{"a move announced", nil, func(_ *State, m *wire.Map) { m.Incoming = map[string][]int{"b": {0}} }},
		{"a member leaving", nil, func(_ *State, m *wire.Map) { m.Leave = []string{"a"} }},
		{"an unusable map", nil, func(s *State, _ *wire.Map) { s.MapError = "bad" }},
	} {
		f := rest
		if c.f != nil {
			c.f(&f)
		}
		if s := at(f, c.mod); s.Settled {
			t.Errorf("%s: settled", c.why)
		}
	}
	if s := at(wire.AckFloor{Lineage: 3, Version: 7, Round: true}, nil); !s.LoadRound {
		t.Error("a load round planned is not shown")
	}
	if s := at(wire.AckFloor{Lineage: 3, Version: 7, Floor: 7, Rest: 7}, func(_ *State, m *wire.Map) { m.Incoming = map[string][]int{"b": {0, 9, -1}} }); s.Announced != 1 {
		t.Errorf("announced %d slots, want 1 (entries naming no slot are ignored)", s.Announced)
	}
}

// observedReplicas waits until the observer and every member of ms agree
// on one map, which every member has acknowledged, and returns the
// observer's state and a member's copy of that map.
func observedReplicas(t *testing.T, ob *Observer, ms ...*Rink) (State, *wire.Map) {
	t.Helper()
	var m *wire.Map
	s := awaitState(t, ob, fmt.Sprintf("%d members on one acknowledged map", len(ms)), func(s State) bool {
		if len(s.Members) != len(ms) || s.MapError != "" {
			return false
		}
		for _, x := range s.Members {
			if !x.Live || x.Ack != s.Version {
				return false
			}
		}
		for _, r := range ms {
			if r.Rank().Version != s.Version {
				return false
			}
		}
		m = ms[0].ownersNow()
		return m != nil && m.Version == s.Version
	})
	return s, m
}

// An observer of a rink of two replicas per slot in three zones shows
// what its members hold: the replicas per slot, each member's zone, its
// primaries (Slots) and secondaries counted apart, and every role's owners
// as members name them, primary first; Diff counts a departure's moves
// by replica.
func TestObserverReplicas(t *testing.T) {
	name := rinkName(t)
	ob, err := NewObserver(newClient(t), name)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	zones := map[string]string{"m0": "zone-a", "m1": "zone-b", "m2": "zone-c"}
	var ms []*Rink
	for _, n := range []string{"m0", "m1", "m2"} {
		ms = append(ms, join(t, newClient(t), name, WithMemberName(n), WithReplicas(2), WithSlots(64), WithZone(zones[n])))
	}
	s, m := observedReplicas(t, ob, ms...)
	if s.Replicas != 2 || s.Protocol != wire.SchemaReplicas || s.Slots != 64 {
		t.Fatalf("state of %d replicas, protocol %d, %d slots; want 2, %d, 64", s.Replicas, s.Protocol, s.Slots, wire.SchemaReplicas)
	}
	// Each member's counts, as the member's own map gives them.
	primaries, secondaries := map[string]int{}, map[string]int{}
	for slot := range m.Slots {
		names := m.ReplicaNames(slot)
		if len(names) != 2 {
			t.Fatalf("slot %d: replicas %v, want 2", slot, names)
		}
		primaries[names[0]]++
		for _, n := range names[1:] {
			secondaries[n]++
		}
	}
	for _, x := range s.Members {
		if x.Zone != zones[x.Name] || x.Slots != primaries[x.Name] || x.Secondaries != secondaries[x.Name] || x.Secondaries == 0 {
			t.Errorf("%s: zone %q, %d slots, %d secondaries; want %q, %d, %d", x.Name, x.Zone, x.Slots, x.Secondaries, zones[x.Name], primaries[x.Name], secondaries[x.Name])
		}
	}
	// Owners agrees with every member's, primary first, and names
	// replicas in distinct zones.
	for i := range 200 {
		role := fmt.Sprint("role-", i)
		owners, ok := ob.Owners(role)
		owner, _ := ob.Owner(role)
		if !ok || len(owners) != 2 || owners[0] != owner || zones[owners[0]] == zones[owners[1]] {
			t.Fatalf("%s: owners %v (%v), owner %q", role, owners, ok, owner)
		}
		for _, r := range ms {
			if theirs, _ := r.Owners(role); !slices.Equal(theirs, owners) {
				t.Fatalf("%s: the observer says %v, %s says %v", role, owners, r.Member(), theirs)
			}
		}
	}
	if owners, ok := ob.Owners(""); ok || owners != nil {
		t.Errorf("owners of the empty role: %v, %v", owners, ok)
	}

	// m0 leaves: Diff counts the primaries that moved, those that went to
	// their secondary, and the secondaries placed, as the maps say.
	if err := ms[0].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	next, after := observedReplicas(t, ob, ms[1:]...)
	var moved, warm, placed int
	for slot := range m.Slots {
		was, is := m.ReplicaNames(slot), after.ReplicaNames(slot)
		if was[0] != is[0] {
			moved++
			if slices.Contains(was[1:], is[0]) {
				warm++
			}
		}
		for _, n := range is[1:] {
			if !slices.Contains(was[1:], n) {
				placed++
			}
		}
	}
	if moved < primaries["m0"] || warm == 0 {
		t.Fatalf("m0 owned %d slots; %d moved, %d of them to a secondary", primaries["m0"], moved, warm)
	}
	want := []string{fmt.Sprintf("%d slots moved", moved), fmt.Sprintf("%d slots promoted from secondaries", warm)}
	if placed > 0 {
		want = append(want, fmt.Sprintf("%d secondaries moved", placed))
	}
	diff := changes(Diff(s, next))
	t.Logf("m0 left: %s", diff)
	for _, w := range want {
		if !strings.Contains(diff, w) {
			t.Errorf("diff %q lacks %q", diff, w)
		}
	}
	if placed == 0 && strings.Contains(diff, "secondaries moved") {
		t.Errorf("diff %q counts secondaries, none moved", diff)
	}
	total := 0
	for _, x := range next.Members {
		total += x.Secondaries
	}
	if total != next.Slots { // (two members: each slot's other member is its secondary)
		t.Errorf("%d secondaries held of %d slots", total, next.Slots)
	}
}

// A state counts each slot once per member that holds it: a secondary's
// entry that repeats the primary or an earlier secondary (fewer members
// than replicas) holds nothing, and only the primaries' row counts as
// slots owned. Diff counts moves by replica, and with one replica per
// slot as it always has.
func TestStateReplicaCounts(t *testing.T) {
	// Two members, three replicas per slot of four: each slot's third
	// replica is "none".
	m := wire.Map{Schema: wire.SchemaReplicas, Version: 3, Slots: 4, Replicas: 3, Members: wire.MemberList{"a", "b"},
		Table: wire.SlotTable{0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0}}
	p, sec := slotCounts(&m)
	if !slices.Equal(p, []int{2, 2}) || !slices.Equal(sec, []int{2, 2}) {
		t.Fatalf("slot counts %v, secondaries %v; want [2 2] and [2 2]", p, sec)
	}
	state := func(m wire.Map) State {
		p, sec := slotCounts(&m)
		s := State{Version: m.Version, Slots: m.Slots, Replicas: m.ReplicaCount(), table: m.Table, names: m.Members}
		for i, n := range m.Members {
			s.Members = append(s.Members, MemberState{Name: n, Index: i, Slots: p[i], Secondaries: sec[i]})
		}
		return s
	}
	s := state(m)
	if o, _ := s.Owners("x"); len(o) != 2 {
		t.Fatalf("owners %v, want two members", o)
	}
	// Three members of two replicas: slot 0's primary goes to its
	// secondary (b), which c replaces; slot 1's primary goes to c, which
	// was not its secondary; slot 2's secondary moves; slot 3 stays.
	a := wire.Map{Schema: wire.SchemaReplicas, Version: 1, Slots: 4, Replicas: 2, Members: wire.MemberList{"a", "b", "c"},
		Table: wire.SlotTable{0, 0, 1, 2, 1, 1, 0, 0}}
	b := a
	b.Table = wire.SlotTable{1, 2, 1, 2, 2, 1, 2, 0}
	d := changes(Diff(state(a), state(b)))
	if d != "2 slots moved; 1 slots promoted from secondaries; 2 secondaries moved" {
		t.Errorf("diff = %q", d)
	}
	// One replica per slot: slots only, as before replicas.
	one := wire.Map{Schema: 3, Version: 1, Slots: 4, Members: wire.MemberList{"a", "b"}, Table: wire.SlotTable{0, 0, 1, 1}}
	two := one
	two.Table = wire.SlotTable{0, 1, 1, 0}
	if d := changes(Diff(state(one), state(two))); d != "2 slots moved" {
		t.Errorf("diff with one replica = %q", d)
	}
	if s := state(one); s.Replicas != 1 || s.Members[0].Slots != 2 || s.Members[0].Secondaries != 0 {
		t.Errorf("one replica: %+v", s)
	}
}
