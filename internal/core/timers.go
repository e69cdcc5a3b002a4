package core

import "time"

// timerKind names one of the run goroutine's timers. The core sets
// deadlines and never waits: the driver wakes it at the earliest deadline
// (see run) and the core handles those that are due (see onTimers). Time
// reaches the core only through r.now and r.clock, so a simulator can set
// it.
type TimerKind uint8

const (
	TimerPlan    TimerKind = iota // leader: plan again (a rebalance delay or a retry ran out)
	TimerLoad                     // leader: a load round is due
	TimerWarm                     // leader: a warm-up wait ran out
	TimerDrain                    // the earliest drain deadline (see drain.go)
	TimerQuiet                    // the quiet after a restore ends (see restore.go)
	TimerLeaveBy                  // a member leaving with a warm-up hands over now (see warmup.go)
	numTimers
)

// timers holds the core's deadlines.
type Timers struct {
	At [numTimers]time.Time // zero: not set. The leader's are set only while it leads
}

// SetTimer sets timer k to fire at t (replacing what it was set to).
func (t *Timers) SetTimer(k TimerKind, at time.Time) { t.At[k] = at }

// StopTimer unsets timer k.
func (t *Timers) StopTimer(k TimerKind) { t.At[k] = time.Time{} }

// TimerSet reports whether timer k is set.
func (t *Timers) TimerSet(k TimerKind) bool { return !t.At[k].IsZero() }

// NextTimer returns the earliest deadline set (false: none).
func (t *Timers) NextTimer() (first time.Time, ok bool) {
	for _, at := range t.At {
		if !at.IsZero() && (!ok || at.Before(first)) {
			first, ok = at, true
		}
	}
	return first, ok
}

// TakeDue unsets and returns the timers due at now, in kind order.
func (t *Timers) TakeDue(now time.Time) (due []TimerKind) {
	for k, at := range t.At {
		if !at.IsZero() && !now.Before(at) {
			due = append(due, TimerKind(k))
			t.At[k] = time.Time{}
		}
	}
	return due
}
