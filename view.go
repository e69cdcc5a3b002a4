package rink

import (
	"github.com/rink-go/rink/internal/core"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// What a member follows (issue 25). A leader needs every member key and
// election key: it plans from them. A member that does not lead needs the
// map, the floor, and its own member key; in a rink of protocol 3 that is
// all it follows (the narrow view), so that a join or a departure
// elsewhere costs it one change record, not an event per key written, and
// its memory holds no entry per member. What it gave up and where it
// comes from now:
//
//   - who is live, for the handover check: the check asks only about the
//     members that held the slot in the maps it looks at (see free), with
//     the bounds the floor gives them; the leader's floor accounts for
//     every member with a key or an ack key (a ghost's ack key lives with
//     its lease: see ackView.compute), and a member that a map drops
//     because it holds nothing any more is named in that put's transition
//     (see goneAt), written by the leader once its key and lease are gone,
//     or by the member itself as it departs;
//   - ghosts: the leader keeps a ghost ranked until its lease is gone (see
//     withGhosts), and its floor keeps the ghost's bound;
//   - its own key (a deletion or a rebinding by hand fences at once): a
//     watch of that one key (see followOwn);
//   - the leader's name: the map's Leader;
//   - that every ranked member's key is there (for Settled): the leader's
//     floor, written after the map that drops a member whose key went.
//
// A member follows the wide view while it leads, while the rink's map is
// of protocol 2 (a leader of d85b50e writes no transitions and its floor
// counts only member keys), and until it has applied a map. A map key
// deleted by hand changes nothing: the leader starts a new lineage.

// view is the run goroutine's record of which view it follows.
//
// Invariants: wide is true only after a listing of the wide view was
// applied since the watcher was last told to follow it (r.wideView), and
// false once told to follow the narrow view; st.members then holds every
// live member key (else only this member's own); goneAt holds, per name,
// the seq of the map that dropped it as holding nothing, until a later map
// ranks or lists that name again.
type view struct {
	wide bool
	// listed: a listing was applied since this process started. Until
	// then wantWide keeps the view New chose: a member that joins a rink
	// of protocol 3 knows no map before its first listing, and must not
	// ask for the wide view (every member key) for that.
	listed bool
	goneAt map[string]int64
	// selfCheck: whether this process has begun (1) or finished (2) the
	// check for an earlier incarnation of its name (see checkOwnName).
	selfCheck int
}

// wantWide reports whether this member should follow the wide view.
func (r *Rink) wantWide() bool {
	st := &r.st
	if !st.view.listed && st.lead == nil {
		return r.wideView.Load()
	}
	return st.lead != nil || st.cur.Version == 0 || st.cur.Schema < 3
}

// syncView tells the watcher which view to follow, when that changed: it
// lists the rink anew in that view.
func (r *Rink) syncView() {
	want := r.wantWide()
	if r.wideView.Load() == want {
		return
	}
	r.wideView.Store(want) // (published: the watcher reads it)
	r.st.view.wide = false
	r.fx().relist()
}

// noteGone records the members a put's transition names as gone, when the
// put follows the map applied before it (prev, of seq prevSeq) and names
// it as its base, and the map is not stale: an older put written back by
// hand says nothing of today's members. seq is the put's; delta is what
// its record changed (nil: a whole map).
//
// A name recorded is in no map since: one that comes back can only be at
// an index the record renamed or appended, so a record costs what it
// changed. A whole map, or many names, cost one pass over the members (a
// lookup per name cost every member O(names × members) per map while a
// 10,000-member rink shut down).
func (r *Rink) noteGone(t wire.Transition, seq, prevSeq int64, prev *wire.Map, delta *wire.MapDelta) {
	st := &r.st
	if st.view.goneAt == nil {
		st.view.goneAt = map[string]int64{}
	}
	var ranked map[string]bool // cur's members, built once when needed
	inCur := func(name string) bool {
		if ranked == nil && len(st.view.goneAt)+len(t.Gone) > maxGoneLookups {
			ranked = make(map[string]bool, len(st.cur.Members))
			for _, m := range st.cur.Members {
				ranked[m] = true
			}
		}
		if ranked != nil {
			return ranked[name]
		}
		return st.cur.Index(name) >= 0
	}
	back := inCur
	if delta != nil && !delta.Renamed && len(st.view.goneAt) > 0 {
		back = func(name string) bool { return delta.Places(name, len(prev.Members), st.cur.Members) }
	}
	for name := range st.view.goneAt {
		if st.view.goneAt[name] < st.hist.From || back(name) || st.cur.Waits(name) {
			delete(st.view.goneAt, name) // back, or older than anything the check looks at
		}
	}
	if len(t.Gone) == 0 || st.stale || prevSeq != seq-1 || prev.Version == 0 || t.From != prev.Version {
		return
	}
	ranks := inCur
	if delta != nil && !delta.Renamed {
		// A name the record took off its index (renamed or dropped) is in
		// the map after only where the record placed it, or where the map
		// before ranked it twice, which a leader never writes: a leave at
		// 10,000 members cost every member a pass over 10,000 names here,
		// 2 of the leave's 3.7 s of CPU (issue 25). Other names (a waiting
		// member that left) get the pass.
		ranks = func(name string) bool {
			for _, old := range delta.Renames {
				if old == name {
					return delta.Places(name, len(prev.Members), st.cur.Members)
				}
			}
			return inCur(name)
		}
	}
	for _, name := range t.Gone {
		if name != r.opts.member && !st.cur.Waits(name) && !ranks(name) {
			st.view.goneAt[name] = seq
		}
	}
}

// maxGoneLookups bounds the names noteGone looks up one by one in the
// members: past it, it makes a set of them.
const maxGoneLookups = 4

// narrowBarrier is others for the narrow view: ok is false when no slot
// can be free now (as in others), and low is the lowest bound the floor
// gives any member (see freeNarrow).
func (r *Rink) narrowBarrier() (low int64, ok bool) {
	st := &r.st
	if st.taint != 0 && st.taint == st.lineage || r.startsQuieted() { // (hush: see hushSpares)
		return 0, false // (see others)
	}
	if st.floor.Ghosts > 0 && st.floor.Lineage == st.lineage {
		return 0, false // a member whose key went may still act (see ghosts.go)
	}
	if st.view.selfCheck == 1 {
		return 0, false // an earlier incarnation of our name may still act (see checkOwnName)
	}
	low = r.lowBound()
	return low, low >= 1
}

// freeNarrow is free for the narrow view, which knows no live set: it
// asks about the members that held slot s in the maps from low (the
// lowest bound the floor gives any member) to the one it became ours in.
// A member that held s in none of them holds s only if a map before low
// gave it, and its bound, at least low, says it let go of it since.
func (r *Rink) freeNarrow(s int, low int64) bool {
	st := &r.st
	g := st.mine.of(s).gain
	if low >= g {
		return true
	}
	holders, known := st.hist.During(s, low, g)
	if !known {
		return false
	}
	for _, name := range holders {
		if name == "" || name == r.opts.member {
			continue
		}
		b, none := r.holderBound(name)
		if none || b >= g {
			continue
		}
		if held, known := st.hist.HeldBy(s, name, b, g); held || !known {
			return false
		}
	}
	return true
}

// holderBound returns a lower bound of the acknowledgement of name, which
// held a slot in a map freeNarrow looks at: the floor's, or the seq of the
// map that dropped it as gone (see noteGone), whichever is higher: a member
// gone at seq d holds nothing that a map from d on does not give it.
func (r *Rink) holderBound(name string) (bound int64, none bool) {
	bound = r.bound(name)
	if d, ok := r.st.view.goneAt[name]; ok {
		bound = max(bound, d)
	}
	return bound, false
}

// lowBound returns the lowest bound the floor gives any member, as a seq
// of the current lineage, or 0 when the floor says nothing usable: every
// member holds nothing that the maps from it on do not give it.
func (r *Rink) lowBound() int64 {
	f := &r.st.floor
	if !r.floorUsable() {
		return 0
	}
	if f.Seq > 0 {
		low := f.SeqFloor
		if f.SeqComplete {
			low = f.Seq
			for name, a := range f.SeqLagging {
				if name != r.opts.member { // (what we hold is ours to know)
					low = min(low, a)
				}
			}
		}
		return low
	}
	low := f.Floor
	if f.Complete {
		low = f.Version
		for name, a := range f.Lagging {
			if name != r.opts.member {
				low = min(low, a)
			}
		}
	}
	return r.seqOfVersion(low)
}

// onOwn folds what the watch of this member's own key saw (see followOwn)
// into the view: its own key put, rebound or deleted.
func (r *Rink) onOwn(b watchBatch) {
	st := &r.st
	self := r.opts.member
	key := r.keys.Member(self)
	selfGone := false
	if b.snapshot {
		if b.rev < st.ownRev {
			return // a listing of the view was newer (see ownRev)
		}
		st.ownRev = b.rev
		var kv *mvccpb.KeyValue
		for _, k := range b.kvs {
			if string(k.Key) == key {
				kv = k
			}
		}
		if kv != nil {
			r.putKey(kv)
		} else {
			delete(st.members, self)
		}
		if st.inc != nil && b.rev >= st.inc.CreateRev {
			m, ok := st.members[self]
			selfGone = !ok || m.createRev != st.inc.CreateRev || r.reboundSelf(m.lease, m.modRev)
		}
	} else {
		for _, ev := range b.events {
			if string(ev.Kv.Key) != key || ev.Kv.ModRevision <= st.ownRev {
				continue // (a listing of the view showed it already: see ownRev)
			}
			st.ownRev = ev.Kv.ModRevision
			if ev.Type == clientv3.EventTypePut {
				r.putKey(ev.Kv)
				if st.inc != nil && ev.Kv.CreateRevision == st.inc.CreateRev && r.reboundSelf(ev.Kv.Lease, ev.Kv.ModRevision) {
					selfGone = true
				}
				if ev.Kv.Lease != 0 {
					continue
				}
			}
			if _, ok := st.members[self]; !ok {
				continue
			}
			delete(st.members, self)
			st.dirty = true
			if st.inc != nil && ev.Kv.ModRevision > st.inc.CreateRev {
				selfGone = true
			}
		}
	}
	if selfGone && st.inc != nil {
		r.log.Warn("own member key deleted, or bound to another lease: fencing")
		r.fence(st.inc, ErrFenced)
	}
}

// followOwn follows this member's own key for the run goroutine.
func (r *Rink) followOwn() {
	key := r.keys.Member(r.opts.member)
	follow(r.ctx, r.cli, key, key+"\x00", r.log, func(b watchBatch) bool {
		b.own = true
		return r.sendBatch(b)
	})
}

// watch keeps the run goroutine's view current: the wide or the narrow
// view, as the run goroutine last asked (see syncView), listed anew when
// that changes.
func (r *Rink) watch() {
	f := core.NewFollower(newBackoff())
	for r.ctx.Err() == nil {
		wide := r.wideView.Load()
		key, end, extra := r.viewRange(wide)
		more, wait := followOnce(r.ctx, r.cli, f, key, end, extra, r.relistCh, r.log, func(batch watchBatch) bool {
			batch.wide = wide
			return r.sendBatch(batch)
		})
		if !more {
			return
		}
		if wait > 0 {
			sleep(r.ctx, wait)
		}
	}
}

// viewRange is what the view follows: the range watched, and the keys
// read with each listing of it.
func (r *Rink) viewRange(wide bool) (key, end string, extra []string) {
	key, end = r.keys.Narrowed()
	if wide {
		key, end = r.keys.Followed()
	}
	// The whole map beside the map key's change record (see records.go)
	// is read with each listing, never watched: a member reads it only
	// when it cannot apply the record.
	extra = []string{r.keys.Snapshot()}
	if !wide {
		// Our own key too, in the listing's revision: a process whose key
		// went while it was cut off learns it before it applies the maps
		// of the listing (its own watch may lag).
		extra = append(extra, r.keys.Member(r.opts.member))
	}
	return key, end, extra
}

// curLease is the lease of this process's current incarnation (0: none),
// which the check of its own name (see checkOwnName) does not wait for:
// read beside the run goroutine.
func (r *Rink) curLease() int64 {
	if inc := r.loadInc.Load(); inc != nil {
		return inc.Lease
	}
	return 0
}

// checkOwnName starts, once per process, the check for an earlier
// incarnation of this member's name that may still act, when the first map
// this process applies (listed right after it joined) ranks its name or
// lists it waiting in the narrow view: a restart under the same name after
// an operator deleted the old key to let it in (issue 22). A member that
// is new to the rink is in no map yet, and pays nothing. The map gives the
// old incarnation's slots to the name, so to this process; the leader
// knows the ghost (see noteCandidates) but its floor may say so too late.
// So this member lists the election keys once, and starts nothing until
// every lease that campaigns under its name but is not its own is gone.
//
// Unless the map says a leader planned it (t.ByLeader: not a departing
// member, whose view may know no ghost) from a view that held this
// process's key (t.View at or after the key's create revision) and knew
// no earlier incarnation of the name (no t.Incs for it): a leader makes a
// ghost of such an incarnation in the step that sees its key go, or its
// election key in a listing, before it plans again (see noteGhosts,
// noteCandidates), and names the replaced key in every map it plans while
// the ghost lasts (replacedNames). That is the common case of a newcomer
// ranked before its first listing, which at 10,000 members listed 10,000
// election keys each, thousands at once, and starved etcd (issue 25). A
// leader of a build that does not say its view (t.View 0) gets the
// listing.
func (r *Rink) checkOwnName(t wire.Transition) {
	st := &r.st
	if st.view.selfCheck != 0 {
		return
	}
	st.view.selfCheck = 2 // (checked now, or never: only the first map counts)
	if st.view.wide || st.inc == nil || st.joins != 1 || st.cur.Index(r.opts.member) < 0 && !st.cur.Waits(r.opts.member) {
		return // (the wide view finds such a ghost itself: see noteCandidates)
	}
	if _, replaced := t.Incs[r.opts.member]; !replaced && t.ByLeader && t.View != 0 && t.View >= st.inc.CreateRev {
		return
	}
	st.view.selfCheck = 1
	r.fx().checkOwnName(int64(st.inc.Lease))
}
