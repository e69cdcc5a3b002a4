package rink

import (
	"time"

	"github.com/rink-go/rink/internal/core"
)

// input is one thing that happened, for the core to act on in one step
// (see step): the core's only way in. Exactly the field that kind names is
// set.
//
// The first four kinds are handed to the run goroutine on one channel
// (handoffCh) and must not be lost: each sender waits until the run
// goroutine takes it, or else cleans up (a rejoin abandons its
// incarnation). They share one channel for the reason the inbox exists
// (see inbox.go), and travel by value: a batch comes with every watch
// response.
type input struct {
	kind       inputKind
	batch      watchBatch     // inBatch: what the watch saw
	joined     *incarnation   // inJoined: a fresh incarnation
	elected    core.Elected   // inElected: an election won
	proclaimed proclaimResult // inProclaimed: a proclamation's result
	now        time.Time      // inTimers: the time the timers were found due
	mail       mail           // inMail: what the inbox held
}

type inputKind uint8

const (
	inBatch inputKind = iota
	inJoined
	inElected
	inProclaimed
	inLost      // the incarnation ended (a fence, its lease, or an unusable map)
	inTimers    // the earliest deadline passed (see timers.go)
	inMail      // the inbox held something
	inStop      // Shutdown was called
	inStopEnded // Shutdown's context ended while leaving with a warm-up
)

// step acts on one input, then does what follows every input: the view to
// follow, the ghosts and the rank to publish, the slots to start, and, for
// the leader, the plan. It reports false when the member stopped.
func (r *Rink) step(in input) bool {
	st := &r.st
	if len(st.late) > 0 && in.kind != inBatch {
		r.releaseLate() // (plantEarlyAck: a while after the acknowledgement)
	}
	switch in.kind {
	case inBatch:
		r.onWatch(in.batch)
	case inJoined:
		r.startIncarnation(in.joined)
	case inElected:
		r.onElected(in.elected)
	case inProclaimed:
		st.proclaiming--
		r.onProclaimed(in.proclaimed)
	case inLost:
		r.onLost()
	case inTimers:
		if !r.onTimers(in.now) {
			return false
		}
	case inMail:
		if !r.onMail(in.mail) {
			return false
		}
	case inStop:
		if !r.startLeaving() {
			r.shutdown(nil)
			return false
		}
	case inStopEnded:
		r.log.Warn("shutdown: its context ended before the leader moved this member's slots to warmed-up heirs: handing over now")
		r.shutdown(nil)
		return false
	}
	if r.leftWarm() {
		r.shutdown(nil)
		return false
	}
	r.syncView()
	r.endReached()
	r.publishGhosts()
	// Publish the rank first, so that whoever gets a role sees the rank
	// that goes with it.
	r.publishRank()
	r.tryAcquire()
	if rk := r.rank.Load(); rk != nil && rk.rank.Index >= 0 && rk.rank.Settled != r.settled() {
		r.publishRank() // the last acquisitions settled the rink (or not)
	}
	r.plan()
	return true
}
