package rink

import "time"

// timerKind names one of the run goroutine's timers. The core sets
// deadlines and never waits: the driver wakes it at the earliest deadline
// (see run) and the core handles those that are due (see onTimers). Time
// reaches the core only through r.now and r.clock, so a simulator can set
// it.
type timerKind uint8

const (
	timerPlan    timerKind = iota // leader: plan again (a rebalance delay or a retry ran out)
	timerLoad                     // leader: a load round is due
	timerWarm                     // leader: a warm-up wait ran out
	timerDrain                    // the earliest drain deadline (see drain.go)
	timerQuiet                    // the quiet after a restore ends (see restore.go)
	timerLeaveBy                  // a member leaving with a warm-up hands over now (see warmup.go)
	numTimers
)

// timers holds the core's deadlines.
type timers struct {
	at [numTimers]time.Time // zero: not set. The leader's are set only while it leads
}

// SetTimer sets timer k to fire at t (replacing what it was set to).
func (t *timers) SetTimer(k timerKind, at time.Time) { t.at[k] = at }

// StopTimer unsets timer k.
func (t *timers) StopTimer(k timerKind) { t.at[k] = time.Time{} }

// TimerSet reports whether timer k is set.
func (t *timers) TimerSet(k timerKind) bool { return !t.at[k].IsZero() }

// NextTimer returns the earliest deadline set (false: none).
func (t *timers) NextTimer() (first time.Time, ok bool) {
	for _, at := range t.at {
		if !at.IsZero() && (!ok || at.Before(first)) {
			first, ok = at, true
		}
	}
	return first, ok
}

// TakeDue unsets and returns the timers due at now, in kind order.
func (t *timers) TakeDue(now time.Time) (due []timerKind) {
	for k, at := range t.at {
		if !at.IsZero() && !now.Before(at) {
			due = append(due, timerKind(k))
			t.at[k] = time.Time{}
		}
	}
	return due
}

// now is the core's wall-and-monotonic time: the simulator's virtual time
// when it sets nowFn, time.Now otherwise.
func (r *Rink) now() time.Time {
	if r.nowFn != nil {
		return r.nowFn()
	}
	return time.Now()
}

// clock is the core's fence clock (see fenceClock): the simulator's when it
// sets clockFn.
func (r *Rink) clock() int64 {
	if r.clockFn != nil {
		return r.clockFn()
	}
	return fenceClock()
}
