package rink

import (
	"context"
	"errors"
	"github.com/rink-go/rink/internal/core"
	"time"

	"go.uber.org/zap"
)

// drainState holds the slots given away while functions still ran on them:
// the acknowledgement waits for them, at most until the earliest deadline
// (timerDrain).
type drainState struct {
	draining map[*slotState]drainEntry
	// fenceDrains are the holdings a fence ended while functions still
	// ran on them (with WithDrainTimeout), each until the ended
	// incarnation's fence deadline: the fenced lease is not revoked
	// before they have returned or that deadline has passed (see
	// revokeFenced), so that no heir starts while they run, as no
	// handover's heir does. (Past the deadline the lease is about to
	// expire on the server anyway.) rinkd's grants rely on it: an app
	// learns of a fence only as fast as it reads its stream.
	fenceDrains map[*slotState]time.Time
	// revokeHeld: revokeFenced was asked to revoke the fenced lease while
	// fenceDrains still ran; checkFenceDrains does it once they end.
	revokeHeld bool
}

// Draining. With WithDrainTimeout, a member that gives a slot away (a new
// map moves it, or a graceful Shutdown hands it over) cancels the slot's
// context at once, as always, and then lets the heir start only once the
// work that Run and Watch handlers run on the slot has returned, or the
// drain timeout has passed. The heir starts a slot when the previous owner
// has acknowledged a map that took the slot away, so a draining member
// withholds its acknowledgement; on Shutdown it delays its departure.
//
// One acknowledgement covers every slot a map takes away, so a slow drain
// holds back the heirs of all the slots this member gives away in the same
// map (and in maps that follow before it drains), by at most the drain
// timeout. The slots it keeps and the slots it gains do not wait. A fence
// does not drain: the lease's expiry, not this member, lets heirs start.

// drainEntry is a slot given away while work ran on its holding.
type drainEntry struct {
	slot            int
	since, deadline time.Time
}

// enter counts one more function running on the slot's holding. It
// reports false, counting nothing, when the holding has already ended:
// release cancels the context before it reads the count, and enter counts
// before it reads the context, so a release either sees the function or
// the function sees the release.
func (st *slotState) enter() bool {
	st.runners.Add(1)
	if st.ctx.Err() != nil {
		st.runners.Add(-1)
		return false
	}
	return true
}

// leave counts a function done, and tells the run goroutine when it was
// the last one on a holding that has ended.
func (st *slotState) leave(r *Rink) {
	if st.runners.Add(-1) == 0 && st.ctx.Err() != nil {
		r.inbox.send(func(m *mail) { m.drained = true })
	}
}

// startDrain notes that slot s was given away (with cause) while
// functions ran on its holding cur.
func (r *Rink) startDrain(s int, cur *slotState, cause error) {
	st := &r.st
	if r.opts.drain > 0 && cur != nil && cur.runners.Load() > 0 && !r.planted(plantSkipDrain) {
		if rc, ok := cur.ctx.(*roleContext); ok && rc.inc.ctx.Err() != nil {
			// The holding's incarnation has ended: a fence cancels it at
			// once, and releases its holdings then (onLost) or, when a map
			// comes first, with the map. Its work holds the fenced lease
			// until the incarnation's fence deadline.
			if st.fenceDrains == nil {
				st.fenceDrains = map[*slotState]time.Time{}
			}
			now := r.now()
			st.fenceDrains[cur] = now.Add(rc.inc.left())
			r.armDrainTimer(now)
			return
		}
	}
	if r.opts.drain <= 0 || cur == nil || cur.runners.Load() == 0 || r.planted(plantSkipDrain) ||
		!errors.Is(cause, ErrRoleMoved) && !errors.Is(cause, ErrShutdown) {
		return
	}
	now := r.now()
	if st.draining == nil {
		st.draining = map[*slotState]drainEntry{}
	}
	// By holding, not by slot: a slot given away, gained back and given
	// away again drains both holdings.
	st.draining[cur] = drainEntry{slot: s, since: now, deadline: now.Add(r.opts.drain)}
	r.armDrainTimer(now)
}

// armDrainTimer sets the drain timer to the earliest deadline.
func (r *Rink) armDrainTimer(now time.Time) {
	st := &r.st
	st.StopTimer(core.TimerDrain)
	var first time.Time
	for _, e := range st.draining {
		if first.IsZero() || e.deadline.Before(first) {
			first = e.deadline
		}
	}
	for _, until := range st.fenceDrains {
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	if !first.IsZero() {
		st.SetTimer(core.TimerDrain, first)
	}
}

// checkDrains ends the drains whose functions have all returned, or whose
// time is up, and reports whether none is left.
func (r *Rink) checkDrains() bool {
	st := &r.st
	if len(st.draining) == 0 {
		return true
	}
	now := r.now()
	for h, e := range st.draining {
		switch {
		case h.runners.Load() == 0:
			r.emit(Event{Kind: EventDrained, Time: now, Slot: e.slot, Wait: now.Sub(e.since)})
		case !now.Before(e.deadline):
			r.log.Warn("drain timed out: handing the slot over while work still runs on it (fencing tokens still protect)",
				zap.Int("slot", e.slot), zap.Int32("functions", h.runners.Load()), zap.Duration("timeout", r.opts.drain))
			r.emit(Event{Kind: EventDrainTimedOut, Time: now, Slot: e.slot, Wait: now.Sub(e.since)})
		default:
			continue
		}
		delete(st.draining, h)
	}
	r.armDrainTimer(now)
	return len(st.draining) == 0
}

// onDrained runs when a function on a given-away slot returned or a drain
// deadline passed: the acknowledgement withheld meanwhile goes out once
// every drain has ended.
func (r *Rink) onDrained() {
	r.checkFenceDrains()
	if r.checkDrains() {
		r.sendAck()
	}
}

// fenceDraining ends the fence drains whose functions have returned or
// whose deadline has passed, and reports whether any is left.
func (r *Rink) fenceDraining() bool {
	st := &r.st
	if len(st.fenceDrains) == 0 {
		return false
	}
	now := r.now()
	for h, until := range st.fenceDrains {
		if h.runners.Load() == 0 || !now.Before(until) {
			delete(st.fenceDrains, h)
		}
	}
	return len(st.fenceDrains) > 0
}

// checkFenceDrains revokes the fenced lease once the fence drains have
// ended, if revokeFenced held it back.
func (r *Rink) checkFenceDrains() {
	st := &r.st
	if !r.fenceDraining() && st.revokeHeld {
		st.revokeHeld = false
		r.revokeFenced(st.fenced)
	}
	r.armDrainTimer(r.now())
}

// dropDrains forgets every drain: the incarnation that withheld its
// acknowledgement has ended.
func (r *Rink) dropDrains() {
	st := &r.st
	clear(st.draining)
	r.armDrainTimer(r.now()) // (for the fence drains, if any)
}

// awaitDrains waits, on Shutdown, until every drain has ended or ctx ends.
func (r *Rink) awaitDrains(ctx context.Context) {
	defer r.inbox.resignal() // (the mail it left for the run loop)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for !r.checkDrains() {
		var timer <-chan time.Time
		if r.st.TimerSet(core.TimerDrain) {
			t.Reset(r.st.At[core.TimerDrain].Sub(r.now()))
			timer = t.C
		}
		select {
		case <-r.inbox.wake:
			r.inbox.takeDrained() // (checkDrains counts them)
		case <-timer:
			r.st.StopTimer(core.TimerDrain)
		case <-ctx.Done():
			r.log.Warn("shutdown: leaving before the drains ended (the context ended)", zap.Int("slots", len(r.st.draining)))
			r.dropDrains()
			return
		}
	}
}

// Run runs fn with the role's context each time this member holds role,
// until ctx ends (it returns ctx's error) or the rink shuts down (it
// returns ErrShutdown, or ErrClientClosed if the rink stopped because its
// etcd client was closed: the error Err gives). fn's context is the role's (see AwaitRole), also
// cancelled when ctx ends. fn should return soon after its context is
// cancelled; with WithDrainTimeout the heir starts the role only once fn
// has returned (or the drain timeout has passed), so fn may finish what
// it is doing first. If fn returns while the role is still held, Run
// waits for the holding to end before it runs fn again; an error fn
// returns is logged. Run returns ErrInvalidRole for an empty role and
// ErrNilFunc for a nil fn.
//
// Run costs a goroutine, the caller's, per role: for many roles use Watch.
func (r *Rink) Run(ctx context.Context, role string, fn func(roleCtx context.Context) error) error {
	if fn == nil {
		return ErrNilFunc
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := r.awaitSlot(ctx, role)
		if err != nil {
			return err
		}
		if !st.enter() {
			continue
		}
		rc := st.handOut()
		err = r.runOnce(ctx, st, rc, fn)
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("Run: the role's function failed", zap.String("role", role), zap.Error(err))
		}
		select {
		case <-rc.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runOnce runs fn on one holding, counted on st while it runs, with a
// context that also ends when ctx does.
func (r *Rink) runOnce(ctx context.Context, st *slotState, rc context.Context, fn func(context.Context) error) error {
	defer st.leave(r)
	fnCtx, cancel := context.WithCancelCause(rc)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	return fn(runContext{Context: fnCtx, role: rc})
}

// runContext is the context Run gives fn: the role's, ended also by Run's
// context, and as exact as the role's about a fence (see roleContext).
type runContext struct {
	context.Context
	role context.Context
}

func (c runContext) Err() error {
	if err := c.role.Err(); err != nil {
		return err
	}
	return c.Context.Err()
}
