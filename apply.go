package rink

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// mapApplied is the newest map this member applied, its lineage, and the
// history of slot owners the barrier reads (see applyMap).
type mapApplied struct {
	incompatible error            // the newest map cannot be used by this member
	cur          wire.Map         // newest applied map; Version 0 before any
	curRev       int64            // mod revision of cur's key (0: the key is gone)
	curSeq       int64            // etcd version of cur's key: its seq (see ackValue)
	lineage      int64            // create revision of cur's key: seqs count within it
	hist         core.SlotHistory // who owned each slot in the recently applied maps of the lineage
	verSeq       map[int64]int64  // hist's seqs by map version (-1: the version repeats)
	topVer       int64            // the highest map version applied in the lineage
	stale        bool             // cur's version is not above every version before it
	// repeats: map versions went back in this lineage, and versions up to
	// this one may name more than one map: bounds counted in these
	// versions (from members that predate seqs) name nothing.
	repeats int64
	// underivedRev is the mod revision of the newest change record this
	// member could not apply (see underived), while it is above curRev
	// (0: none).
	underivedRev int64
	prev         wire.Map // the map applied before cur (its version only, once applyMap is done)
	prevSeq      int64    // its seq
	// prevOld, while applyMap runs, is the record that made cur of prev
	// when it was applied into prev's table (see applyInPlace): prev's
	// entries for the slots it moved are cur's then, and prevOwner reads
	// them from it. Nil otherwise.
	prevOld *wire.MapDelta
	// curView is the leader's view revision cur was planned from (0: not
	// said; see transition.View, and mapView).
	curView int64
	// proclaiming counts the proclaim goroutines under way (see plan):
	// each reads a map that shares cur's table.
	proclaiming int
}

// maxHistory bounds the applied maps kept for the handover check. A member
// whose acknowledgement lags further behind than this simply has to catch up
// before others take slots it may hold.
const maxHistory = 256

// maxHistChanges bounds the slot changes the handover history keeps
// (about twice as many entries: see slotHistory): under steady churn in a
// large rink (members joining by the thousand) the floor lags, and 256
// maps that each move dozens of slots kept an entry for nearly every slot
// at every member, 660 KB each at 10,000 members. Past it the oldest maps
// go, as past maxHistory: a member whose acknowledgement lags behind them
// has to catch up before others take slots it may hold.
const maxHistChanges = 2048

// applyMap applies a proclaimed map if it is newer than the current one.
//
// Maps are told apart by their seq: the map key's etcd version, which
// counts every put since the key was created. A leader's map, a map put
// back unchanged, and an older map or another table written by hand are
// all simply the next map: a member applies each put in order, releases
// what it loses before it acknowledges the put's seq, and starts what it
// gains only through the barrier (see free). Map versions are for people
// and for members that predate seqs.
//
// Seqs count within a lineage: the life of the map key from its creation.
// If an operator deletes the key, the next leader starts a new lineage,
// and acknowledgements of another lineage count for nothing.
//
// In protocol 3 a put holds a change record (see records.go): the member
// applies it to the map of the seq before, or, after a listing, reads the
// whole map written with it (snap, the snapshot key's listing). When it can
// do neither, it applies nothing and lists the rink again (see underived).
func (r *Rink) applyMap(kv, snap *mvccpb.KeyValue) {
	st := &r.st
	st.hist.Settle()         // (before a record written in place changes the table it compares)
	fresh := st.lineage == 0 // the first map since the process started, or since a restore
	sameLineage := kv.CreateRevision == st.lineage
	if sameLineage && kv.ModRevision == st.curRev {
		return // already applied (a listing repeats what the watch gave)
	}
	if kv.ModRevision < st.curRev || kv.ModRevision <= st.mapAbsentAt || sameLineage && st.lineage != 0 && (st.curRev == 0 || kv.Version <= st.curSeq) {
		// A put never gets a lower revision, nor a lower etcd version
		// within the key's life, nor one below a revision at which the
		// key was absent, and a deleted key comes back with a new create
		// revision: etcd was restored from an older snapshot.
		r.restored(fmt.Sprintf("map at revision %d (seq %d, lineage %d) after revision %d (seq %d, lineage %d; absent at %d)",
			kv.ModRevision, kv.Version, kv.CreateRevision, st.curRev, st.curSeq, st.lineage, st.mapAbsentAt))
		sameLineage = false
	}
	if st.taint == -1 {
		st.taint = kv.CreateRevision
	}
	if st.taint != 0 && st.taint == kv.CreateRevision {
		r.dropLineage(kv.ModRevision)
	} else {
		st.taint = 0
	}
	// What a record applied to the map before it changes (nil: unknown, a
	// whole map), so that the passes below cost what it changed; taken
	// before it is applied, which may write into the current map's table.
	var delta *wire.MapDelta
	var rec *wire.Record // the record, decoded once (nil: a whole map)
	if c, ok := wire.DecodeRecord(kv.Value); ok {
		rec = &c
		if snap == nil && !fresh && sameLineage && kv.Version == st.curSeq+1 {
			delta = wire.DeltaOf(&st.cur, rec)
		}
	}
	// A member that does not lead applies a record laxly (only the leader
	// checks it against every member: see applyAs) and, when it renames
	// nobody, into its own table (see applyInPlace): it owns that table,
	// and publishes it to other goroutines (Owner) under ownersMu. The
	// leader's planning, and a proclaim still under way from a leadership
	// just lost, may share it.
	inPlace := delta != nil && !delta.Renamed && st.lead == nil && st.proclaiming == 0 && len(st.cur.Table) > 0
	if inPlace {
		r.ownersMu.Lock()
	}
	m, err := wire.ReadMapAs(kv, snap, &st.cur, st.curRev != 0 && st.incompatible == nil && st.cur.Version > 0 && sameLineage, st.curSeq, st.lineage, r.geometry(), st.lead == nil, inPlace, rec)
	if inPlace {
		if err == nil {
			r.owners.Store(&m) // (with the table written: the old map's members may not cover its entries)
		}
		r.ownersMu.Unlock()
	}
	st.prevOld = nil
	if inPlace && err == nil {
		st.prevOld = delta // (the map before shares the table now: see prevOwner)
	}
	if wire.WrittenOver(err) {
		r.underived(kv, err)
		return
	}
	if err != nil {
		if waitsOut(err) {
			// Number the next map above this one's version, if it says one.
			var peek struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal(kv.Value, &peek)
			st.topVer = max(st.topVer, peek.Version)
		}
		r.unusable(err, kv.ModRevision)
		return
	}
	st.curRev, st.underivedRev = kv.ModRevision, 0
	st.dirty = true
	var t wire.Transition
	if rec != nil {
		t = rec.Transition // (decoded with the record)
	} else {
		t = wire.TransitionOf(kv.Value)
	}
	st.curView = t.View
	if t.Quiet && fresh {
		r.quietStarts() // (a process new to the rink, in a lineage that just replaced another: see transition.Quiet)
	}
	if inc, ok := t.Incs[r.opts.member]; ok && st.inc != nil && inc != st.inc.CreateRev && m.Version > st.topVer {
		// Our name is another process's now (see transition.Incs): our
		// key went, though our own watch has not said so yet.
		r.log.Warn("the map says another process holds this member's name: fencing", zap.Int64("key", inc))
		r.fence(st.inc, ErrFenced)
	}
	if st.incompatible != nil {
		r.log.Info("the rink's map is usable again: rejoining", zap.Int64("version", m.Version))
		st.incompatible = nil
		if st.inc == nil && !st.rejoining && !st.stopping {
			r.startRejoin(nil)
		}
	}
	newLineage := !sameLineage
	if newLineage && st.lineage != 0 {
		r.log.Warn("the rink's map key was re-created: following the new lineage",
			zap.Int64("lineage", kv.CreateRevision), zap.Int64("version", m.Version))
		r.quietStarts() // (it may follow a restore we did not see as one)
	}
	if newLineage {
		st.hist.Reset()
		clear(st.verSeq)
		st.topVer, st.repeats = 0, 0
	}
	if newLineage || kv.Version > st.curSeq+1 {
		// We did not see every map since the slots we wait for became
		// ours; they may have been another member's in between. Count them
		// as ours only from this map on.
		for s := range st.pending.all() {
			e := st.mine.of(s)
			e.gain, e.gainRev = kv.Version, kv.ModRevision
		}
		r.regainReplicas(kv.Version, kv.ModRevision)
		r.resyncReplicas(kv.Version, kv.ModRevision)
	}
	began := r.now()
	st.lineage = kv.CreateRevision
	st.prev, st.prevSeq = st.cur, st.curSeq
	st.cur, st.curSeq = m, kv.Version
	r.keepLeases(&st.cur, rec)
	r.hushBegun(kv.Version, kv.ModRevision, !newLineage && st.prevSeq == kv.Version-1 && st.prevSeq > 0)
	prevIdx := st.selfIdx
	r.indexCur(st.prev.Members, delta)
	r.keepOwnLease(&m, rec)
	if fresh {
		// Before it, this member owned nothing.
		if core.MovedFor(&wire.Map{}, &st.cur, -1, st.selfIdx, nil) || len(st.cur.Incoming[r.opts.member]) > 0 {
			st.changedSeq = st.curSeq
		}
	} else if newLineage || st.prevSeq != st.curSeq-1 || core.MovedFor(&st.prev, &st.cur, prevIdx, st.selfIdx, delta) ||
		!slices.Equal(st.prev.Incoming[r.opts.member], st.cur.Incoming[r.opts.member]) {
		st.changedSeq = st.curSeq
	}
	if newLineage {
		st.prev, st.prevSeq = wire.Map{}, 0
	}
	st.stale = m.Version <= st.topVer
	if st.stale {
		st.repeats = max(st.repeats, st.topVer)
	}
	st.topVer = max(st.topVer, m.Version)
	st.hist.Add(kv.Version, &m, delta)
	r.noteGone(t, kv.Version, st.prevSeq, &st.prev, delta)
	r.checkOwnName(t)
	if s, ok := st.verSeq[m.Version]; ok && s != kv.Version {
		st.verSeq[m.Version] = -1
	} else {
		st.verSeq[m.Version] = kv.Version
	}
	r.owners.Store(&m)
	if st.changedSeq == st.curSeq && !m.ByLoad && r.load.awaiting() {
		// The slots this member owns changed, in a rink balanced by count:
		// the roles it awaits in them go into its summary (see withRoles)
		// now, not at its next load interval. Until the leader hears of
		// them it sees no load, and says the rink is at rest (issue 44).
		r.load.wake()
	}
	st.moved = false
	if delta != nil && !delta.Renamed {
		r.reconcileSlots(delta.Moved)
	} else {
		r.reconcile()
	}
	r.applyIncoming()
	// A map that changes nothing this member owns, and announces nothing
	// to it, is acknowledged a moment later (see ackPause) if the map
	// before it was applied here too, so that an acknowledgement of this
	// lineage has gone out already: a member whose acknowledgement is not
	// known at all holds up everybody's acquisitions (see others). A new
	// lineage resets prevSeq to 0, so its first map (seq 1) is never lazy.
	// And only while the floor can name every member that lags (see
	// maxLagging): past that, the floor gives one lowest bound for all,
	// and a lazy acknowledgement would hold up other members' moves.
	// Under a leader that says Still, such a map costs no
	// acknowledgement at all (see ackOwed).
	if r.ackOwed() {
		r.sendAckLazily(!st.moved && len(st.incoming) == 0 && st.prevSeq > 0 && st.prevSeq == st.curSeq-1 &&
			len(st.members) <= wire.MaxLagging)
	}
	// The map before is needed no more (its owners went into the gains
	// above): keep its version, not its members and table, which at
	// 10,000 members cost every member a quarter of a megabyte.
	st.prev = wire.Map{Schema: st.prev.Schema, Version: st.prev.Version, Slots: st.prev.Slots, Incoming: st.prev.Incoming}
	st.prevOld = nil
	r.emit(Event{Kind: EventMapApplied, Slot: -1, Version: m.Version, Wait: r.now().Sub(began)})
}

// prevOwner returns slot s's owner in the map applied before the current
// one (st.prev), while applyMap runs: from the record's old entries when
// it was applied into that map's table (see prevOld).
func (r *Rink) prevOwner(s int) string {
	st := &r.st
	if d := st.prevOld; d != nil {
		for i := len(d.Moved) - 1; i >= 0; i-- {
			if d.Moved[i] == s {
				return d.OldName(d.Old[i], st.prev.Members)
			}
		}
	}
	return st.prev.Owner(s)
}

// underived handles a change record this member cannot apply, or a map
// value nobody can (damaged by hand: see wire.ErrMapDamaged; see readMap):
// it applies nothing, so its acknowledgement stays where it was
// and nobody takes what it holds, and lists the rink again, reading the
// whole map written with the newest record. A record without its whole
// map (put back by hand) waits for the leader's next map, which comes
// with one: it proclaims anew after a map whose version went back. A
// damaged value waits for the leader's next map likewise: plan writes a
// whole map over it.
//
// It lists once per record: the listing that shows the same record again
// has no whole map for it either, and listing again at once would do so
// every few milliseconds for good.
func (r *Rink) underived(kv *mvccpb.KeyValue, err error) {
	st := &r.st
	st.dirty = true // a leader writes a whole map over it (see plan)
	if st.underivedRev == kv.ModRevision {
		return // (listed for it already: wait for the next map)
	}
	st.underivedRev = kv.ModRevision
	r.log.Info("a map value this member cannot apply: reading the whole map; the leader writes one over it", zap.Int64("revision", kv.ModRevision), zap.Int64("seq", kv.Version), zap.Error(err))
	r.fx().relist()
}

// indexCur finds our index in the map just applied, and updates unlisted
// from the previous map's members: only the names at the positions where
// the two lists differ can change (a join appends one; a departure moves
// one into the gap), so a map change costs what it changed, except for a
// reshuffle, which rebuilds unlisted.
func (r *Rink) indexCur(prev []string, delta *wire.MapDelta) {
	st := &r.st
	cur := st.cur.Members
	switch {
	case delta != nil && !delta.Renamed && st.selfIdx >= 0 && !delta.Renames.Has(st.selfIdx):
		// (Our index kept its name.)
	case delta != nil && !delta.Renamed:
		st.selfIdx = -1 // ranked now only if renamed to us, or appended
		for i := range delta.Renames {
			if i < len(cur) && cur[i] == r.opts.member {
				st.selfIdx = i
			}
		}
		for i := len(prev); i < len(cur); i++ {
			if cur[i] == r.opts.member {
				st.selfIdx = i
			}
		}
	default:
		st.selfIdx = slices.Index(cur, r.opts.member)
	}
	if !st.view.wide {
		clear(st.unlisted) // (the narrow view has no member keys: see settled)
		return
	}
	// (prev's list may be cur's, renamed in place: see applyInPlace.)
	prevName := func(i int) string {
		if delta != nil {
			return delta.OldName(i, prev)
		}
		return prev[i]
	}
	var diff []int
	for i := range max(len(cur), len(prev)) {
		if i >= len(cur) || i >= len(prev) || cur[i] != prevName(i) {
			if diff = append(diff, i); len(diff) > maxIndexDiff {
				break
			}
		}
	}
	if len(diff) > maxIndexDiff {
		clear(st.unlisted)
		for _, name := range cur {
			if _, ok := st.members[name]; !ok {
				st.unlisted[name] = true
			}
		}
		return
	}
	// A name no longer ranked was at a differing position of prev; a
	// name ranked anew, or moved, is at one of cur.
	for _, i := range diff {
		if i < len(prev) {
			delete(st.unlisted, prevName(i))
		}
	}
	for _, i := range diff {
		if i < len(cur) {
			if _, ok := st.members[cur[i]]; !ok {
				st.unlisted[cur[i]] = true
			}
		}
	}
}

// rankedIndex returns the index of a member in the applied map, or -1
// (our own in O(1)).
func (r *Rink) rankedIndex(name string) int {
	if name == r.opts.member {
		return r.st.selfIdx
	}
	return r.st.cur.Index(name)
}

// mapView returns the revision of the view the applied map was planned
// from, or a bound above it: what the map says (transition.View), else,
// for a map of protocol 3, its own mod revision (leaders of protocol 3
// say their view in every map: one that says none was written by hand,
// before that revision); 0 for a map of an earlier protocol, whose
// leaders say nothing and do not plan again for a restarted name (see
// rankedReborn), so that members act on it as before.
func (r *Rink) mapView() int64 {
	st := &r.st
	switch {
	case st.curView != 0:
		return st.curView
	case st.cur.Schema >= 3:
		return st.curRev
	}
	return 0
}
