package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
)

// mechanisms is everything the run goroutine owns: the member's protocol state,
// one part per mechanism, each declared beside the code that keeps it, with
// its invariants. No other goroutine reads or writes it; they talk to the
// run goroutine through the handoff channel and the inbox (see inbox.go),
// and read what it publishes (slot states, the map, the rank) through
// atomic pointers.
type mechanisms struct {
	lifecycle      // the incarnation and how the member comes and goes (see lifecycle.go)
	membership     // the view of member and election keys (see fold.go)
	mapApplied     // the applied map, its lineage and history (see apply.go)
	restoreGuard   // restores of etcd noticed, and the quiet after them (see restore.go)
	barrier        // the leader's floor and this member's acknowledgement (see barrier.go)
	slotHolding    // the slots the applied map gives this member (see holdings.go)
	replicaHolding // the replica sets the applied map names this member in (see secondary.go)
	strayState     // stray keys (see stray.go)
	drainState     // slots given away while functions still run on them (see drain.go)
	warmupState    // warm-up of incoming slots and leaving with a warm-up (see warmup.go)
	ghostState     // members whose key went while the map still ranks them (see ghosts.go)
	leadState      // leadership and planning (see leader.go)
	core.Timers    // the deadlines the core waits for (see timers.go)
}

// run is the rink's single state-owning goroutine.
func (r *Rink) run(first *incarnation) {
	defer close(r.done)
	defer r.over.Store(true)
	st := &r.st
	// The client's end reaches the run loop through the inbox: a select on
	// its context, which every member of a shared client would wait on,
	// costs each of them a turn on that channel's lock per wake.
	stopClosed := context.AfterFunc(r.cli.Ctx(), func() { r.inbox.send(func(m *mail) { m.clientClosed = true }) })
	defer stopClosed()
	r.initState()
	r.startIncarnation(first)

	// wake fires at the core's earliest deadline (see timers.go); wakeAt
	// is what it is set to (zero: stopped).
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	var wakeAt time.Time
	for {
		var lost <-chan struct{}
		if st.inc != nil {
			lost = st.inc.lost
		}
		if at, ok := st.NextTimer(); !ok && !wakeAt.IsZero() {
			wake.Stop()
			wakeAt = time.Time{}
		} else if ok && !at.Equal(wakeAt) {
			wake.Reset(at.Sub(r.now()))
			wakeAt = at
		}
		stopping := r.stopping
		var stopEnded <-chan struct{}
		if st.leaving {
			stopping = nil // leaving with a warm-up (see warmup.go)
			stopEnded = r.stopCtx.Done()
		}
		var in input
		select {
		case in = <-r.handoffCh:
		case <-lost:
			in.kind = inLost
		case <-wake.C:
			wakeAt = time.Time{}
			in = input{kind: inTimers, now: r.now()}
		case <-r.inbox.wake:
			in = input{kind: inMail, mail: r.inbox.take()}
		case <-stopEnded:
			in.kind = inStopEnded
		case <-stopping:
			in.kind = inStop
		}
		if !r.step(in) {
			return
		}
	}
}

// onTimers handles the core's timers due at now; false when the rink
// stopped.
func (r *Rink) onTimers(now time.Time) bool {
	st := &r.st
	for _, k := range st.TakeDue(now) {
		switch k {
		case core.TimerPlan, core.TimerWarm:
			if st.lead != nil {
				st.dirty = true
			}
		case core.TimerLoad:
			if st.lead != nil {
				st.lead.roundDue = true
				st.dirty = true
			}
		case core.TimerDrain:
			r.onDrained()
		case core.TimerQuiet:
			r.sendAck() // withheld meanwhile
			if st.lead != nil {
				st.dirty = true // (members a quiet leader kept ranked: see withRanked)
			}
		case core.TimerLeaveBy:
			r.log.Warn("shutdown: the leader did not move this member's slots within the warm-up time and a TTL: handing over now")
			r.shutdown(nil)
			return false
		}
	}
	return true
}

// onMail acts on what the inbox held; false when the rink stopped.
func (r *Rink) onMail(m mail) bool {
	st := &r.st
	if m.clientClosed {
		r.log.Error("etcd client closed under a running rink: stopping")
		r.stop(r.cli.Ctx(), ErrClientClosed)
		r.shutdown(ErrClientClosed)
		return false
	}
	if m.loadsSet && st.lead != nil {
		st.lead.reports, st.lead.rolesOf = m.loads, nil
		st.dirty = true // load seen, or gone: the balance may change
	}
	if m.warmSet && st.lead != nil {
		st.lead.warmAcks = m.warm
		st.dirty = true
	}
	for _, v := range m.warmed {
		r.onWarmed(v)
	}
	if m.heirsSet {
		st.heirWarm = m.heirs
	}
	if m.selfChecked {
		st.view.selfCheck = 2
	}
	for _, e := range m.ghosts {
		r.endGhost(e)
	}
	if m.keyGone != 0 {
		r.revokeFenced(m.keyGone)
	}
	if m.drained {
		r.onDrained()
	}
	return true
}

func (r *Rink) initState() {
	st := &r.st
	S := r.opts.slots
	st.members = map[string]memberInfo{}
	st.selfIdx, st.unlisted = -1, map[string]bool{}
	st.elect = map[string]electInfo{}
	st.electOf = map[string][]string{}
	st.touched = map[string]bool{}
	st.strayKeys = map[string]strayKey{}
	st.verSeq = map[int64]int64{}
	st.pending = newSlotSet(S)
	st.cur = wire.Map{Schema: wire.SchemaVersion, Slots: S}
}

// maxIndexDiff is how many positions of two maps' members indexCur
// follows one by one before it rebuilds.
const maxIndexDiff = 16
