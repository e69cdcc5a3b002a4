package rink

import (
	"context"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// lifecycle is how this member comes and goes: its incarnation in the
// rink, rejoins after a fence, and the stop.
type lifecycle struct {
	inc       *incarnation // nil while out of the rink (fenced, rejoining)
	rejoining bool         // a rejoin goroutine is running
	stopping  bool
	joins     int // incarnations so far
	// past holds the leases of this process's ended incarnations (the
	// newest maxPast): their role contexts were all cancelled as they
	// ended, so they act on nothing, and this member makes no ghost of
	// them (see addGhost). Others cannot know it: a member that comes
	// back revokes its old lease (see rejoin).
	past []int64
	// fenced is the lease of this process's incarnation that ended last,
	// until it is revoked (see revokeFenced); 0: none.
	fenced clientv3.LeaseID
}

// maxPast bounds lifecycle.past.
const maxPast = 8

// startIncarnation adopts a freshly joined incarnation.
func (r *Rink) startIncarnation(inc *incarnation) {
	st := &r.st
	st.inc, st.rejoining = inc, false
	if st.fenced != clientv3.LeaseID(inc.Lease) {
		// Our member key is bound to inc's lease now (created or rebound):
		// none is bound to the fenced one any more.
		r.revokeFenced(st.fenced)
	}
	r.loadInc.Store(inc)
	r.load.wake() // the leader learns the roles awaited here before it ranks us
	if st.joins++; st.joins > 1 {
		r.emit(Event{Kind: EventRejoined, Slot: -1})
	}
	if st.incompatible != nil && !waitsOut(st.incompatible) {
		// The map became unusable while we were rejoining: leave again.
		r.fence(inc, st.incompatible)
		return
	}
	if st.joins > 1 && st.view.selfCheck == 1 {
		// The quiet time below waits out an earlier incarnation of our
		// name as the check for one would (see checkOwnName), which must
		// not wait for this process's own new lease.
		st.view.selfCheck = 2
	}
	if st.joins > 1 {
		// A rejoin after a fence: etcd may have been restored meanwhile,
		// and the map (and our member key, if we resumed) may be back from
		// before slots went to others, who may still act on them. We
		// cannot tell, so we wait them out. And the view may be older
		// than the new binding of our key, which we start nothing before
		// (see tryAcquire): in the narrow view, where nothing else may
		// change, only a listing brings it there (the wide view follows
		// our key).
		r.hush()
		if !st.view.wide {
			r.fx().relist()
		}
	}
	for key, s := range st.strayKeys {
		// A sweep that the last incarnation started ended with it:
		// this one sweeps again, if it is the sweeper.
		st.strayKeys[key] = strayKey{rev: s.rev}
	}
	m, ok := st.members[r.opts.member]
	st.selfSeen = ok && m.createRev == inc.CreateRev && m.modRev >= inc.BoundRev
	if !st.selfSeen && st.ownRev >= inc.BoundRev {
		// The view went past our key's binding without it: an operator
		// deleted it (or another lease took it) while the join's response
		// was on its way, and no event will say so again. A lease with no
		// key would be a ghost that never ends (see ghosts.go).
		r.log.Warn("own member key gone before the incarnation began: joining anew")
		r.fence(inc, ErrFenced)
		return
	}
	if st.selfSeen {
		r.reconcile()
		if r.ackOwed() {
			r.sendAck()
		}
	}
	r.campaign(inc)
}

// onLost handles the end of the current incarnation: a fence, a lease that
// ended, or leaving because of an incompatible map.
func (r *Rink) onLost() {
	st := &r.st
	old := st.inc
	st.inc, st.selfSeen = nil, false
	if old != nil {
		if len(st.past) == maxPast {
			st.past = st.past[1:]
		}
		st.past = append(st.past, int64(old.Lease))
		st.fenced = clientv3.LeaseID(old.Lease)
		st.revokeHeld = false // (an earlier fenced lease left to expire by itself)
	}
	r.stopLeading()
	r.reconcile() // the contexts are already cancelled through old.ctx (fence drains: see startDrain)
	r.dropDrains()
	r.startRejoin(old)
}

// revokeFenced revokes lease, the lease of this process's incarnation that
// ended last (see lifecycle.fenced), once this member knows that no member
// key is bound to it: a new incarnation began, its key created or rebound
// to the new lease (see startIncarnation), or a resume found the key gone
// or bound to another lease (mail.keyGone). Then the fenced lease holds
// only the old incarnation's candidacy, acknowledgement, load summary and
// perhaps the tail, and the old incarnation acts on nothing: its context,
// from which every role, secondary and leadership context derives, ended
// before onLost. Revoked, these keys go at once, and any member that made
// a ghost of the lease (see noteCandidates) finds it gone at its first
// question, rather than waiting it out.
//
// Never while a member key may be bound to the lease: after a restore of
// etcd, a restored key bound to the fenced lease keeps its old slots from
// others (see hush), and a member shut down in a quiet time leaves its key
// to expire for that reason. A restore between what this member learned
// and the revocation may bring such a key back; the quiet times cover it,
// as they cover a restored key that expires: every member that notices
// the restore is quiet for a TTL, the restored lineage frees nothing, a
// new lineage starts nothing for a TTL, and the members nobody sees stop
// within 7/8 of a TTL of the restore.
//
// A process restarted under the same name cannot know this of its
// predecessor's lease (which may be a duplicate's, cut off but still
// acting): it waits it out (see checkOwnName).
func (r *Rink) revokeFenced(lease clientv3.LeaseID) {
	st := &r.st
	if lease == 0 || lease != st.fenced {
		return
	}
	if r.fenceDraining() && !r.planted(plantSkipFenceDrain) {
		st.revokeHeld = true // (checkFenceDrains revokes it)
		return
	}
	st.revokeHeld = false
	st.fenced = 0
	r.fx().revokeLease(int64(lease))
}

// startRejoin starts a goroutine that, unless this member cannot use the
// rink's map, resumes the old incarnation's membership under a new lease
// while its member key is still there (see resume), or else joins again as
// a newcomer. The old lease is revoked once the key is not bound to it (see
// revokeFenced).
func (r *Rink) startRejoin(old *incarnation) {
	st := &r.st
	join := st.incompatible == nil
	st.rejoining = join
	if r.rejoinHook != nil {
		r.rejoinHook(old, join)
		return
	}
	r.fx().rejoin(old, join)
}

// shutdown runs on the run goroutine when the rink stops: it releases every
// role, hands leadership on, leaves, and waits for every other goroutine.
func (r *Rink) shutdown(cause error) {
	st := &r.st
	if r.simLeave != nil {
		r.simLeave() // (the simulator's departure, in its time)
		return
	}
	// Leaving takes a few etcd requests, after the drains (bounded by the
	// drain timeout and the caller's context): past one TTL more the lease
	// has expired anyway, so never wait longer than that. The requests go
	// out even when the caller's context has ended: Shutdown has returned
	// then, and a departure still saves the heirs a TTL.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.stopCtx), r.opts.ttl+r.opts.drain)
	defer cancel()
	st.stopping = true
	releaseAll := r.releaseAll
	err := cause
	switch {
	case st.inc != nil && cause == nil && r.hushed():
		// In a quiet time (see hush) our key is what keeps our slots from
		// others: hand nothing over, and let the lease expire.
		r.log.Info("shutting down in a quiet time after a restore or a resume: leaving the member key to expire with its lease")
		releaseAll()
		r.abandon(st.inc, r.stopErr())
	case st.inc != nil && cause == nil:
		_, keep := r.depart(ctx, releaseAll)
		releaseAll() // before the revocation below lets others start
		r.awaitDrains(r.stopCtx)
		if keep {
			// etcd was restored from a snapshot, or we were fenced: our
			// key may be what keeps the slots a restored map gives us
			// from others, who may still act on them unseen (see hush).
			r.log.Warn("etcd went back in time (restored from a snapshot?) or the session was lost while leaving: leaving the member key to expire with its lease")
			r.abandon(st.inc, r.stopErr())
			break
		}
		err = r.leave(ctx, st.inc, r.stopErr())
	}
	releaseAll()
	r.stopLeading()
	r.cancel()
	r.wg.Wait()
	// Out of the rink now: say so to Rank's readers and event observers.
	st.inc = nil
	clear(st.elect)
	clear(st.electOf)
	r.publishRank()
	r.shutdownErr = err
	r.stopCause = r.stopErr() // (what the role contexts and the API said)
	r.log.Info("left the rink", zap.Error(err))
}

// releaseAll ends every holding as the member leaves, and forgets the
// slots it waited for. The slots whose roles are in use go last: they
// stop for the shortest time before the heirs start.
func (r *Rink) releaseAll() {
	st := &r.st
	why := r.stopErr()
	r.endAllSecondaries(why)
	for _, used := range [2]bool{false, true} {
		for _, s := range slices.Sorted(st.mine.all()) {
			if cur := r.slots.load(s); st.mine.isHeld(s) && (cur != nil && cur.used.Load()) == used {
				r.release(s, why)
			}
		}
	}
	st.pending.clear()
}
