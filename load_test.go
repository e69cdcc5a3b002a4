package rink

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestLoadMeter(t *testing.T) {
	const S = 4
	m := newLoadMeter()
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
	fresh := newLoadMeter()
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
	m := newLoadMeter()
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

func FuzzDecodeLoad(f *testing.F) {
	f.Add([]byte(`{"v":1,"slots":[[0,1.5,3,2],[7,0,0,1]]}`))
	f.Add([]byte(`{"v":1,"slots":[[1e300,1,1,1]]}`))
	f.Add([]byte(`{"v":1,"slots":[[0,1.5,3,2]],"await":[[0,3],[5,2],[5,1],[70,1],[6,-1],[7,0.5],[8]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, ok := wire.DecodeLoad(data, 64)
		if !ok && (len(rep.Slots) > 0 || len(rep.Await) > 0) {
			t.Fatal("entries from a value that does not decode")
		}
		seen := map[int]bool{}
		for _, s := range rep.Slots {
			if s.Slot < 0 || s.Slot >= 64 || seen[s.Slot] || !(s.Rate >= 0) || math.IsInf(s.Rate, 1) || !(s.Age >= 0) || s.Roles < 0 {
				t.Fatalf("entry %+v let through", s)
			}
			seen[s.Slot] = true
		}
		for _, a := range rep.Await {
			if a.Slot < 0 || a.Slot >= 64 || seen[a.Slot] || a.Roles < 0 {
				t.Fatalf("await entry %+v let through", a)
			}
			seen[a.Slot] = true
		}
		if ok {
			again, ok2 := wire.DecodeLoad(rep.Encode(), 64)
			if !ok2 || len(again.Slots) != len(rep.Slots) || !slices.Equal(again.Await, rep.Await) {
				t.Fatalf("re-encoded report does not decode alike: %s", rep.Encode())
			}
		}
	})
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
	if !loadChanged(rep, wire.WithRoles(rates, rolesOf([]int32{5, 3, 0, 1}), ownedOf(4, owns))) {
		t.Error("other roles awaited in a slot not held: not a change")
	}
	if loadChanged(rep, wire.WithRoles(rates, rolesOf([]int32{5, 3, 0, 2}), ownedOf(4, owns))) {
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
		if got := loadChanged(base, c.next); got != c.want {
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

// AddLoad is on the holders' hot path: it must not allocate.
func TestAddLoadAllocs(t *testing.T) {
	r := &Rink{opts: options{slots: 1024}, load: newLoadAcc(1024)}
	if n := testing.AllocsPerRun(1000, func() { r.AddLoad("BTC/ETH", 1.5) }); n != 0 {
		t.Errorf("AddLoad allocates %v times per call", n)
	}
	if got := r.load.acc.load(wire.SlotOf("BTC/ETH", 1024)); got != 1501.5 {
		t.Errorf("accumulated %v, want 1501.5", got) // AllocsPerRun runs it once more to warm up
	}
}

func BenchmarkAddLoad(b *testing.B) {
	r := &Rink{opts: options{slots: 1024}, load: newLoadAcc(1024)}
	roles := []string{"BTC/ETH", "partition:42", "tenant-7", "leader"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.AddLoad(roles[i&3], 1)
			i++
		}
	})
}

// Members report their load and awaited roles, observers see them, and a
// member writes its load key at most once per interval, and not at all
// while its figures hold still.
func TestLoadReported(t *testing.T) {
	name := rinkName(t)
	// Balanced by count: the roles stay where they hash (by load, the
	// leader would even out the three and the one).
	opts := []Option{WithLoadInterval(100 * time.Millisecond), WithLoadWindow(time.Second), WithSlots(64), WithImbalanceTolerance(0)}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	ob, err := NewObserver(newClient(t), name, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	eventually(t, 10*time.Second, "both ranked", func() bool { return ob.State().Version > 0 && len(ob.State().Members) == 2 })
	// One role of each member, awaited, and two more of a's.
	var ra, rb []string
	for i := 0; len(ra) < 3 || len(rb) < 1; i++ {
		role := "role-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		switch o, _ := ob.Owner(role); {
		case o == "a" && len(ra) < 3:
			ra = append(ra, role)
		case o == "b" && len(rb) < 1:
			rb = append(rb, role)
		}
	}
	for _, role := range ra {
		if _, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.AwaitRoleContext(ctxTimeout(t, 10*time.Second), rb[0]); err != nil {
		t.Fatal(err)
	}
	member := func(n string) MemberState {
		for _, m := range ob.State().Members {
			if m.Name == n {
				return m
			}
		}
		return MemberState{}
	}
	eventually(t, 10*time.Second, "awaited roles reported", func() bool { return member("a").Roles == 3 && member("b").Roles == 1 })

	// a does three times b's work.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, 5*time.Millisecond, func() {
			a.AddLoad(ra[0], 2)
			a.AddLoad(ra[1], 1)
			b.AddLoad(rb[0], 1)
		})
	}()
	defer func() { cancel(); <-done }()
	eventually(t, 10*time.Second, "loads reported in the ratio of the work", func() bool {
		la, lb := member("a").Load, member("b").Load
		return lb > 0 && la/lb > 2.5 && la/lb < 3.5
	})

	// At most one write per interval.
	cli := newClient(t)
	key := newKeys(name).Load("a")
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp, err)
	}
	v0, t0 := resp.Kvs[0].Version, time.Now()
	eventually(t, 10*time.Second, "a second gone by", func() bool { return time.Since(t0) > time.Second })
	resp, err = cli.Get(ctxTimeout(t, 5*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp, err)
	}
	if n, most := resp.Kvs[0].Version-v0, int64(time.Since(t0)/(100*time.Millisecond))+1; n > most {
		t.Errorf("%d writes of the load key in %v, want at most %d", n, time.Since(t0), most)
	}

	// Once the work stops and the rates have decayed, the summary stays
	// still and nothing is written.
	cancel()
	<-done
	eventually(t, 20*time.Second, "the load decayed", func() bool { return member("a").Load == 0 && member("b").Load == 0 })
	resp, _ = cli.Get(ctxTimeout(t, 5*time.Second), key)
	v1, t1 := resp.Kvs[0].Version, time.Now()
	eventually(t, 10*time.Second, "a second gone by", func() bool { return time.Since(t1) > time.Second })
	resp, _ = cli.Get(ctxTimeout(t, 5*time.Second), key)
	if n := resp.Kvs[0].Version - v1; n != 0 {
		t.Errorf("%d writes of a load key that did not change", n)
	}
}

// denseTick ticks m with per-slot arrays, as the tests write them: a slot
// is held when since is set.
func denseTick(m *loadMeter, now time.Time, units []float64, since []time.Time, roles []int32, interval, window time.Duration) wire.LoadReport {
	var held []heldLoad
	for s := range since {
		if !since[s].IsZero() {
			held = append(held, heldLoad{slot: s, units: units[s], since: since[s]})
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

func rateOf(m *loadMeter, s int) float64 {
	if ms := m.slots[s]; ms != nil {
		return ms.rate
	}
	return 0
}

// A member's first load summary is written with its key, in the join's
// transaction (a write less per join), and the reporter does not write the
// same summary again.
func TestLoadWrittenWithKey(t *testing.T) {
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"), WithLoadInterval(100*time.Millisecond))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	k := newKeys(name)
	cli := newClient(t)
	resp, err := cli.Txn(ctxTimeout(t, 5*time.Second)).Then(clientv3.OpGet(k.Member("a")), clientv3.OpGet(k.Load("a"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	mk, lk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(mk) != 1 || len(lk) != 1 {
		t.Fatalf("member key %v, load key %v", mk, lk)
	}
	if lk[0].CreateRevision != mk[0].CreateRevision || lk[0].Lease != mk[0].Lease {
		t.Fatalf("load key created at %d on lease %x, member key at %d on lease %x: not in one transaction",
			lk[0].CreateRevision, lk[0].Lease, mk[0].CreateRevision, mk[0].Lease)
	}
	// Idle, it holds every slot now: other slots, no load, nothing new to
	// say (see loadChanged). Two intervals on, the key is as written (or
	// measured once).
	v0, t0 := lk[0].Version, time.Now()
	eventually(t, 10*time.Second, "half a second gone by", func() bool { return time.Since(t0) > 500*time.Millisecond })
	resp2, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Load("a"))
	if err != nil || len(resp2.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp2, err)
	}
	if n := resp2.Kvs[0].Version - v0; n > 1 {
		t.Fatalf("an idle member rewrote its load summary %d times in half a second", n)
	}
}

// A member that awaits roles before it owns a slot reports them once a
// map gives it slots, not at its next load interval: in a rink that has
// seen no load, they are what turns the leader to balancing by load, and
// until it hears of them it says that the rink is at rest, balanced by
// count, and moves slots a load interval later (issue 44: the flake of
// TestNewLeaderKeepsLoadBalance, whose first member's summary went out
// before the map that ranked it, and said nothing of its roles).
func TestGainedSlotsReportRoles(t *testing.T) {
	name := rinkName(t)
	// (b's first load interval ends after the test: only an early write
	// can tell the leader. Early writes come at most one per tenth of an
	// interval, 2 s: the delay ranks b after b's last.)
	opts := []Option{WithLoadInterval(20 * time.Second), WithSlots(64)}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"), WithRebalanceDelay(4*time.Second))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	set, err := b.Watch(Handler{Assigned: func(context.Context, string) {}}, partitions(256)...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// b awaits roles in every slot and owns none: what it writes as it
	// joins and as it awaits them says nothing of them.
	eventually(t, 10*time.Second, "b ranked", func() bool { return b.Rank().Index >= 0 && len(a.ownersNow().Members) == 2 })
	if a.ownersNow().ByLoad {
		t.Fatal("the map that ranks b is balanced by load: the test shows nothing")
	}
	eventually(t, 10*time.Second, "the rink balanced by load (b's roles reported)", func() bool { return a.ownersNow().ByLoad })
}
