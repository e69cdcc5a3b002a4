package rink

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Acknowledgements, and how they reach the members that wait for them.
//
// A member that gains a slot from another live member must not start it
// until that member has applied a map that took the slot away. So every
// member writes the newest map version it has applied to its ack key
// (acks/<member>, bound to its lease). If every member watched every ack
// key, one map change in a rink of n members would cost n² watch events.
// Instead only the leader reads the ack keys: it folds them, as of one
// revision of its view, into a single floor key that every member watches,
// and which gives for every member a lower bound of its acknowledgement:
//
//   - Floor: the lowest acknowledgement of any member live at that revision;
//   - Lagging, when Complete: the exact acknowledgement of each member that
//     has not acknowledged Version (at most maxLagging of them), so that one
//     slow member does not hold up slots it has nothing to do with.
//
// Why a bound from the past stays a bound: a member's acknowledgement never
// goes back, and a member that joined after that revision applies only maps
// at least as new as Version, so every slot it can hold came from such a
// map. See free for how a member uses it.

// maxLagging bounds how many members the floor names one by one.
const maxLagging = 64

// ackValue is the JSON value of an ack key.
type ackValue struct {
	// Ack is the version of the newest map this member has applied, in the
	// map lineage Lineage (the map key's create revision).
	Ack     int64 `json:"ack"`
	Lineage int64 `json:"lineage"`
	// Seq names that map exactly: the etcd version of the map key when it
	// held the map (the count of puts since the key was created). Versions
	// can repeat when somebody writes the key by hand; seqs cannot. The
	// member holds no slot that the maps from Seq on do not give it.
	// Members of map schema 2 before seqs (commit 636d84c) leave it out.
	Seq int64 `json:"seq,omitempty"`
	// Warm is the version of the newest map announcing slots to this
	// member (see warmup.go) that it has warmed up for.
	Warm int64 `json:"warm,omitempty"`
}

// ackFloor is the JSON value of the floor key. Its first fields count in
// map versions, for members that predate seqs; the Seq fields carry the
// same bounds in seqs, and members use them wherever they are known.
type ackFloor struct {
	Lineage  int64            `json:"lineage"`
	Version  int64            `json:"version"` // the map version of the leader's view
	Floor    int64            `json:"floor"`   // 0: some live member's acknowledgement is unknown
	Complete bool             `json:"complete,omitempty"`
	Lagging  map[string]int64 `json:"lagging,omitempty"` // 0: unknown

	Seq         int64            `json:"seq,omitempty"` // the map's seq in the leader's view (0: a floor without seqs)
	SeqFloor    int64            `json:"seqfloor,omitempty"`
	SeqComplete bool             `json:"seqcomplete,omitempty"`
	SeqLagging  map[string]int64 `json:"seqlagging,omitempty"`

	// What the leader plans (see setRest). Leaders of d85b50e and before
	// leave these out: their rinks never say they are at rest.
	//
	// Rest, when it equals Version, says that the leader plans no move
	// after that map: nobody waits to be ranked, no move is announced
	// (WithWarmup) and no load round would move a slot. With every
	// member's acknowledgement of the map (Floor at Version), the rink is
	// at rest (see Rank.Settled): nothing moves until the membership, the
	// awaited roles or the measured load change.
	Rest int64 `json:"rest,omitempty"`
	// Round says that a load round would move slots.
	Round bool `json:"round,omitempty"`
	// Imbalance is the leader's estimate of the most loaded member's load
	// per capacity over the mean, to 0.01, and Tolerance its
	// WithImbalanceTolerance, when it balances by load (0: it does not).
	Imbalance float64 `json:"imbalance,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`

	// Still says that this leader counts a member as having acknowledged
	// the map of Seq when no map since its acknowledgement changed its
	// slots or the slots announced to it (see still.go), and Base is the
	// first map of the lineage its view saw: it knows the changes after
	// it only. Leaders of d85b50e and before leave both out, and members
	// then acknowledge every map.
	Still bool  `json:"still,omitempty"`
	Base  int64 `json:"base,omitempty"`

	// Ghosts counts the members the leader knows may still act while
	// their keys are gone (see ghosts.go): members that follow the narrow
	// view, which see no member key go, start nothing while it is above
	// 0, as the leader's own handover check does (see view.go).
	Ghosts int `json:"ghosts,omitempty"`
	// Leader names the leader that wrote the floor: members that follow
	// the narrow view learn the leader from it (see Rank.Leader).
	Leader string `json:"leader,omitempty"`
}

// settled reports whether the floor says that the rink is at rest with
// the map of seq seq and version version, in lineage lineage: the leader
// plans no move after it, and every live member has acknowledged it.
func (f *ackFloor) settled(lineage, version, seq int64) bool {
	if f.Lineage != lineage || f.Version != version || f.Rest != version || version < 1 || f.Floor < version {
		return false
	}
	return f.Seq == 0 || f.Seq == seq && f.SeqFloor >= seq
}

// decodeFloor decodes a floor key's value; one that does not decode says
// nothing.
func decodeFloor(value []byte) ackFloor {
	var f ackFloor
	if json.Unmarshal(value, &f) != nil {
		return ackFloor{}
	}
	return f
}

// of returns a lower bound of a member's acknowledged map version; below
// 1 it is unknown.
func (f *ackFloor) of(name string) int64 {
	return boundIn(name, f.Version, f.Floor, f.Complete, f.Lagging)
}

// seqOf returns a lower bound of a member's acknowledged seq; below 1 it
// is unknown.
func (f *ackFloor) seqOf(name string) int64 {
	if f.Seq < 1 {
		return 0
	}
	return boundIn(name, f.Seq, f.SeqFloor, f.SeqComplete, f.SeqLagging)
}

func boundIn(name string, top, floor int64, complete bool, lagging map[string]int64) int64 {
	if !complete {
		return floor
	}
	if a, ok := lagging[name]; ok {
		return a
	}
	return top
}

// sendAck hands the applied map version to the ack writer, replacing any
// acknowledgement it has not written yet. It never blocks: the run goroutine
// is the only sender, so after draining the buffer there is room.
func (r *Rink) sendAck() { r.sendAckLazily(false) }

// ackPause is how long a member waits before it acknowledges a map that
// changes nothing it owns and announces nothing to it (a lazy
// acknowledgement). Such an acknowledgement is on nobody's way: the heirs
// of a map wait for the members that lose slots in it, and for the others
// they find in the maps they have applied that those never held the slots
// (see free). Written at once, the acknowledgements of every member not
// concerned would reach etcd together, right when the members concerned
// act on the map: with a graceful departure, while etcd is still sending
// the map to the heir. A moment later they go out behind the writes that
// matter, and a map that follows within the pause (an announcement and its
// move, a rolling deploy's next step) costs one write for both. An
// acknowledgement only ever comes late, never early, so the pause cannot
// let anybody start a slot sooner than before.
const ackPause = 3 * time.Millisecond

// sendAckLazily is sendAck; lazy marks an acknowledgement that may wait
// ackPause. An acknowledgement that replaces one not yet written is lazy
// only if that one was too.
func (r *Rink) sendAckLazily(lazy bool) {
	st := &r.st
	if st.inc == nil || !st.selfSeen || st.cur.Version == 0 || r.hushed() || len(st.draining) > 0 {
		return // a quiet time (see hush) and a drain (see drain.go) withhold acknowledgements
	}
	select {
	case old := <-r.ackCh:
		lazy = lazy && old.lazy
	default:
	}
	st.acked = ackState{inc: st.inc, lineage: st.lineage, seq: st.curSeq, warm: st.warmed}
	r.ackCh <- ackReq{inc: st.inc, lineage: st.lineage, version: st.cur.Version, seq: st.curSeq, warm: st.warmed, lazy: lazy}
}

type ackReq struct {
	inc     *incarnation
	lineage int64
	version int64
	seq     int64
	warm    int64
	lazy    bool // may wait ackPause (see sendAckLazily)
}

// writeAcks writes this member's acknowledgements, newest first, retrying
// failed writes until a newer one replaces them or the incarnation ends.
//
// Each write is guarded by the value it replaces, so that a write that timed
// out here but commits late on the server cannot overwrite a newer one: an
// acknowledgement never goes backwards. It is also guarded by the member
// key's create revision and lease, so that an incarnation that has ended
// writes nothing (a resumed one keeps the create revision, not the lease).
//
// Once it has written one, it watches the ack key, and when somebody else
// deletes or overwrites it (an operator's etcdctl del --prefix
// <rink>/acks/, or a put, issue 22) it writes the newest acknowledgement
// again: nothing else would until the next map, and until then the
// leader's floor would not know this member's.
func (r *Rink) writeAcks() {
	var (
		cur  *ackReq
		inc  *incarnation // whose key last holds
		last *string      // the value we believe the key holds (nil: no key)

		lazyUntil time.Time // when a lazy acknowledgement waiting is due

		written  *ackReq            // the newest acknowledgement written
		wroteRev int64              // the revision written's write committed at
		gone     clientv3.WatchChan // the ack key's changes after written's write (nil: none watched)
		stopGone context.CancelFunc // ends gone's watch
	)
	unwatch := func() {
		if stopGone != nil {
			stopGone()
		}
		gone, stopGone = nil, nil
	}
	defer unwatch()
	member, key := r.keys.member(r.opts.member), r.keys.ack(r.opts.member)
	b := newBackoff()
	for {
		if cur == nil {
			select {
			case req := <-r.ackCh:
				cur = &req
			case resp, ok := <-gone:
				// Our own puts come back up to wroteRev; anything else
				// is somebody else's.
				var foreign *clientv3.Event
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypeDelete || ev.Kv.ModRevision > wroteRev {
						foreign = ev
					}
				}
				if ok && resp.Err() == nil && foreign == nil {
					continue
				}
				// Changed, or the watch ended: write it again (a write
				// that finds the key as we left it only repeats it).
				if written.inc.ctx.Err() != nil {
					unwatch()
					continue
				}
				switch {
				case foreign == nil:
					unwatch()
				case foreign.Type == clientv3.EventTypeDelete:
					r.log.Warn("own acknowledgement key deleted: writing it again")
					last = nil
				default:
					r.log.Warn("own acknowledgement key overwritten: writing it again")
					v := string(foreign.Kv.Value)
					last = &v
				}
				again := *written
				again.lazy = false
				cur = &again
			case <-r.ctx.Done():
				return
			}
		}
		if cur.inc.ctx.Err() != nil {
			cur = nil
			continue
		}
		if cur.lazy && cur.inc == inc && last != nil {
			// Wait until ackPause after the first lazy acknowledgement
			// not yet written, unless one that is not lazy comes first.
			// Never the first write of an incarnation: see others.
			if lazyUntil.IsZero() {
				lazyUntil = time.Now().Add(ackPause)
			}
			pause := time.NewTimer(time.Until(lazyUntil))
			select {
			case req := <-r.ackCh:
				cur = &req
			case <-pause.C:
				cur.lazy = false
			case <-r.ctx.Done():
				pause.Stop()
				return
			}
			pause.Stop()
			continue
		}
		lazyUntil = time.Time{}
		if cur.inc != inc {
			inc, last = cur.inc, nil
			unwatch()
		}
		val, _ := json.Marshal(ackValue{Ack: cur.version, Lineage: cur.lineage, Seq: cur.seq, Warm: cur.warm})
		guard := clientv3.Compare(clientv3.Version(key), "=", 0)
		if last != nil {
			guard = clientv3.Compare(clientv3.Value(key), "=", *last)
		}
		ctx, cancel := context.WithTimeout(cur.inc.ctx, r.opts.ttl)
		resp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(member), "=", cur.inc.createRev),
				clientv3.Compare(clientv3.LeaseValue(member), "=", cur.inc.lease), guard).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(cur.inc.lease))).
			Else(clientv3.OpGet(member), clientv3.OpGet(key)).
			Commit()
		cancel()
		switch {
		case err == nil && resp.Succeeded:
			v := string(val)
			written, last, cur, wroteRev = cur, &v, nil, resp.Header.Revision
			if gone == nil {
				gone, stopGone = watchKey(written.inc.ctx, r.cli, key, wroteRev+1)
			}
			b.reset()
			continue
		case err == nil:
			mkv := resp.Responses[0].GetResponseRange().Kvs
			if len(mkv) == 0 || mkv[0].CreateRevision != cur.inc.createRev || mkv[0].Lease != int64(cur.inc.lease) {
				cur = nil // our key is gone, or a later incarnation's: the keeper or the run loop fences
				continue
			}
			// The ack key is not what we thought (a late write of ours
			// landed): go again from what is there.
			last = nil
			if akv := resp.Responses[1].GetResponseRange().Kvs; len(akv) > 0 {
				v := string(akv[0].Value)
				last = &v
			}
			continue
		case cur.inc.ctx.Err() != nil:
			continue
		}
		wait := b.next()
		r.log.Warn("writing acknowledgement failed, retrying", zap.Error(err), zap.Int64("version", cur.version), zap.Duration("backoff", wait))
		select {
		case req := <-r.ackCh:
			req.lazy = req.lazy && cur.lazy // it replaces one that was due
			cur = &req
		case <-time.After(wait):
		case <-r.ctx.Done():
			return
		}
	}
}

// watchKey watches key from revision rev on, until stop is called or ctx
// ends.
func watchKey(ctx context.Context, cli *clientv3.Client, key string, rev int64) (_ clientv3.WatchChan, stop context.CancelFunc) {
	ctx, stop = context.WithCancel(ctx)
	return cli.Watch(ctx, key, clientv3.WithRev(rev)), stop
}

// ackView is the leader's view of the members, their acknowledgements and
// the map, as of one revision, for computing the floor.
type ackView struct {
	members map[string]ackMember // live member keys
	acks    map[string]ackKey
	lineage int64 // the map key's create revision; 0 while it is absent
	version int64
	seq     int64            // the map key's etcd version
	ranked  map[string]bool  // the members the map ranks
	marks   []mapMark        // the map's puts seen in this lineage, oldest first (see seqAt)
	changes changeLog        // which map put last changed each member (see still.go)
	mapRev  int64            // the map key's mod revision
	whole   *rankMap         // the map of seq, when the view knows it (see records.go)
	snap    *mvccpb.KeyValue // the snapshot key as last seen
	floor   []byte           // the floor key's value; nil while it is absent
}

// ackMember is a live member key in the leader's view.
type ackMember struct {
	lease     int64
	createRev int64
	// carried is the acknowledgement the member wrote under an earlier
	// lease of the same key (a resume rebinds the key to a new lease, and
	// the old lease takes the old ack key with it), if the view saw it.
	// An acknowledgement speaks of the process, whose view never goes
	// back, whatever its lease: it stays a bound until the member writes
	// one under its new lease.
	carried ackValue
}

// mapMark is one put of the map key: its mod revision and seq.
type mapMark struct{ rev, seq int64 }

// maxMarks bounds how many map puts the view remembers.
const maxMarks = 1024

type ackKey struct {
	lease int64
	ackValue
}

func (v *ackView) put(k keys, kv *mvccpb.KeyValue, listed bool) {
	key := string(kv.Key)
	switch {
	case k.isMember(key):
		// Stray member keys are left out, as members leave them out of
		// their views (the run goroutine logs them); a put that makes a
		// key stray takes its member out.
		name, ok := k.liveMember(kv)
		if !ok {
			delete(v.members, name)
			v.changes.forget(name)
			return
		}
		m := ackMember{lease: kv.Lease, createRev: kv.CreateRevision}
		if old, ok := v.members[name]; ok && old.createRev == m.createRev {
			m.carried = old.carried
			if a, ok := v.acks[name]; ok && old.lease != m.lease && a.lease == old.lease && a.Seq > 0 {
				m.carried = a.ackValue // a resume: the old lease's ack key goes next
			}
		}
		v.members[name] = m
	case k.isAck(key):
		a := ackKey{lease: kv.Lease}
		_ = json.Unmarshal(kv.Value, &a.ackValue) // an unreadable value acknowledges nothing
		v.acks[k.ackName(key)] = a
	case k.isMap(key):
		var version int64
		var shape *mapShape // nil: unknown (a change record this view cannot apply)
		if c, ok := decodeRecord(kv.Value); ok {
			version = c.Version
			switch {
			case v.snap != nil && v.snap.ModRevision == kv.ModRevision:
				shape = v.shapeOf(v.snap.Value)
			case v.whole != nil && !listed && kv.CreateRevision == v.lineage && kv.Version == v.seq+1:
				if m, err := apply(v.whole, &c); err == nil {
					v.whole, shape = &m, &mapShape{Members: m.Members, Table: m.Table}
				}
			}
		} else {
			var m struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal(kv.Value, &m) // an unusable map: members refuse it, the floor follows its version
			version, shape = m.Version, v.shapeOf(kv.Value)
		}
		if kv.CreateRevision != v.lineage || listed || shape == nil {
			v.marks = v.marks[:0]
			v.changes.reset()
		}
		if len(v.marks) == maxMarks {
			v.marks = append(v.marks[:0], v.marks[maxMarks/2:]...)
		}
		v.marks = append(v.marks, mapMark{kv.ModRevision, kv.Version})
		v.lineage, v.version, v.seq, v.mapRev = kv.CreateRevision, version, kv.Version, kv.ModRevision
		if shape == nil {
			v.whole = nil // (ranked stays as it was: it only says when the rink is at rest)
			return
		}
		v.seeShape(*shape)
	case k.isSnapshot(key):
		v.snap = kv
		if v.whole == nil && v.mapRev == kv.ModRevision && v.seq > 0 {
			// The whole map written with a record this view could not apply.
			if shape := v.shapeOf(kv.Value); shape != nil {
				v.changes.reset()
				v.seeShape(*shape)
			}
		}
	case k.isFloor(key):
		v.floor = kv.Value
	}
}

// shapeOf decodes a whole map for the view, keeping it (whole) for the
// change records that follow; nil when it does not decode.
func (v *ackView) shapeOf(value []byte) *mapShape {
	m, err := decodeMap(value, peekSlots(value))
	if err != nil {
		v.whole = nil
		return nil
	}
	v.whole = &m
	return &mapShape{Members: m.Members, Table: m.Table}
}

// seeShape records the shape of the map of the view's seq.
func (v *ackView) seeShape(shape mapShape) {
	v.changes.see(v.seq, shape)
	clear(v.ranked)
	for _, name := range shape.Members {
		v.ranked[name] = true
	}
}

// present reports whether a member may still hold slots: its key, or its
// acknowledgement key (bound to its lease), is in the view.
func (v *ackView) present(name string) bool {
	_, member := v.members[name]
	_, acked := v.acks[name]
	return member || acked
}

func (v *ackView) del(k keys, key string) {
	switch {
	case k.isMember(key):
		delete(v.members, k.memberName(key))
		v.changes.forget(k.memberName(key))
	case k.isAck(key):
		delete(v.acks, k.ackName(key))
	case k.isMap(key):
		v.lineage, v.version, v.seq, v.marks = 0, 0, 0, v.marks[:0]
		v.mapRev, v.whole = 0, nil
		v.changes.reset()
		clear(v.ranked)
	case k.isFloor(key):
		v.floor = nil
	}
}

// seqAt returns the seq of the map that was current at revision rev, or 0
// when the view cannot tell (the map changed since, and the put that made
// that map current came before the view's first sight of the lineage).
func (v *ackView) seqAt(rev int64) int64 {
	i := sort.Search(len(v.marks), func(i int) bool { return v.marks[i].rev > rev })
	if i == 0 {
		return 0
	}
	return v.marks[i-1].seq
}

// noteLoad folds a load key's put or deletion into loads, and reports
// whether it was one. A summary that does not decode counts as none.
func (r *Rink) noteLoad(loads map[string]loadReport, kv *mvccpb.KeyValue, deleted bool) bool {
	key := string(kv.Key)
	if !r.keys.isLoad(key) {
		return false
	}
	name := r.keys.loadName(key)
	if rep, ok := decodeLoad(kv.Value, r.opts.slots); ok && !deleted && validName(name, false) == "" {
		loads[name] = rep
	} else {
		delete(loads, name)
	}
	return true
}

// compute computes the floor of the view, or nil while there is no map.
//
// An acknowledgement beyond the view's map (a version above the map's: an
// older map was written by hand; a seq above the map's: a map the leader
// has not seen) is unknown, never a bound.
//
// A member whose acknowledgement is unknown (it has written none yet, is
// quiet after a resume, refuses the map, or its ack key was deleted) still
// has a bound in seqs, which stands in its seq acknowledgement (SeqLagging,
// for free), so that it blocks only the slots it could hold (issue 22):
//
//   - the acknowledgement it wrote under an earlier lease of its key, if
//     the view saw it (see ackMember.carried);
//   - else the seq of the map current when its key was created: a member
//     acts only once its view has reached its own key (see selfSeen), so
//     it holds no slot that the maps from that one on do not give it.
//
// Not the map current at a resume: a member quiet after a resume holds
// nothing, but its quiet time (see hush) also keeps the slots it owned
// from others, which after a restore of etcd a member nobody sees may
// still act on. Such a bound counts in SeqFloor only for members that the
// map does not rank: the rink is not at rest until every ranked member has
// acknowledged the map.
func (v *ackView) compute() *ackFloor {
	if v.lineage == 0 || v.version < 1 || v.seq < 1 {
		return nil
	}
	f := &ackFloor{Lineage: v.lineage, Version: v.version, Floor: v.version, Complete: true, Lagging: map[string]int64{},
		Seq: v.seq, SeqFloor: v.seq, SeqComplete: true, SeqLagging: map[string]int64{},
		Still: true, Base: v.changes.base}
	for name, m := range v.members {
		var ack, seq int64 // unknown: no ack key yet, another lineage, or an ended incarnation's
		if a, ok := v.acks[name]; ok && a.lease == m.lease && a.Lineage == v.lineage {
			ack, seq = a.Ack, a.Seq
		}
		if ack > v.version {
			ack = 0
		}
		if seq > v.seq {
			seq = 0
		}
		if seq >= 1 {
			if seq = v.changes.still(name, seq); seq == v.seq && ack >= 1 {
				ack = v.version // nothing changed it since: see still.go
			}
		}
		bound, verBound := seq, ack
		if ack < 1 && seq < 1 {
			if c := m.carried; c.Lineage == v.lineage && c.Seq > 0 && c.Seq <= v.seq {
				bound = c.Seq
			} else {
				bound = v.seqAt(m.createRev)
			}
			bound = v.changes.still(name, bound)
			if bound == v.seq {
				verBound = v.version // (the one map version the seq names)
			}
			if !v.ranked[name] {
				seq, ack = bound, verBound
			}
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = addLagging(f.Complete, f.Lagging, name, verBound, v.version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = addLagging(f.SeqComplete, f.SeqLagging, name, bound, v.seq)
	}
	for name, a := range v.acks {
		// An ack key without a member key: its lease lives (ack keys are
		// bound to it), and so may its member, whose key an operator
		// deleted (a ghost), or which departed a moment ago. Members that
		// follow the narrow view know no live set (see view.go): its
		// acknowledgement, as written, stays its bound until the lease
		// goes. (Not raised by still: the log forgot its changes with
		// its key.)
		if _, ok := v.members[name]; ok || a.Lineage != v.lineage {
			continue
		}
		ack, seq := a.Ack, a.Seq
		if ack > v.version {
			ack = 0
		}
		if seq > v.seq {
			seq = 0
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = addLagging(f.Complete, f.Lagging, name, ack, v.version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = addLagging(f.SeqComplete, f.SeqLagging, name, seq, v.seq)
	}
	return f
}

// addLagging lists a member whose acknowledgement is below top, until
// more than maxLagging lag: then the list is dropped (incomplete).
func addLagging(complete bool, lagging map[string]int64, name string, ack, top int64) (bool, map[string]int64) {
	if ack >= top || !complete {
		return complete, lagging
	}
	if len(lagging) == maxLagging {
		return false, nil
	}
	lagging[name] = ack
	return true, lagging
}

// aggregate runs while this member leads (until ctx ends): it follows all
// of the rink's keys, and after every change writes the floor anew if it
// changed. Writes are guarded by our election key, so a deposed leader
// writes nothing.
func (r *Rink) aggregate(ctx context.Context, electKey string, electRev int64, rest *restBox) {
	reqs := make(chan []byte, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.writeFloors(ctx, electKey, electRev, reqs)
	}()
	defer wg.Wait()
	a := &aggregation{v: &ackView{members: map[string]ackMember{}, acks: map[string]ackKey{}, ranked: map[string]bool{}}, loads: map[string]loadReport{}, reqs: reqs, rest: rest}
	// (Buffered: the follower reads ahead while a floor is computed, and
	// the loop below folds what piled up with one computation.)
	batches := make(chan watchBatch, maxMerged)
	wg.Add(1)
	go func() {
		defer wg.Done()
		follow(ctx, r.cli, r.keys.prefix, clientv3.GetPrefixRangeEnd(r.keys.prefix), r.log, func(b watchBatch) bool {
			select {
			case batches <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	defer a.unhold()
	for {
		var b watchBatch
		var held <-chan time.Time
		if a.holdTimer != nil {
			held = a.holdTimer.C
		}
		select {
		case b = <-batches:
			// Every batch that came meanwhile, folded with one computation
			// of the floor: at 10,000 members a computation costs
			// milliseconds, and acknowledgements come faster than that.
		merge:
			for n := 1; n < maxMerged; n++ {
				select {
				case next := <-batches:
					b = b.then(next)
				default:
					break merge
				}
			}
		case <-rest.kick:
			// What the leader plans changed: the floor says it (see fold).
		case <-held:
			a.holdTimer = nil
			a.holds = min(a.holds+1, maxHolds)
			a.send(a.held)
			continue
		case <-ctx.Done():
			return
		}
		r.fold(a, b)
	}
}

// maxMerged bounds the watch batches the aggregator folds at once.
const maxMerged = 64

// then returns batch b followed by next, of the same watch, as one batch:
// folding it is folding b and then next.
func (b watchBatch) then(next watchBatch) watchBatch {
	if next.snapshot {
		return next
	}
	b.events = append(slices.Clip(b.events), next.events...) // (b's slice is the watch's)
	b.rev = next.rev
	return b
}

// floorPause is how long the leader holds back a floor that raises no
// bound that anybody waits for: one that says only that the map moved on
// while the members it changed have not acknowledged it yet, or only what
// the leader plans (Rest, when a newcomer comes). Such a floor helps
// nobody: an heir of a live member waits for that member's
// acknowledgement, which a floor after it brings, and finds in the map
// before the change that the members it did not change did not hold what
// it gains. Written at once, it would be one more write, sent to every
// member, per change; held, it is replaced by the floor that counts the
// acknowledgements, usually within a few milliseconds, and written anyway
// after the pause (a member that drains withholds its acknowledgement for
// longer), and after twice as long the next time, while nothing comes
// that anybody waits for (see aggregation.holds).
const floorPause = 50 * time.Millisecond

// heldFloor is a floor held back (see floorPause).
type heldFloor struct {
	val []byte
	f   *ackFloor
}

// send asks for floor h to be written at once, replacing any floor held
// back or not yet written.
func (a *aggregation) send(h heldFloor) {
	a.unhold()
	a.last, a.lastF = h.val, h.f
	a.asked[a.nasked%len(a.asked)] = h.val
	a.nasked++
	select {
	case <-a.reqs:
	default:
	}
	a.reqs <- h.val
}

// unhold drops the floor held back, if any.
func (a *aggregation) unhold() {
	if a.holdTimer != nil {
		a.holdTimer.Stop()
		a.holdTimer = nil
	}
	a.held = heldFloor{}
}

// offer asks for floor f (val, its JSON) to be written: at once, or after
// a pause when it raises no bound anybody waits for (see floorPause).
func (a *aggregation) offer(f *ackFloor, val []byte) {
	h := heldFloor{val: val, f: f}
	if a.last == nil || !a.idle(f) {
		a.holds = 0
		a.send(h)
		return
	}
	a.held = h
	pause := a.pause(f)
	if until := time.Now().Add(pause); a.holdTimer == nil || until.Before(a.holdUntil) {
		if a.holdTimer != nil {
			a.holdTimer.Stop()
		}
		a.holdTimer, a.holdUntil = time.NewTimer(pause), until
	}
}

// maxHolds bounds how often in a row the hold doubles (see offer): idle
// floors wait at most floorPause << maxHolds (0.8 s).
const maxHolds = 4

// idle reports whether floor f, to follow the floor last asked for (l),
// raises no bound that anybody waits for.
//
// An heir of slot s waits for the bound of a live member x only while the
// maps from x's bound up to the one that gave s to the heir gave x the
// slot (see free and freeNarrow). If no map after x's bound in l up to its
// bound in f took a slot from x, raising it frees nothing: a slot that x
// held in a map from its bound in l on, x still holds in its bound in f
// (or in a later map, which the heir checks as before). So f is idle when
// it speaks of the same lineage, of the same map or a later one, with the
// same ghosts, and no live member's bound rises past a map that took a
// slot from it: a newcomer's acknowledgement, or an heir's, raises nothing
// anybody waits for; the member a change takes slots from raises what its
// heirs wait for. A member whose key went and whose acknowledgement key
// went with its lease holds nothing (see holderBound). And a member whose
// history begins after a bound waits for it regardless (raisesPastStart). Members that
// predate seqs read bounds in versions: a member that writes no seq is
// judged by the rise of its version bound.
func (a *aggregation) idle(f *ackFloor) bool {
	l := a.lastF
	if l == nil || f.Lineage != l.Lineage || f.Seq < l.Seq || f.Version < l.Version || f.Ghosts != l.Ghosts || l.Seq < 1 {
		return false
	}
	if f.Seq > l.Seq && f.SeqComplete && len(f.SeqLagging) == 0 {
		return false // every member at a map l did not count (see raisesPastStart)
	}
	lo := l.SeqFloor // (the lowest bound l gives)
	if l.SeqComplete {
		lo = l.Seq
		for _, b := range l.SeqLagging {
			lo = min(lo, b)
		}
	}
	losses, known := a.v.changes.lossesAfter(lo)
	if !known {
		// (Which maps took what is not known: idle only when no bound
		// changed at all, only what the leader plans.)
		return sameBounds(l, f)
	}
	for _, x := range losses {
		if x.seq > f.Seq {
			break
		}
		if a.v.present(x.name) && l.seqOf(x.name) < x.seq && f.seqOf(x.name) >= x.seq {
			return false
		}
	}
	if a.raisesPastStart(l, f, lo) {
		return false
	}
	if !f.Complete || !l.Complete {
		return f.Floor <= l.Floor
	}
	for name, b := range l.Lagging {
		if fb, ok := f.Lagging[name]; (!ok || fb > b) && a.v.acks[name].Seq < 1 {
			return false
		}
	}
	return true
}

// sameBounds reports whether two floors give every member the same bounds
// (they may differ in what the leader plans).
func sameBounds(l, f *ackFloor) bool {
	return f.Lineage == l.Lineage && f.Seq == l.Seq && f.SeqFloor == l.SeqFloor && f.SeqComplete == l.SeqComplete && maps.Equal(f.SeqLagging, l.SeqLagging) &&
		f.Version == l.Version && f.Floor == l.Floor && f.Complete == l.Complete && maps.Equal(f.Lagging, l.Lagging)
}

// raisesPastStart reports whether floor f, to follow l (whose lowest bound
// is lo), raises some member's bound from below the seq at which another
// member's history may begin to at least that seq. A member knows the maps
// from its first on (its listing: at least the map current when its key
// was created), and cannot tell whether a member whose bound lies before
// them still holds a slot it gains: it waits for that bound to reach its
// first map, though no loss lies between (see free and freeNarrow). A
// member that joined while the map of seq h was current may know no map
// before h: a rise across h is written at once. (A member whose listing
// came maps later is cleared by the floor that says every member is at a
// newer map than the last: that one is written at once too.)
func (a *aggregation) raisesPastStart(l, f *ackFloor, lo int64) bool {
	var starts []int64
	for _, m := range a.v.members {
		if h := a.v.seqAt(m.createRev); h > lo {
			starts = append(starts, h)
		}
	}
	if len(starts) == 0 {
		return false
	}
	slices.Sort(starts)
	crosses := func(name string) bool {
		bl, bf := l.seqOf(name), f.seqOf(name)
		i := sort.Search(len(starts), func(i int) bool { return starts[i] > bl })
		return i < len(starts) && starts[i] <= bf
	}
	for name := range a.v.members {
		if crosses(name) {
			return true
		}
	}
	for name := range a.v.acks {
		if crosses(name) {
			return true
		}
	}
	return false
}

// pause returns how long idle floor f may be held: floorPause, doubled
// for each hold in a row (see holds); the longest when it only says that
// the leader no longer rests; and the longest hold when every
// member f lists as lagging is one that a map after its bound changed, or
// one whose member key is gone. Such a floor says only that the map moved
// on while the members it changed have not acknowledged it: they owe their
// acknowledgements and know it (see ackOwed), and the floor that counts
// them replaces it.
func (a *aggregation) pause(f *ackFloor) time.Duration {
	if l := a.lastF; l != nil && l.Rest != 0 && f.Rest == 0 && sameBounds(l, f) {
		// Only that the leader no longer rests: it is about to proclaim
		// a map (a newcomer, a leaver), whose floor replaces this one.
		return floorPause << maxHolds
	}
	owed := f.SeqComplete && f.Complete && len(f.SeqLagging) > 0
	for name, b := range f.SeqLagging {
		if !owed {
			break
		}
		_, member := a.v.members[name]
		// (One with an ack key and no member key has departed, its lease
		// about to go, or is a ghost, which the floor counts apart: its
		// bound raises nothing anybody waits for.)
		owed = !member || a.v.changes.changedAfter(name, b)
	}
	for name := range f.Lagging {
		if _, ok := f.SeqLagging[name]; !ok {
			owed = false
		}
	}
	if owed {
		return floorPause << maxHolds
	}
	return floorPause << a.holds
}

// aggregation is the aggregator's state (see aggregate).
type aggregation struct {
	v         *ackView
	last      []byte      // the floor we last asked to be written
	lastF     *ackFloor   // and what it says
	held      heldFloor   // a floor held back (see floorPause); val nil: none
	holdTimer *time.Timer // ends the hold; nil when none
	holdUntil time.Time   // when it ends
	// holds counts the held floors written when their pause ran out, since
	// the last floor that raised a bound: each such hold lasts twice the
	// one before, so that acknowledgements that come in slowly (a drain, a
	// loaded machine) do not cost a floor write every floorPause.
	holds    int
	loads    map[string]loadReport // members' load summaries, when balancing by load
	lastWarm map[string]int64      // members' warm-up readiness, when warming up
	reqs     chan []byte           // to writeFloors
	rest     *restBox              // what the leader plans
	// asked holds the floors last asked for (nasked counts them all): a
	// floor key that the view sees holding one of them is one of our
	// writes landing after a newer one was asked for, not somebody
	// else's.
	asked  [4][]byte
	nasked int
}

// askedRecently reports whether val is one of the floors last asked for.
func (a *aggregation) askedRecently(val []byte) bool {
	for _, x := range a.asked {
		if x != nil && bytes.Equal(x, val) {
			return true
		}
	}
	return false
}

// fold folds one watch batch (or none, when woken by setRest) into the
// aggregator's view, hands the load summaries and warm-up readiness to the
// run goroutine, and asks for the floor to be written when it changed.
func (r *Rink) fold(a *aggregation, b watchBatch) {
	v, loads := a.v, a.loads
	loadsChanged := false
	if b.snapshot {
		clear(v.members)
		clear(v.acks)
		clear(loads)
		loadsChanged = true
		v.lineage, v.version, v.floor = 0, 0, nil
		v.mapRev, v.whole, v.snap = 0, nil, nil
		v.marks = v.marks[:0]
		clear(v.ranked)
		for _, kv := range b.kvs {
			v.put(r.keys, kv, true)
			loadsChanged = r.noteLoad(loads, kv, false) || loadsChanged
		}
	}
	for _, ev := range b.events {
		if ev.Type == clientv3.EventTypePut {
			v.put(r.keys, ev.Kv, false)
		} else {
			v.del(r.keys, string(ev.Kv.Key))
		}
		loadsChanged = r.noteLoad(loads, ev.Kv, ev.Type != clientv3.EventTypePut) || loadsChanged
	}
	if loadsChanged && r.opts.byLoad {
		// The newest summaries replace any the run goroutine has not
		// taken yet.
		reps := maps.Clone(loads)
		r.inbox.send(func(m *mail) { m.loads, m.loadsSet = reps, true })
	}
	if r.opts.warmup > 0 {
		warm := map[string]int64{}
		for name, a := range v.acks {
			if a.Warm > 0 {
				warm[name] = a.Warm
			}
		}
		if !maps.Equal(warm, a.lastWarm) {
			a.lastWarm = warm
			r.inbox.send(func(m *mail) { m.warm, m.warmSet = warm, true })
		}
	}
	f := v.compute()
	if f == nil {
		return
	}
	f.Ghosts, f.Leader = int(a.rest.ghosts.Load()), r.opts.member
	if info := a.rest.info.Load(); info != nil && info.lineage == v.lineage && info.seq == v.seq {
		// (Said of this very map: one written by hand with the same
		// version is another seq.)
		if info.rest == f.Version {
			f.Rest = info.rest
		}
		f.Round, f.Imbalance, f.Tolerance = info.round, info.imbalance, info.tolerance
	}
	foreign := a.foreignFloor(r.keys, b.events) // (first: it notes our newest floor landing)
	if !bytes.Equal(v.floor, a.last) && (b.snapshot || foreign) {
		// Somebody else changed the floor (deleted it, or an earlier
		// leader's write landed): write ours again.
		a.last = nil
	}
	val, _ := json.Marshal(f)
	if bytes.Equal(val, a.last) || bytes.Equal(val, v.floor) {
		a.unhold() // (what is written, or asked for, already says it)
		return
	}
	a.offer(f, val)
}

// foreignFloor reports whether the floor writes in events end with one
// that is not ours. Ours are the floors we asked for (asked): one of them
// lands after we asked for a newer one, which is on its way (rewriting
// the newer one for it cost every member a floor event per leave at 3,000
// members). Once the newest we asked for has landed, none of ours can land
// after it (writeFloors writes one at a time, each guarded by the key's
// revision as it last knew it): any other value is somebody else's, an
// operator's putting back an older floor of ours included.
func (a *aggregation) foreignFloor(k keys, events []*clientv3.Event) bool {
	foreign := false
	for _, ev := range events {
		if !k.isFloor(string(ev.Kv.Key)) {
			continue
		}
		put := ev.Type == clientv3.EventTypePut
		switch {
		case put && bytes.Equal(ev.Kv.Value, a.last):
			a.asked, foreign = [4][]byte{}, false
		case put && a.askedRecently(ev.Kv.Value):
			foreign = false
		default:
			foreign = true
		}
	}
	return foreign
}

// writeFloors writes the newest floor handed to it, guarded by our election
// key and by the floor key's revision as we last knew it (so that a write
// that commits late cannot replace a newer one).
func (r *Rink) writeFloors(ctx context.Context, electKey string, electRev int64, reqs <-chan []byte) {
	key := r.keys.floor()
	var base int64 // the floor key's mod revision as we believe it; 0: absent
	var val []byte
	b := newBackoff()
	for {
		select {
		case next := <-reqs:
			val = next // a newer floor replaces one not yet written
		default:
			if val == nil {
				select {
				case val = <-reqs:
				case <-ctx.Done():
					return
				}
			}
		}
		wctx, cancel := context.WithTimeout(ctx, r.opts.ttl)
		resp, err := r.cli.Txn(wctx).
			If(clientv3.Compare(clientv3.CreateRevision(electKey), "=", electRev),
				clientv3.Compare(clientv3.ModRevision(key), "=", base)).
			Then(clientv3.OpPut(key, string(val))).
			Else(clientv3.OpGet(electKey), clientv3.OpGet(key)).
			Commit()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && resp.Succeeded:
			base, val = resp.Header.Revision, nil
			b.reset()
			continue
		case err == nil:
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != electRev {
				return // no longer the leader: the run goroutine finds out on its own
			}
			base = 0
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
				base = kvs[0].ModRevision
			}
			continue
		}
		wait := b.next()
		r.log.Warn("writing the acknowledgement floor failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
		select {
		case next := <-reqs:
			val = next
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}
