package core

import (
	"slices"
	"testing"
	"time"
)

func TestTimers(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	var ts Timers
	if _, ok := ts.NextTimer(); ok {
		t.Fatal("a zero timers has a deadline")
	}
	ts.SetTimer(TimerDrain, at(30))
	ts.SetTimer(TimerPlan, at(20))
	ts.SetTimer(TimerQuiet, at(20))
	ts.SetTimer(TimerLoad, at(50))
	if first, ok := ts.NextTimer(); !ok || !first.Equal(at(20)) {
		t.Fatalf("next = %v %v, want +20ms", first, ok)
	}
	if due := ts.TakeDue(at(19)); len(due) != 0 {
		t.Fatalf("due before any deadline: %v", due)
	}
	// Due ones come in kind order, whatever order they were set in, and
	// are unset.
	if due := ts.TakeDue(at(30)); !slices.Equal(due, []TimerKind{TimerPlan, TimerDrain, TimerQuiet}) {
		t.Fatalf("due at +30ms = %v", due)
	}
	if ts.TimerSet(TimerPlan) || ts.TimerSet(TimerDrain) || !ts.TimerSet(TimerLoad) {
		t.Fatal("takeDue left a due timer set, or unset one not due")
	}
	ts.SetTimer(TimerLoad, time.Time{}) // (zero: unset)
	if _, ok := ts.NextTimer(); ok {
		t.Fatal("a timer set to the zero time is set")
	}
	ts.SetTimer(TimerWarm, at(5))
	ts.StopTimer(TimerWarm)
	if due := ts.TakeDue(at(100)); len(due) != 0 {
		t.Fatalf("a stopped timer came due: %v", due)
	}
}
