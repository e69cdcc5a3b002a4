package core

import (
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// reporterRun ticks r every interval from t0 for n intervals, with units
// added at a steady rate to the slots held (each gained at its since), and
// returns at which ticks it decided to write (each decision written).
func reporterRun(r *LoadReporter, inc *Inc, t0 time.Time, n int, held []HeldLoad, byLoad bool) []int {
	var writes []int
	none := func(int) int32 { return 0 }
	for i := 1; i <= n; i++ {
		now := t0.Add(time.Duration(i) * r.Interval)
		var h []HeldLoad
		for _, x := range held {
			if !x.Since.After(now) {
				h = append(h, x)
			}
		}
		r.Tick(now, h, none)
		if next := r.Next(inc, true, none, nil, byLoad); next.Write {
			r.Written(inc, next.Report)
			writes = append(writes, i)
		}
	}
	return writes
}

// TestLoadReporterWritesWhenASlotMatures: a slot gained mid-interval is
// reported at once with a young age, which the leader does not take a
// rate from (see rink's estimate); its rate changes too little to be
// written again. In a rink balanced by load the reporter writes once more
// when the slot has been held for half a window, and then no more while
// nothing changes. (Without that write the leader kept the slot's previous
// figure for good: found by the simulator with load, seed 133.)
func TestLoadReporterWritesWhenASlotMatures(t *testing.T) {
	const interval, window = 500 * time.Millisecond, 1500 * time.Millisecond
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inc := &Inc{Lease: 1, CreateRev: 2}
	held := []HeldLoad{{Slot: 3, Units: 50, Since: t0}, {Slot: 7, Units: 20, Since: t0.Add(interval*4 + interval/2)}}

	r := NewLoadReporter(interval, window)
	writes := reporterRun(r, inc, t0, 12, held, true)
	// Tick 1: the first summary (a new incarnation). Slot 3 matures at
	// 0.75 s (tick 2: written for that alone), slot 7, gained at 2.25 s,
	// is listed at tick 5 (a new set of slots) and matures at 3 s (tick 6,
	// its rate changed too); its rate settles after (tick 8), and nothing
	// is written from then on.
	if want := []int{1, 2, 5, 6, 8}; !equalInts(writes, want) {
		t.Fatalf("writes at ticks %v, want %v", writes, want)
	}
	for _, e := range r.last.Slots {
		if e.Age < window.Seconds()/2 || e.Rate <= 0 {
			t.Fatalf("the last summary written lists %+v: not yet mature", e)
		}
	}

	// Balanced by count, a maturing slot is no reason to write (tick 2):
	// its rate is not used.
	r = NewLoadReporter(interval, window)
	if writes := reporterRun(r, inc, t0, 12, held, false); !equalInts(writes, []int{1, 5, 6, 8}) {
		t.Fatalf("balanced by count: writes at ticks %v, want [1 5 6 8]", writes)
	}
}

// TestLoadReporterNext: what the reporter writes, and when: nothing
// without an incarnation or once it ended; the summary a join wrote with
// the member key counts as written; a summary that changed by less than
// loadChange is not written again, nor an idle one while the map is not
// balanced by load.
func TestLoadReporterNext(t *testing.T) {
	r := NewLoadReporter(time.Second, 3*time.Second)
	none := func(int) int32 { return 0 }
	if n := r.Next(nil, true, none, nil, true); n.Write || n.Joined {
		t.Fatalf("no incarnation: %+v", n)
	}
	inc := &Inc{Lease: 1}
	if n := r.Next(inc, false, none, nil, true); n.Write {
		t.Fatalf("an ended incarnation: %+v", n)
	}
	joined := &Inc{Lease: 2, JoinLoad: &wire.LoadReport{Unmeasured: true}}
	n := r.Next(joined, true, none, nil, false)
	if !n.Joined || n.Write || !n.Report.Unmeasured {
		t.Fatalf("a join's summary: %+v", n)
	}
	if n := r.Next(joined, true, none, nil, false); n.Joined || n.Write {
		t.Fatalf("the same again: %+v", n)
	}
	roles := func(s int) int32 { return int32(s) }
	if n := r.Next(joined, true, roles, []int{1, 2}, false); !n.Write || len(n.Report.Await) != 2 {
		t.Fatalf("roles awaited in owned slots, held none: %+v", n)
	}
	if d := r.WakeDelay(time.Unix(0, 0)); d != ReportPause {
		t.Fatalf("first wake waits %v", d)
	}
	now := time.Unix(100, 0)
	r.Woke(now)
	if d := r.WakeDelay(now.Add(10 * time.Millisecond)); d != 90*time.Millisecond {
		t.Fatalf("a wake right after one waits %v, want a tenth of an interval after the last", d)
	}
	txn := LoadTxn(wire.Keys{Prefix: "rink/x/"}, "m1", inc, wire.LoadReport{})
	if len(txn.Compare) != 2 || len(txn.Success) != 1 || txn.Success[0].GetRequestPut().Lease != 1 {
		t.Fatalf("txn %v", txn)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoadReporterForget: after Forget the next decision writes the
// summary, changed or not, and once it is written the reporter is back to
// writing only changes.
func TestLoadReporterForget(t *testing.T) {
	r := NewLoadReporter(time.Second, 3*time.Second)
	none := func(int) int32 { return 0 }
	inc := &Inc{Lease: 1}
	n := r.Next(inc, true, none, nil, true)
	r.Written(inc, n.Report)
	if n := r.Next(inc, true, none, nil, true); n.Write {
		t.Fatal("an unchanged summary written again")
	}
	r.Forget()
	if n := r.Next(nil, true, none, nil, true); n.Write {
		t.Fatal("written without an incarnation")
	}
	n = r.Next(inc, true, none, nil, true)
	if !n.Write {
		t.Fatal("not written after Forget")
	}
	r.Written(inc, n.Report)
	if n := r.Next(inc, true, none, nil, true); n.Write {
		t.Fatal("written again after the forced write")
	}
}

// TestAckViewUnreported: the ranked members with a live key and no load
// summary, sorted, at most MaxUnreported of them; a ranked member without a
// key (gone, or a ghost) and a live one that is not ranked are not asked.
func TestAckViewUnreported(t *testing.T) {
	v := &AckView{Members: map[string]AckMember{}, Ranked: map[string]bool{}}
	loads := map[string]wire.LoadReport{}
	for i := range 40 {
		name := string(rune('a'+i/26)) + string(rune('a'+i%26))
		v.Ranked[name] = true
		v.Members[name] = AckMember{}
	}
	v.Members["zz"] = AckMember{} // live, not ranked
	delete(v.Members, "aa")       // ranked, no key
	loads["ab"] = wire.LoadReport{}
	got := v.Unreported(loads)
	if len(got) != MaxUnreported || got[0] != "ac" || got[1] != "ad" {
		t.Fatalf("unreported %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("not sorted: %v", got)
		}
	}
	for name := range v.Ranked {
		loads[name] = wire.LoadReport{}
	}
	if got := v.Unreported(loads); len(got) != 0 {
		t.Fatalf("every summary known, yet unreported %v", got)
	}
}
