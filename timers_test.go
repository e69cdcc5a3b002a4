package rink

import (
	"slices"
	"testing"
	"time"
)

func TestTimers(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	var ts timers
	if _, ok := ts.NextTimer(); ok {
		t.Fatal("a zero timers has a deadline")
	}
	ts.SetTimer(timerDrain, at(30))
	ts.SetTimer(timerPlan, at(20))
	ts.SetTimer(timerQuiet, at(20))
	ts.SetTimer(timerLoad, at(50))
	if first, ok := ts.NextTimer(); !ok || !first.Equal(at(20)) {
		t.Fatalf("next = %v %v, want +20ms", first, ok)
	}
	if due := ts.TakeDue(at(19)); len(due) != 0 {
		t.Fatalf("due before any deadline: %v", due)
	}
	// Due ones come in kind order, whatever order they were set in, and
	// are unset.
	if due := ts.TakeDue(at(30)); !slices.Equal(due, []timerKind{timerPlan, timerDrain, timerQuiet}) {
		t.Fatalf("due at +30ms = %v", due)
	}
	if ts.TimerSet(timerPlan) || ts.TimerSet(timerDrain) || !ts.TimerSet(timerLoad) {
		t.Fatal("takeDue left a due timer set, or unset one not due")
	}
	ts.SetTimer(timerLoad, time.Time{}) // (zero: unset)
	if _, ok := ts.NextTimer(); ok {
		t.Fatal("a timer set to the zero time is set")
	}
	ts.SetTimer(timerWarm, at(5))
	ts.StopTimer(timerWarm)
	if due := ts.TakeDue(at(100)); len(due) != 0 {
		t.Fatalf("a stopped timer came due: %v", due)
	}
}
