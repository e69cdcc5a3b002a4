package rink

import (
	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.uber.org/zap"
)

// restoreGuard keeps what this member noticed of restores of etcd.
type restoreGuard struct {
	// taint is a map lineage that etcd's restore from a snapshot brought
	// back (-1: the next lineage applied). Its acknowledgements may
	// describe map histories the restore erased, so nothing is started in
	// it; the member deletes its map key so that the leader starts anew.
	taint int64
	// quiet: after a restore, nothing starts until this fenceClock reading
	// (one TTL after the restore was noticed): a member that joined after
	// the snapshot lost its lease in the restore at once, without fencing,
	// and fences only when its own deadline passes. timerQuiet wakes the
	// core then.
	quiet int64
	// mapAbsentAt is the newest revision at which the view saw no map
	// key. A map key seen after it was put after it, at a higher mod
	// revision, unless etcd went back: a restore with its revisions
	// bumped brings the map key back with the mod revision it had in the
	// snapshot, and when the view saw the key deleted since, nothing else
	// tells the restore from an operator's new lineage (see applyMap).
	mapAbsentAt int64
	// startQuiet: after a new lineage, nothing starts until this
	// fenceClock reading (one TTL after it was applied), while
	// acknowledgements go on (see quietStarts). timerQuiet wakes the core.
	startQuiet int64
	// hushRev is the revision of the binding of the incarnation whose
	// rejoin began the quiet time (0: a restore began it), and hushBase
	// the seq of the first map applied that was put after it, when the
	// map before it was applied too (0: none yet; -1: none can be, a gap
	// or a new lineage came first): see hushSpares.
	hushRev, hushBase int64
	// dropAsked is the incarnation that last asked, leading, for the
	// deletion of a tainted lineage's map key (see plan).
	dropAsked *incarnation
}

// dropLineage deletes the map key if it is still at rev, so that the next
// map starts a new lineage whose acknowledgements were all written after
// the restore. Any member that noticed the restore may do it; the deletion
// is guarded, so a newer map is never lost. It is sent again after a
// failure while this incarnation lasts: a leader plans nothing in a
// tainted lineage, so no next map of it would ask again (a helper's
// simulator run on 44177e6, seed 2635 with -kinds restore,etcd-errors,
// partition,crash,join,leave,map-delete: the deletion refused while etcd
// failed requests, the rink held nothing for good).
func (r *Rink) dropLineage(rev int64) {
	r.fx().dropLineage(r.st.inc, rev)
}

// hush starts a quiet time of one TTL, in which this member starts no
// slot and acknowledges no map. It follows anything after which a member
// that nobody can see may still act on slots the map in etcd gives to
// others or to nobody: a restore of etcd (its own, or one it slept through
// and resumed after). Such a member lost its lease, or its watch has not
// caught up yet; either way it stops acting within 7/8 of a TTL of the
// restore, or notices the restore and fences. Until then, an
// acknowledgement from this member would tell others that slots are free
// which that member may still act on.
func (r *Rink) hush() {
	st := &r.st
	st.quiet = r.clock() + int64(r.opts.ttl)
	st.SetTimer(core.TimerQuiet, r.now().Add(r.opts.ttl))
	st.hushRev, st.hushBase = 0, -1
	if st.inc != nil && st.joins > 1 && st.taint == 0 {
		st.hushRev, st.hushBase = st.inc.BoundRev, 0
	}
}

// hushBegun notes the map of seq seq, put at revision rev, just applied:
// the first one put after the binding that began the quiet time is its
// base (see hushSpares), when the map before it was applied too (contig).
func (r *Rink) hushBegun(seq, rev int64, contig bool) {
	st := &r.st
	if st.hushBase != 0 || st.hushRev == 0 || rev <= st.hushRev || !r.hushed() {
		return
	}
	st.hushBase = -1
	if contig {
		st.hushBase = seq
	}
}

// hushSpares reports whether the quiet time after a rejoin (see hush)
// spares slot s: the map current when this member's key was bound again
// (the last applied before the base, seq hushBase-1) did not give it s,
// and a map put since did. What a quiet time guards against is a map, or
// a key, that a restore brought back from before slots went to others,
// who may still act on them unseen: what such a map gave this member.
// A map put after the binding was planned from the rink as it is now,
// as every member's maps are, and a slot it gives this member is no more
// exposed here than it would be at any other member that the map could
// have given it to (issue 42: one member's fence stalled every handover
// of slots given to it for a TTL). Its previous holders are checked by
// the barrier as always.
func (r *Rink) hushSpares(s int) bool {
	st := &r.st
	if st.hushBase < 2 {
		return false
	}
	held, known := st.hist.HeldBy(s, r.opts.member, st.hushBase-1, st.hushBase)
	return known && !held
}

// quietStarts starts a time of one TTL in which this member starts no
// slot, and acknowledges maps as usual. It follows a new lineage, which
// may follow a restore of etcd that this member did not see as one: a
// member that noticed the restore deleted the map key (see taint) before
// our watch, which the restore cancelled, listed the rink again. Members
// whose leases the restore erased, cut off, act on until their deadlines,
// unseen: within a TTL of the restore. Our acknowledgements are true of
// us, and the new lineage's floor needs them.
func (r *Rink) quietStarts() {
	st := &r.st
	st.startQuiet = r.clock() + int64(r.opts.ttl)
	st.SetTimer(core.TimerQuiet, r.now().Add(r.opts.ttl))
}

// startsQuieted reports whether a quiet time of starts (see quietStarts)
// is running.
func (r *Rink) startsQuieted() bool {
	return r.st.startQuiet != 0 && r.clock() < r.st.startQuiet
}

// hushed reports whether a quiet time (see hush) is running.
func (r *Rink) hushed() bool {
	return r.st.quiet != 0 && r.clock() < r.st.quiet
}

// restored handles proof that etcd went back in time (a restore from a
// snapshot): revisions, and so acknowledgements and fencing tokens, may
// repeat what this member saw. It stops trusting everything it knew: it
// fences (every role context ends; the member rejoins with a new lease)
// and forgets the lineage, so that the map it finds counts as new.
func (r *Rink) restored(why string) {
	st := &r.st
	r.log.Error("etcd went back in time (restored from a snapshot?): fencing and starting over in a new map lineage", zap.String("why", why))
	st.taint = -1
	r.hush()
	if st.inc != nil {
		r.fence(st.inc, ErrFenced)
	}
	st.lineage, st.curRev, st.curSeq, st.rev, st.underivedRev, st.ownRev, st.mapAbsentAt = 0, 0, 0, 0, 0, 0, 0
	st.prev, st.prevSeq = wire.Map{}, 0
	st.floor = wire.AckFloor{}
	st.hist.Reset()
	clear(st.verSeq)
	st.topVer, st.repeats = 0, 0
	st.selfSeen = false
	st.ended = nil // (a restore can bring a lease back)
	r.reconcile()
}

// unusable leaves the rink because the map (at revision rev) cannot be
// used; a usable map, or the map key's deletion, brings the member back.
func (r *Rink) unusable(err error, rev int64) {
	st := &r.st
	if waitsOut(err) {
		// A map in a protocol we do not speak: hold nothing, but stay, so
		// that the leader sees what we speak (see errUnknownProtocol).
		if st.incompatible == nil {
			r.log.Warn("the rink's map is in a protocol this member does not speak: holding nothing until the leader proclaims one it speaks", zap.Error(err), zap.Int64("revision", rev))
		}
		st.incompatible = err
		st.curRev = rev
		st.dirty = true
		r.reconcile()
		r.dropPending()
		return
	}
	if st.incompatible == nil {
		r.log.Error("cannot use the rink's map: leaving the rink until it can", zap.Error(err), zap.Int64("revision", rev))
	}
	st.incompatible = err
	st.curRev = rev
	if st.inc != nil {
		r.fence(st.inc, err) // first, so that role contexts carry the cause
	}
	r.reconcile()
}

// mapGone handles the map key's absence (deleted, or missing from a
// listing). Slots not yet held are given up: whatever gave them to us may be
// stale, and they are gained again from the next map. A member that left
// because it could not use the deleted map rejoins.
//
// at is a revision at which the map key was absent (its deletion's, or a
// listing's): see mapAbsentAt.
func (r *Rink) mapGone(at int64) {
	st := &r.st
	st.mapAbsentAt = max(st.mapAbsentAt, at)
	st.curRev, st.underivedRev = 0, 0
	st.dirty = true
	r.dropPending()
	if st.incompatible != nil {
		r.log.Info("the unusable map is gone: rejoining")
		st.incompatible = nil
		if st.inc == nil && !st.rejoining && !st.stopping {
			r.startRejoin(nil)
		}
	}
}
