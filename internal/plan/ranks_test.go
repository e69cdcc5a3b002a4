package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// start is a map with the given ranked members and an even, contiguous
// assignment of S slots (the shape the first rebalance produces).
func start(S int, members ...string) wire.Map {
	m := wire.Map{Schema: wire.SchemaVersion, Version: 1, Slots: S, Members: members}
	if len(members) > 0 {
		m.Table = balance(make([]string, S), members, nil)
	}
	return m
}

func counts(m wire.Map) map[string]int {
	c := map[string]int{}
	for s := range m.Table {
		c[m.Owner(s)]++
	}
	return c
}

func moved(a, b wire.Map) int {
	n := 0
	for s := 0; s < a.Slots; s++ {
		if a.Owner(s) != b.Owner(s) {
			n++
		}
	}
	return n
}

func ready(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

func TestPlan(t *testing.T) {
	const S = 10
	tests := []struct {
		name        string
		cur         wire.Map
		live        []string
		ready       map[string]bool
		wantMembers []string
		wantWaiting []string
		wantMoved   int
		wantCounts  map[string]int
	}{
		{
			name: "first member of an empty rink is ranked at once",
			cur:  start(S), live: []string{"a", "b"},
			wantMembers: []string{"a"}, wantWaiting: []string{"b"}, wantMoved: 10,
			wantCounts: map[string]int{"a": 10},
		},
		{
			name: "newcomer waits until ready",
			cur:  start(S, "a", "b"), live: []string{"a", "b", "c"},
			wantMembers: []string{"a", "b"}, wantWaiting: []string{"c"},
		},
		{
			name: "ready newcomer takes only its share",
			cur:  start(S, "a", "b"), live: []string{"a", "b", "c"}, ready: ready("c"),
			wantMembers: []string{"a", "b", "c"}, wantMoved: 3,
			wantCounts: map[string]int{"a": 4, "b": 3, "c": 3},
		},
		{
			name: "waiting member takes a departed member's index and slots",
			cur:  start(S, "a", "b", "c"), live: []string{"a", "c", "d"},
			wantMembers: []string{"a", "d", "c"}, wantMoved: 3,
			wantCounts: map[string]int{"a": 4, "d": 3, "c": 3},
		},
		{
			name: "oldest waiter is promoted first",
			cur:  start(S, "a", "b"), live: []string{"a", "e", "d"},
			wantMembers: []string{"a", "e"}, wantWaiting: []string{"d"}, wantMoved: 5,
		},
		{
			name: "with nobody waiting the highest index fills the hole",
			cur:  start(S, "a", "b", "c", "d"), live: []string{"a", "c", "d"},
			wantMembers: []string{"a", "d", "c"}, wantMoved: 3,
			wantCounts: map[string]int{"a": 4, "c": 3, "d": 3},
		},
		{
			name: "the highest index leaving shrinks the rink",
			cur:  start(S, "a", "b", "c"), live: []string{"a", "b"},
			wantMembers: []string{"a", "b"}, wantMoved: 3,
			wantCounts: map[string]int{"a": 5, "b": 5},
		},
		{
			name: "several leave at once",
			cur:  start(S, "a", "b", "c", "d", "e"), live: []string{"b", "e"},
			wantMembers: []string{"e", "b"}, wantMoved: 6,
			wantCounts: map[string]int{"b": 5, "e": 5},
		},
		{
			name: "everyone leaves, a waiter inherits",
			cur:  start(S, "a"), live: []string{"z"},
			wantMembers: []string{"z"}, wantMoved: 10,
		},
		{
			name: "everyone leaves",
			cur:  start(S, "a", "b"), live: nil,
			wantMembers: nil, wantMoved: 10,
		},
		{
			name: "more members than slots",
			cur:  start(2, "a", "b"), live: []string{"a", "b", "c"}, ready: ready("c"),
			wantMembers: []string{"a", "b", "c"}, wantMoved: 0,
			wantCounts: map[string]int{"a": 1, "b": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := Plan(tt.cur, Input{Live: tt.live, Ready: tt.ready})
			if !slices.Equal(next.Members, tt.wantMembers) {
				t.Fatalf("members = %v, want %v", next.Members, tt.wantMembers)
			}
			var waiting []string
			for _, w := range next.Waiting {
				waiting = append(waiting, w.Name)
			}
			if !slices.Equal(waiting, tt.wantWaiting) {
				t.Fatalf("waiting = %v, want %v", waiting, tt.wantWaiting)
			}
			if got := moved(tt.cur, next); got != tt.wantMoved {
				t.Errorf("moved %d slots, want %d", got, tt.wantMoved)
			}
			if tt.wantCounts != nil {
				got := counts(next)
				for name, want := range tt.wantCounts {
					if got[name] != want {
						t.Errorf("%s owns %d slots, want %d (all: %v)", name, got[name], want, got)
					}
				}
			}
			if len(next.Members) > 0 {
				next.Version = 1
				if err := next.Validate(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestPlanKeepsSurvivorsSlots(t *testing.T) {
	cur := start(1024, "a", "b", "c", "d", "e")
	next := Plan(cur, Input{Live: []string{"a", "c", "d", "e"}})
	for s := range cur.Table {
		if o := cur.Owner(s); o != "b" && next.Owner(s) != o {
			t.Fatalf("slot %d moved from survivor %s to %s", s, o, next.Owner(s))
		}
	}
	if got, want := moved(cur, next), counts(cur)["b"]; got != want {
		t.Fatalf("moved %d, want exactly b's %d", got, want)
	}
}

func TestCompact(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"a", "", "c", "d"}, []string{"a", "d", "c"}},
		{[]string{"", "", "c"}, []string{"c"}},
		{[]string{"a", "b", ""}, []string{"a", "b"}},
		{[]string{"", ""}, []string{}},
		{[]string{"", "b", "", "d", "e"}, []string{"e", "b", "d"}},
	}
	for _, tt := range tests {
		if got := compact(slices.Clone(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("compact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDecodeMap(t *testing.T) {
	good := start(4, "a", "b")
	tests := []struct {
		name  string
		data  string
		slots int
		ok    bool
	}{
		{"good", string(good.Encode()), 4, true},
		{"empty rink", `{"schema":2,"version":3,"slots":4,"members":[]}`, 4, true},
		{"not json", `{`, 4, false},
		{"unknown schema", `{"schema":9,"version":1,"slots":4,"members":[]}`, 4, false},
		{"other slot count", string(good.Encode()), 8, false},
		{"short table", `{"schema":2,"version":1,"slots":4,"members":["a"],"table":[0,0]}`, 4, false},
		{"index out of range", `{"schema":2,"version":1,"slots":2,"members":["a"],"table":[0,1]}`, 2, false},
		{"duplicate member", `{"schema":2,"version":1,"slots":1,"members":["a","a"],"table":[0]}`, 1, false},
		{"member also waiting", `{"schema":2,"version":1,"slots":1,"members":["a"],"table":[0],"waiting":[{"name":"a"}]}`, 1, false},
		{"version zero", `{"schema":2,"version":0,"slots":1,"members":[]}`, 1, false},
	}
	for _, tt := range tests {
		_, err := wire.DecodeMap([]byte(tt.data), tt.slots)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, wire.ErrIncompatible) {
			t.Errorf("%s: err = %v, want wire.ErrIncompatible", tt.name, err)
		}
	}
}

func TestSlotOfStable(t *testing.T) {
	// The hash is part of the protocol: members of different builds must
	// agree. These values are fixed forever.
	tests := []struct {
		role        string
		slots, want int
	}{
		{"leader", 1024, 757},
		{"BTC/ETH", 1024, 452},
		{"partition:42", 1024, 299},
		{"leader", 7, 0},
		{"partition:42", 7, 5},
	}
	for _, tt := range tests {
		if got := wire.SlotOf(tt.role, tt.slots); got != tt.want {
			t.Errorf("slotOf(%q, %d) = %d, want %d", tt.role, tt.slots, got, tt.want)
		}
	}
}

// checkMap asserts the invariants every planned map keeps; caps gives
// capacities other than 1.
func checkMap(t testing.TB, m wire.Map, live []string, caps map[string]float64) {
	t.Helper()
	if len(m.Members) == 0 {
		if len(m.Table) != 0 {
			t.Fatalf("table without members")
		}
		return
	}
	mm := m
	mm.Version = 1
	if err := mm.Validate(); err != nil {
		t.Fatal(err)
	}
	liveSet := map[string]bool{}
	for _, n := range live {
		liveSet[n] = true
	}
	for _, n := range m.Members {
		if !liveSet[n] {
			t.Fatalf("ranked member %s is not live", n)
		}
	}
	c := make([]int, len(m.Members))
	for _, i := range m.Table {
		c[i]++
	}
	total := 0.0
	for _, n := range m.Members {
		total += wire.CapacityOr1(caps[n])
	}
	for i, n := range c {
		share := float64(m.Slots) * wire.CapacityOr1(caps[m.Members[i]]) / total
		if math.Abs(float64(n)-share) > 1-1e-9 {
			t.Fatalf("member %s owns %d slots, want within one slot of %.3f", m.Members[i], n, share)
		}
	}
}

// minMoves is the fewest slots any balanced successor of cur over members
// must move: every orphaned slot, plus what members above their share give
// up when the shares rounded up go to those that own most. caps gives
// capacities other than 1.
func minMoves(cur wire.Map, members []string, caps map[string]float64) int {
	if len(members) == 0 {
		return len(cur.Table)
	}
	have := map[string]int{}
	for s := range cur.Table {
		have[cur.Owner(s)]++
	}
	orphans := cur.Slots
	total := 0.0
	for _, n := range members {
		orphans -= have[n]
		total += wire.CapacityOr1(caps[n])
	}
	// Each member's share rounded down, and which shares are not whole.
	// (Which of those get the shares rounded up matters only for those
	// that own more than the share rounded down: each saves a move.)
	type m struct {
		have, floor int
		whole       bool
	}
	var ms []m
	left := cur.Slots
	for _, n := range members {
		x := float64(cur.Slots) * wire.CapacityOr1(caps[n]) / total
		f := int(math.Floor(x + 1e-9))
		ms = append(ms, m{have[n], f, math.Abs(x-math.Round(x)) < 1e-9})
		left -= f
	}
	// The shares rounded up go to the not-whole members that have most.
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].whole != ms[j].whole {
			return !ms[i].whole
		}
		return ms[i].have-ms[i].floor > ms[j].have-ms[j].floor
	})
	excess := 0
	for i, x := range ms {
		share := x.floor
		if i < left {
			share++
		}
		excess += max(0, x.have-share)
	}
	return orphans + excess
}

// heirs returns the members of next that took over a departed member's
// index: their slots count as the departed member's, not as moves.
func renamed(cur, next wire.Map) wire.Map {
	out := cur
	out.Members = slices.Clone(cur.Members)
	liveNext := map[string]bool{}
	for _, n := range next.Members {
		liveNext[n] = true
	}
	for i, n := range cur.Members {
		if !liveNext[n] && i < len(next.Members) && !slices.Contains(cur.Members, next.Members[i]) {
			out.Members[i] = next.Members[i]
		}
	}
	return out
}

// simulate runs a random history of joins, leaves and rebalances through
// plan and checks every step.
func simulate(t testing.TB, seed uint64, steps int, S int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	cur := wire.Map{Schema: wire.SchemaVersion, Slots: S}
	var live []string
	next := 0
	// Odd seeds give members capacities other than 1.
	caps := map[string]float64{}
	for step := 0; step < steps; step++ {
		in := Input{Ready: map[string]bool{}, Capacity: caps}
		switch op := rng.IntN(10); {
		case op < 4 || len(live) == 0:
			name := fmt.Sprintf("m%d", next)
			if seed%2 == 1 {
				caps[name] = []float64{0.5, 1, 1, 1.5, 2, 3, 4, 0.25}[rng.IntN(8)]
			}
			live = append(live, name)
			next++
		case op < 7:
			i := rng.IntN(len(live))
			live = slices.Delete(slices.Clone(live), i, i+1)
		case op < 9:
			for _, w := range cur.Waiting {
				if rng.IntN(2) == 0 {
					in.Ready[w.Name] = true
				}
			}
		default:
			// A leader change: planning again with nothing new moves nothing.
		}
		in.Live = slices.Clone(live)
		n := Plan(cur, in)
		checkMap(t, n, live, caps)
		if got, want := moved(renamed(cur, n), n), minMoves(renamed(cur, n), n.Members, caps); got != want {
			t.Fatalf("seed %d step %d: moved %d slots, minimum %d\ncur %v\nnext %v", seed, step, got, want, cur.Members, n.Members)
		}
		// Planning again with the same input is a fixed point.
		if again := Plan(n, in); !again.SameAssignment(n) {
			t.Fatalf("seed %d step %d: plan is not idempotent", seed, step)
		}
		// Every ranked survivor keeps its slots unless it was over-full.
		n.Version = cur.Version + 1
		cur = n
	}
}

func TestPlanRandomHistories(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		simulate(t, seed, 60, []int{1, 3, 10, 64, 1024}[seed%5])
	}
}

func FuzzPlan(f *testing.F) {
	f.Add(uint64(1), uint8(40), uint16(1024))
	f.Add(uint64(7), uint8(200), uint16(5))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8, slots uint16) {
		S := int(slots)%wire.MaxSlots + 1
		if S > 4096 {
			S = S%4096 + 1
		}
		simulate(t, seed, int(steps), S)
	})
}

func TestWaitingSinceIsKept(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	next := Plan(start(4, "a"), Input{Live: []string{"a", "b"}, Since: map[string]time.Time{"b": at}})
	if len(next.Waiting) != 1 || !next.Waiting[0].Since.Equal(at) {
		t.Fatalf("waiting = %+v", next.Waiting)
	}
}

// parseTable must agree with encoding/json wherever it answers, and
// answer for everything a leader writes.
func TestParseTable(t *testing.T) {
	for _, c := range []struct {
		in   string
		want wire.SlotTable
		ok   bool
	}{
		{`[0,1,2]`, wire.SlotTable{0, 1, 2}, true},
		{` [ 0 , 12 ,3 ] `, wire.SlotTable{0, 12, 3}, true},
		{`[]`, wire.SlotTable{}, true},
		{`null`, nil, true},
		{`[01]`, nil, false},
		{`[-1]`, nil, false},
		{`[1.5]`, nil, false},
		{`[1e2]`, nil, false},
		{`[1234567890]`, nil, false},
		{`[1,]`, nil, false},
		{`[1 2]`, nil, false},
		{`[1]x`, nil, false},
		{`{}`, nil, false},
		{``, nil, false},
	} {
		got, ok := wire.ParseTable([]byte(c.in))
		if ok != c.ok || ok && !slices.Equal(got, c.want) || ok && (got == nil) != (c.want == nil) {
			t.Errorf("parseTable(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	m := Plan(wire.Map{Schema: wire.SchemaVersion, Slots: 1024}, Input{Live: []string{"a", "b", "c"}, Ready: map[string]bool{"a": true, "b": true, "c": true}, Since: map[string]time.Time{}})
	m.Version = 1
	got, err := wire.DecodeMap(m.Encode(), 1024)
	if err != nil || !slices.Equal(got.Table, m.Table) {
		t.Fatalf("round trip: %v", err)
	}
}

func FuzzParseTable(f *testing.F) {
	for _, s := range []string{`[0,1,2]`, `[]`, `null`, `[01]`, `[-1]`, ` [ 3 ] `, `[1e2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.ParseTable(b)
		var want []int32
		err := json.Unmarshal(b, &want)
		if ok && (err != nil || !slices.Equal(got, want)) {
			t.Fatalf("parseTable(%q) = %v, json: %v, %v", b, got, want, err)
		}
		var tab wire.SlotTable
		terr := json.Unmarshal(b, &tab)
		if (terr == nil) != (err == nil) || err == nil && !slices.Equal([]int32(tab), want) {
			t.Fatalf("slotTable(%q) = %v, %v; json: %v, %v", b, tab, terr, want, err)
		}
	})
}

// equalShares gives what the rational arithmetic gives, for equal
// capacities.
func TestEqualShares(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		n := 1 + rng.IntN(40)
		S := rng.IntN(300)
		caps, count := make([]float64, n), make([]int, n)
		c := []float64{1, 0.5, 3, 1e-9}[rng.IntN(4)]
		for i := range caps {
			caps[i] = c
		}
		for range S {
			count[rng.IntN(n)]++ // a table some members own more of
		}
		if rng.IntN(3) == 0 {
			clear(count)
		}
		if got, want := equalShares(S, count), ratShares(S, caps, count); !slices.Equal(got, want) {
			t.Fatalf("equalShares(%d, %v) = %v, ratShares = %v", S, count, got, want)
		}
	}
}

func TestShares(t *testing.T) {
	tests := []struct {
		name  string
		S     int
		caps  []float64
		count []int
		want  []int
	}{
		{"equal, whole", 1024, []float64{1, 1, 1, 1}, []int{0, 0, 0, 0}, []int{256, 256, 256, 256}},
		{"equal, the larger shares to who owns most", 10, []float64{1, 1, 1}, []int{3, 4, 3}, []int{3, 4, 3}},
		{"equal, ties to the lower index", 10, []float64{1, 1, 1}, []int{0, 0, 0}, []int{4, 3, 3}},
		{"proportional", 1024, []float64{1, 1, 2}, []int{0, 0, 0}, []int{256, 256, 512}},
		{"the issue's second variant", 1024, []float64{1, 1, 1, 1, 2, 2, 4, 4}, make([]int, 8), []int{64, 64, 64, 64, 128, 128, 256, 256}},
		{"rounded up for the larger fraction", 10, []float64{1, 2}, []int{0, 0}, []int{3, 7}},           // 3.33, 6.67
		{"rounded up for who owns most above its floor", 10, []float64{1, 2}, []int{4, 6}, []int{4, 6}}, // a table within one slot stays
		{"tiny and huge", 8, []float64{1e-300, 1e300}, []int{0, 0}, []int{0, 8}},
		{"one member", 7, []float64{0.25}, []int{0}, []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shares(tt.S, tt.caps, tt.count); !slices.Equal(got, tt.want) {
				t.Errorf("shares(%d, %v, %v) = %v, want %v", tt.S, tt.caps, tt.count, got, tt.want)
			}
		})
	}
}

// FuzzShares checks shares on any capacities and counts: the shares sum to
// S, each is within one slot of S·c/Σc, and a table that already fits them
// is kept.
func FuzzShares(f *testing.F) {
	f.Add(uint16(1024), 1.0, 2.0, 3.5, uint16(10), uint16(20), uint16(30))
	f.Add(uint16(7), 1e-9, 1e9, 0.5, uint16(0), uint16(7), uint16(0))
	f.Fuzz(func(t *testing.T, slots uint16, a, b, c float64, ca, cb, cc uint16) {
		S := int(slots)%wire.MaxSlots + 1
		caps := []float64{wire.CapacityOr1(a), wire.CapacityOr1(b), wire.CapacityOr1(c)}
		count := []int{int(ca) % (S + 1), int(cb) % (S + 1), int(cc) % (S + 1)}
		got := shares(S, caps, count)
		sum := 0
		total := new(big.Rat)
		for _, x := range caps {
			total.Add(total, new(big.Rat).SetFloat64(x))
		}
		for i, n := range got {
			sum += n
			exact := new(big.Rat).Quo(new(big.Rat).Mul(new(big.Rat).SetFloat64(caps[i]), big.NewRat(int64(S), 1)), total)
			diff := new(big.Rat).Sub(big.NewRat(int64(n), 1), exact)
			if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("share %d of %v: %d, exact %s", i, caps, n, exact.FloatString(3))
			}
		}
		if sum != S {
			t.Fatalf("shares %v sum to %d, want %d", got, sum, S)
		}
		if again := shares(S, caps, got); !slices.Equal(again, got) {
			t.Fatalf("shares of a fitting table moved: %v then %v", got, again)
		}
	})
}

// parseNames must agree with encoding/json wherever it answers, and
// answer for the names leaders write.
func TestParseNames(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{`["a","bc","m0001"]`, []string{"a", "bc", "m0001"}, true},
		{` [ "a" , "" ,"c" ] `, []string{"a", "", "c"}, true},
		{`[]`, []string{}, true},
		{`null`, nil, true},
		{`["a\"b"]`, nil, false},
		{`["a\u0062"]`, nil, false},
		{`["é"]`, nil, false},
		{`["a",]`, nil, false},
		{`["a" "b"]`, nil, false},
		{`["a"]x`, nil, false},
		{`[1]`, nil, false},
		{`["a`, nil, false},
		{``, nil, false},
	} {
		got, ok := wire.ParseNames([]byte(c.in))
		if ok != c.ok || ok && !slices.Equal(got, c.want) || ok && (got == nil) != (c.want == nil) {
			t.Errorf("parseNames(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
		if ok && cap(got) != len(got) {
			t.Errorf("parseNames(%q): capacity %d for %d names", c.in, cap(got), len(got))
		}
	}
}

func FuzzParseNames(f *testing.F) {
	for _, s := range []string{`["a","b"]`, `[]`, `null`, `["a\"b"]`, ` [ "x" ] `, `["é"]`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.ParseNames(b)
		var want []string
		err := json.Unmarshal(b, &want)
		if ok && (err != nil || !slices.Equal(got, want)) {
			t.Fatalf("parseNames(%q) = %q, json: %q, %v", b, got, want, err)
		}
		var l wire.MemberList
		lerr := json.Unmarshal(b, &l)
		if (lerr == nil) != (err == nil) || err == nil && !slices.Equal([]string(l), want) {
			t.Fatalf("memberList(%q) = %q, %v; json: %q, %v", b, l, lerr, want, err)
		}
	})
}

// parseMap decodes only what encoding/json decodes the same way.
func FuzzParseMap(f *testing.F) {
	m := wire.Map{Schema: wire.SchemaVersion, Version: 7, Slots: 4, Members: []string{"a", "b"}, Table: wire.SlotTable{0, 1, 1, 0}}
	for _, s := range [][]byte{
		m.Encode(),
		wire.WithTransition(m.Encode(), wire.Transition{View: 9, From: 6, Gone: []string{"c"}}),
		wire.WithTransition(m.Encode(), wire.Transition{View: 9, Incs: map[string]int64{"a": 3}}),
		[]byte(`{"schema":3,"version":1,"slots":1,"members":["a"],"table":[0],"byLoad":true}`),
		[]byte(`{"Version":2}`), []byte(`{"version":1,"version":2}`), []byte(`{"version":1.0}`),
		[]byte(`{"version":-0,"leader":"x\"y"}`), []byte(`{}`), []byte(` { "slots" : 2 } `),
		[]byte(`{"waiting":[{"name":"w"}]}`), []byte(`{"leave":["a"]}`), []byte(`{"x":[1,"a",true]}`),
		[]byte(`{"version":99999999999999999999}`), []byte(`{"table":null,"members":null}`),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.ParseMap(b)
		if !ok {
			return
		}
		var want wire.Map
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseMap(%q) = %+v; encoding/json refuses it: %v", b, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseMap(%q) = %+v; encoding/json: %+v", b, got, want)
		}
	})
}
