package core

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

func TestLoadMeter(t *testing.T) {
	const S = 4
	m := NewLoadMeter()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	since := []time.Time{t0, t0, {}, t0}
	roles := []int32{0, 2, 5, 0}
	var rep wire.LoadReport
	// 10 units per 100 ms in slot 0 (100/s), 1 per 100 ms in slot 3: with a
	// window of 1 s the rates approach 100 and 10.
	for i := 1; i <= 60; i++ {
		rep = denseTick(m, t0.Add(time.Duration(i)*100*time.Millisecond), []float64{10, 0, 7, 1}, since, roles, 100*time.Millisecond, time.Second)
	}
	want := []wire.SlotLoad{{Slot: 0, Rate: 100, Age: 6}, {Slot: 1, Roles: 2, Age: 6}, {Slot: 3, Rate: 10, Age: 6}} // every held slot
	if len(rep.Slots) != len(want) {
		t.Fatalf("report %+v, want slots like %+v", rep, want)
	}
	for i, w := range want {
		g := rep.Slots[i]
		if g.Slot != w.Slot || g.Roles != w.Roles || g.Age != w.Age || math.Abs(g.Rate-w.Rate) > 0.01*w.Rate {
			t.Errorf("slot entry %d = %+v, want about %+v", i, g, w)
		}
	}
	// The units of a slot not held count for nothing (slot 2), and a slot
	// that stops being held loses its rate and its age.
	since[0] = time.Time{}
	rep = denseTick(m, t0.Add(61*100*time.Millisecond), []float64{10, 0, 7, 1}, since, roles, 100*time.Millisecond, time.Second)
	if rep.Slots[0].Slot != 1 || rateOf(m, 0) != 0 || m.slots[0] != nil {
		t.Errorf("after slot 0 was released: %+v, rate %v", rep, rateOf(m, 0))
	}
	// A slot gained shows its rate from the first tick on, whenever in
	// the interval it was gained: 100/s gained 30 ms before a tick of
	// 100 ms adds 3 units by then.
	fresh := NewLoadMeter()
	t1 := t0.Add(time.Second)
	since = []time.Time{t1.Add(-30 * time.Millisecond), {}, {}, {}}
	rep = denseTick(fresh, t1, []float64{3, 0, 0, 0}, since, roles, 100*time.Millisecond, time.Minute)
	if len(rep.Slots) != 1 || math.Abs(rep.Slots[0].Rate-100) > 1e-6 {
		t.Errorf("first tick after gaining a slot 30 ms ago: %+v, want a rate of 100", rep)
	}
	for i := 1; i <= 3; i++ {
		rep = denseTick(fresh, t1.Add(time.Duration(i)*100*time.Millisecond), []float64{10, 0, 0, 0}, since, roles, 100*time.Millisecond, time.Minute)
		if math.Abs(rep.Slots[0].Rate-100) > 1e-6 {
			t.Errorf("tick %d after gaining the slot: %+v, want a rate of 100", i, rep.Slots[0])
		}
	}
	// A slot gained again between two ticks starts again.
	since[0] = t1.Add(350 * time.Millisecond)
	rep = denseTick(fresh, t1.Add(400*time.Millisecond), []float64{5, 0, 0, 0}, since, roles, 100*time.Millisecond, time.Minute)
	if math.Abs(rep.Slots[0].Rate-100) > 1e-6 || rep.Slots[0].Age != 0.1 {
		t.Errorf("a slot gained anew 50 ms ago: %+v, want a rate of 100 and an age of 0.1", rep.Slots[0])
	}
	// Gained a moment ago: no rate yet.
	since[0] = t1.Add(500*time.Millisecond - 100*time.Microsecond)
	rep = denseTick(fresh, t1.Add(500*time.Millisecond), []float64{5, 0, 0, 0}, since, roles, 100*time.Millisecond, time.Minute)
	if rep.Slots[0].Rate != 0 || math.IsInf(rateOf(fresh, 0), 0) {
		t.Errorf("a slot gained 100 µs ago: %+v", rep.Slots[0])
	}
	// Without units the rate decays e-fold per window.
	since = []time.Time{{}, {}, {}, t0}
	before := rateOf(m, 3)
	for i := 62; i < 72; i++ {
		rep = denseTick(m, t0.Add(time.Duration(i)*100*time.Millisecond), make([]float64, S), since, roles, 100*time.Millisecond, time.Second)
	}
	if got := rateOf(m, 3) / before; math.Abs(got-math.Exp(-1)) > 0.01 {
		t.Errorf("after one window without load the rate is %.3f of what it was, want 1/e", got)
	}
}

func TestLoadCodec(t *testing.T) {
	rep := wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 0, Rate: 123.456789, Age: 61, Roles: 3}, {Slot: 1023, Rate: 1e-5, Age: 0, Roles: 0}}}
	got, ok := wire.DecodeLoad(rep.Encode(), 1024)
	if !ok || len(got.Slots) != 2 || got.Slots[0].Rate != 123.5 || got.Slots[0].Age != 61 || got.Slots[0].Roles != 3 || got.Slots[1].Slot != 1023 {
		t.Fatalf("round trip of %s: %+v, %v", rep.Encode(), got, ok)
	}
	// A rate that overflowed is written as the largest one kept, and read.
	if got, ok := wire.DecodeLoad(wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Rate: math.Inf(1)}}}.Encode(), 4); !ok || len(got.Slots) != 1 {
		t.Errorf("an infinite rate made a summary that does not decode: %s", wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Rate: math.Inf(1)}}}.Encode())
	}
	// Sums of AddLoad that overflow count for nothing.
	m := NewLoadMeter()
	now := time.Now()
	if rep := denseTick(m, now, []float64{math.Inf(1), 1}, []time.Time{now.Add(-time.Second), now.Add(-time.Second)}, []int32{0, 0}, time.Second, time.Minute); rep.Slots[0].Rate != 0 || math.IsInf(rateOf(m, 0), 0) {
		t.Errorf("an overflowed sum gave rate %v", rep.Slots[0].Rate)
	}
	for _, c := range []struct {
		value string
		ok    bool
		n     int
	}{
		{`garbage`, false, 0},
		{`{"v":2,"slots":[[0,1,1,1]]}`, false, 0}, // a later format: not read
		{`{"v":1}`, true, 0},
		{`{"v":1,"slots":[[0,1,1,1],[0,2,2,2]]}`, true, 1},                 // a slot twice: the first counts
		{`{"v":1,"slots":[[1024,1,1,1],[-1,1,1,1],[0.5,1,1,1]]}`, true, 0}, // out of range, not whole
		{`{"v":1,"slots":[[1,-1,1,1],[2,1,-1,1],[3,1,1,-1],[4,1,1]]}`, true, 0},
		{`{"v":1,"slots":[[1,1e999,1,1]]}`, false, 0}, // does not decode
		{`{"v":1,"slots":[[1,1e16,1,1]]}`, true, 0},   // above maxRate
		{`{"v":1,"slots":[[1,2,3,4,"later"]]}`, false, 0},
		{`{"v":1,"slots":[[1,2,3,4,5]]}`, true, 1}, // later fields are ignored
	} {
		got, ok := wire.DecodeLoad([]byte(c.value), 1024)
		if ok != c.ok || len(got.Slots) != c.n {
			t.Errorf("decodeLoad(%s) = %+v, %v; want %d slots, %v", c.value, got, ok, c.n, c.ok)
		}
	}
}

// The roles a member awaits in the slots it owns but does not list as held
// are reported beside them, 0 included, each slot once; members before
// them ignore "await".
func TestLoadAwait(t *testing.T) {
	rates := wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Rate: 2, Roles: 0}}}
	owns := func(s int) bool { return s != 0 }
	rep := wire.WithRoles(rates, rolesOf([]int32{5, 3, 0, 2}), ownedOf(4, owns))
	want := wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Rate: 2, Roles: 3}}, Await: []wire.SlotRoles{{Slot: 2, Roles: 0}, {Slot: 3, Roles: 2}}}
	if !slices.Equal(rep.Slots, want.Slots) || !slices.Equal(rep.Await, want.Await) {
		t.Fatalf("withRoles = %+v, want %+v", rep, want)
	}
	enc := string(rep.Encode())
	if enc != `{"v":1,"slots":[[1,2,0,3]],"await":[[2,0],[3,2]]}` {
		t.Fatalf("encoded %s", enc)
	}
	if got, ok := wire.DecodeLoad([]byte(enc), 4); !ok || !slices.Equal(got.Await, want.Await) {
		t.Fatalf("decoded %+v", got)
	}
	early := rep
	early.Unmeasured = true
	if enc := string(early.Encode()); enc != `{"v":1,"slots":[[1,2,0,3]],"unmeasured":true,"await":[[2,0],[3,2]]}` {
		t.Fatalf("encoded %s", enc)
	}
	if got, ok := wire.DecodeLoad(early.Encode(), 4); !ok || !got.Unmeasured {
		t.Fatalf("decoded %+v: a summary written before the first interval reads as measured", got)
	}
	if !LoadChanged(rep, wire.WithRoles(rates, rolesOf([]int32{5, 3, 0, 1}), ownedOf(4, owns))) {
		t.Error("other roles awaited in a slot not held: not a change")
	}
	if LoadChanged(rep, wire.WithRoles(rates, rolesOf([]int32{5, 3, 0, 2}), ownedOf(4, owns))) {
		t.Error("the same summary: a change")
	}
}

func TestLoadChanged(t *testing.T) {
	base := wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Rate: 50, Roles: 1}, {Slot: 2, Rate: 50, Roles: 1}}}
	with := func(f func(*wire.LoadReport)) wire.LoadReport {
		r := wire.LoadReport{Slots: slices.Clone(base.Slots)}
		f(&r)
		return r
	}
	for _, c := range []struct {
		name string
		next wire.LoadReport
		want bool
	}{
		{"same", base, false},
		{"a little", with(func(r *wire.LoadReport) { r.Slots[0].Rate = 54 }), false},
		{"noticeably", with(func(r *wire.LoadReport) { r.Slots[0].Rate = 56 }), true},
		{"another slot", with(func(r *wire.LoadReport) { r.Slots[1].Slot = 3 }), true},
		{"a slot less", wire.LoadReport{Slots: base.Slots[:1]}, true},
		{"roles", with(func(r *wire.LoadReport) { r.Slots[1].Roles = 2 }), true},
		{"ages only", with(func(r *wire.LoadReport) { r.Slots[1].Age = 99 }), false},
	} {
		if got := LoadChanged(base, c.next); got != c.want {
			t.Errorf("%s: loadChanged = %v, want %v", c.name, got, c.want)
		}
	}
	// Without load, other slots change nothing a leader balancing by
	// count uses; the first load, a role awaited, or the first measured
	// interval does.
	idle := wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1}, {Slot: 2}}, Await: []wire.SlotRoles{{Slot: 7}}}
	for _, c := range []struct {
		name string
		next wire.LoadReport
		want bool
	}{
		{"other slots, no load", wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 3}}}, false},
		{"slots awaited, no roles", wire.LoadReport{Await: []wire.SlotRoles{{Slot: 3}, {Slot: 4}}}, false},
		{"no slots", wire.LoadReport{}, false},
		{"a rate", wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 3, Rate: 1}}}, true},
		{"a role", wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 1, Roles: 1}, {Slot: 2}}}, true},
		{"a role awaited", wire.LoadReport{Slots: idle.Slots, Await: []wire.SlotRoles{{Slot: 5, Roles: 1}}}, true},
		{"other slots, measured now", wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 3}}, Unmeasured: true}, true},
	} {
		if got := !wire.IdleAlike(idle, c.next); got != c.want {
			t.Errorf("idle, %s: differs = %v, want %v", c.name, got, c.want)
		}
	}
}

// denseTick ticks m with per-slot arrays, as the tests write them: a slot
// is held when since is set.
func denseTick(m *LoadMeter, now time.Time, units []float64, since []time.Time, roles []int32, interval, window time.Duration) wire.LoadReport {
	var held []HeldLoad
	for s := range since {
		if !since[s].IsZero() {
			held = append(held, HeldLoad{Slot: s, Units: units[s], Since: since[s]})
		}
	}
	return m.Tick(now, held, rolesOf(roles), interval, window)
}

func rolesOf(roles []int32) func(int) int32 {
	return func(s int) int32 {
		if s < len(roles) {
			return roles[s]
		}
		return 0
	}
}

func ownedOf(n int, owns func(int) bool) []int {
	var out []int
	for s := range n {
		if owns(s) {
			out = append(out, s)
		}
	}
	return out
}

func rateOf(m *LoadMeter, s int) float64 {
	if ms := m.slots[s]; ms != nil {
		return ms.rate
	}
	return 0
}
