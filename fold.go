package rink

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// membership is this member's view of the rink's member and election keys,
// folded from the watch (see onWatch).
type membership struct {
	selfSeen bool // the view has reached inc's member key creation

	// The view of the rink's keys, as of revision rev.
	rev     int64
	members map[string]memberInfo // live member keys by member name
	elect   map[string]electInfo  // election keys
	electOf map[string][]string   // election keys by candidate name (see noteCandidates); mostly one each
	touched map[string]bool       // names whose member or election keys the batch being folded changed
	leader  string                // election key of the lowest create revision ("": recompute)
	// ownRev is the revision as of which members holds the newest state of
	// our own key: from its own watch (see onOwn) or a listing. A listing
	// older than it (sent before, answered after) does not overwrite it:
	// its own key may predate a rebinding the own watch has shown.
	ownRev int64

	view view // which view this member follows (see view.go)

	// selfIdx is our index in cur (-1: none), found when a map is
	// applied: the run goroutine asks for its rank on every event. unlisted
	// holds the members cur ranks that have no key in members, kept up as
	// keys come and go and maps change (for settled). Neither costs
	// O(members) per event: a join in a rink of 1,000 members spent a fifth
	// of its CPU scanning the members for them.
	selfIdx  int
	unlisted map[string]bool
}

// memberInfo is what the view knows of a member key or an election key.
type memberInfo struct {
	createRev int64
	modRev    int64 // in a member's view
	lease     int64
	protocols []int   // the protocols the member speaks (see protocol.go)
	capacity  float64 // the member's capacity (see WithCapacity)
	leaving   bool    // the member is leaving with a warm-up (see warmup.go)
	zone      string  // the member's failure domain (see WithZone)
}

// electInfo is an election key in a view.
type electInfo struct {
	createRev int64
	lease     int64
	value     string // the candidate's member name
}

// onWatch folds a watch batch into the view and applies new maps, in the
// order of the events.
func (r *Rink) onWatch(b watchBatch) {
	st := &r.st
	if b.own {
		r.onOwn(b)
		return
	}
	if b.wide != r.wideView.Load() {
		// A batch of the view this member has left, sent before the
		// watcher saw the switch: the listing of the view it follows now
		// comes next (see syncView), and says all this batch would.
		return
	}
	self := r.opts.member
	selfGone := false
	mapRev := st.curRev            // (a map applied in this batch: every recorded lease is looked at, see noteRecorded)
	var gone map[string]memberInfo // member keys this batch deleted (see ghosts)
	if b.snapshot {
		own, hadOwn := st.members[self]
		st.view.listed = true
		if b.rev < st.rev {
			r.restored(fmt.Sprintf("the rink was listed at revision %d, below revision %d seen before", b.rev, st.rev))
		}
		st.view.wide = b.wide && r.wideView.Load()
		if b.wide {
			gone = st.members // those the listing has again are taken out below
			st.members = make(map[string]memberInfo, len(gone))
		} else {
			// The narrow view: our own key, read with the listing (and
			// followed on its own watch), is all the view keeps of the
			// member keys (see view.go).
			st.members = map[string]memberInfo{}
			clear(st.ghosts)
			st.recorded, st.others = nil, nil // (a member that plans keeps them: see leaseBook)
			// (New maps, not clear: clear keeps the wide view's buckets.)
			st.elect, st.electOf, st.unlisted = map[string]electInfo{}, map[string][]string{}, map[string]bool{}
		}
		clear(st.unlisted) // (mended below: every ranked member's key is missing until put)
		if b.wide {
			for _, name := range st.cur.Members {
				st.unlisted[name] = true
			}
		}
		clear(st.elect)
		clear(st.electOf)
		clear(st.strayKeys)
		st.floor, st.leader = wire.AckFloor{}, ""
		// The map first: what the member keys below trigger (our own join
		// seen, and the gains that come with it) must use this listing's
		// map, not an older one.
		var mapKV, snapKV *mvccpb.KeyValue
		for _, kv := range b.kvs {
			switch key := string(kv.Key); {
			case r.keys.IsMap(key):
				mapKV = kv
			case r.keys.IsSnapshot(key):
				snapKV = kv
			case r.keys.IsFloor(key):
				st.floor = wire.DecodeFloor(kv.Value) // (whether the map costs an acknowledgement: see ackOwed)
				r.unreported()
			}
		}
		if mapKV != nil {
			r.applyMap(mapKV, snapKV)
			if st.view.wide {
				r.listedLeases(mapKV, snapKV)
			}
		} else {
			r.mapGone(b.rev)
			if st.view.wide {
				r.listedLeases(nil, snapKV)
			}
		}
		for _, kv := range b.kvs {
			if key := string(kv.Key); !r.keys.IsMap(key) && !r.keys.IsSnapshot(key) {
				r.putKey(kv)
			}
		}
		if b.rev < st.ownRev {
			// Our own key as the own watch showed it later (see ownRev).
			if hadOwn {
				st.members[self] = own
			} else {
				delete(st.members, self)
			}
		} else {
			st.ownRev = b.rev
		}
		st.dirty = true
		if st.inc != nil && b.rev >= st.inc.CreateRev {
			// (The narrow view's listing reads our own key too: see watch.)
			m, ok := st.members[self]
			selfGone = !ok || m.createRev != st.inc.CreateRev || r.reboundSelf(m.lease, m.modRev)
		}
		for name := range st.members {
			delete(gone, name)
		}
	} else {
		for _, ev := range b.events {
			key := string(ev.Kv.Key)
			if ev.Type == clientv3.EventTypePut {
				if r.keys.IsMap(key) {
					r.applyMap(ev.Kv, nil)
				} else {
					r.putKey(ev.Kv)
				}
				if key == r.keys.Member(self) && st.inc != nil && ev.Kv.CreateRevision == st.inc.CreateRev && r.reboundSelf(ev.Kv.Lease, ev.Kv.ModRevision) {
					selfGone = true
				}
				if !r.keys.IsMember(key) || ev.Kv.Lease != 0 {
					continue
				}
				if _, ok := st.members[r.keys.MemberName(key)]; !ok {
					continue
				}
				// A live member's key put without a lease (by hand): a
				// stray now, and its member is gone as if the key were
				// deleted (putKey logged it and will have it swept).
			} else {
				delete(st.strayKeys, key)
			}
			switch {
			case r.keys.IsMember(key):
				name, ok := r.keys.ValidMember(key)
				if !ok {
					continue // a stray key: it was never in the view
				}
				m, ok := st.members[name]
				if !ok {
					continue // a stray key put without a lease, or a deletion seen twice
				}
				if gone == nil {
					gone = map[string]memberInfo{}
				}
				gone[name] = m
				delete(st.members, name)
				if r.rankedIndex(name) >= 0 {
					st.unlisted[name] = true
				}
				st.touched[name] = true
				st.dirty = true
				if name == self && st.inc != nil && ev.Kv.ModRevision > st.inc.CreateRev {
					selfGone = true
				}
			case r.keys.IsElection(key):
				r.dropElection(key)
				if key == st.leader {
					st.leader = ""
				}
				if l := st.lead; l != nil && key == l.key && ev.Kv.ModRevision > l.rev {
					r.candidacyLost()
				}
			case r.keys.IsFloor(key):
				st.floor = wire.AckFloor{}
			case r.keys.IsMap(key):
				r.log.Warn("the rink's map key was deleted; the leader will start a new lineage")
				r.mapGone(ev.Kv.ModRevision)
			}
		}
	}
	if f := st.floor; f.Lineage == st.lineage && f.Seq == 0 && f.Version > st.cur.Version && st.curRev != 0 {
		// A leader writes a floor only after the map it names, and we see
		// both in that order: a floor ahead of our map means the map's
		// version went back (an older map written by hand).
		st.repeats = max(st.repeats, f.Version)
	}
	if b.snapshot {
		st.rev = b.rev // after a restore, revisions may have gone back
	}
	st.rev = max(st.rev, b.rev)
	r.pruneHistory()
	if l := st.lead; l != nil && b.snapshot && st.view.wide && b.rev > l.rev {
		if _, ok := st.elect[l.key]; !ok {
			r.candidacyLost()
		}
	}
	if st.view.wide {
		r.noteGhosts(gone)
		if b.snapshot {
			r.noteCandidates(maps.Keys(st.electOf), true)
		} else {
			r.noteCandidates(maps.Keys(st.touched), false)
		}
		r.noteRecorded(maps.Keys(st.touched), b.snapshot || st.curRev != mapRev)
	}
	if len(st.touched) > 64 {
		st.touched = map[string]bool{} // (clear keeps a burst's buckets for good)
	} else {
		clear(st.touched)
	}
	if selfGone {
		// Our member key is gone while we still trust the lease (an operator
		// deleted it, or the lease ended before our fence fired). Others may
		// take our slots now: stop holding them at once.
		r.log.Warn("own member key deleted, or bound to another lease: fencing")
		r.fence(st.inc, ErrFenced)
	}
	r.sweepStrays()
}

// reboundSelf reports whether our member key, seen bound to lease at
// modRev, was bound to a lease not ours after our incarnation bound it: by
// hand (etcdctl put --lease). Our writes are guarded by our lease, so we
// could acknowledge nothing more: we fence, and join again once that key
// is gone.
func (r *Rink) reboundSelf(lease, modRev int64) bool {
	inc := r.st.inc
	return inc != nil && lease != int64(inc.Lease) && modRev > inc.BoundRev
}

// dropElection takes an election key out of the view.
func (r *Rink) dropElection(key string) {
	st := &r.st
	e, ok := st.elect[key]
	if !ok {
		return
	}
	delete(st.elect, key)
	if keys := slices.DeleteFunc(st.electOf[e.value], func(k string) bool { return k == key }); len(keys) > 0 {
		st.electOf[e.value] = keys
	} else {
		delete(st.electOf, e.value)
	}
	st.touched[e.value] = true
	if name, ok := st.ghosts[e.lease]; ok && name == e.value {
		// Evidence, not proof: a ghost's election key goes with its lease
		// (a member that fenced and came back revokes its old one), or by
		// an operator's hand. Ask etcd again now rather than at the next
		// poll (see awaitLeaseGone); only its answer ends the ghost.
		r.fx().awaitLeaseGone(name, e.lease)
	}
}

// candidacyLost handles our election key's deletion while we lead (an
// operator's hand): the floor writer, guarded by it, stops writing, and a
// restore could bring the key back to a leader whose floor nobody writes
// (rink-sim -keys seed 772). We stop leading and campaign again, which
// puts the key anew.
func (r *Rink) candidacyLost() {
	st := &r.st
	r.log.Warn("our election key was deleted while we led: campaigning again")
	r.stopLeading()
	if st.inc != nil && st.inc.ctx.Err() == nil {
		r.campaign(st.inc)
	}
}

// putKey records a put of a member or election key in the view. Stray keys
// (see stray.go) are left out of it.
func (r *Rink) putKey(kv *mvccpb.KeyValue) {
	st := &r.st
	key := string(kv.Key)
	switch {
	case r.keys.IsMember(key):
		name, ok := r.keys.ValidMember(key)
		if !ok {
			st.strays.note(r.log, key, "not a member name")
			return
		}
		if kv.Lease == 0 {
			st.strays.note(r.log, key, "bound to no lease")
			if s, ok := st.strayKeys[key]; !ok || s.rev != kv.ModRevision {
				st.strayKeys[key] = strayKey{rev: kv.ModRevision}
			}
			return
		}
		delete(st.strayKeys, key)
		old, existed := st.members[name]
		protocols, capacity := wire.MetaOf(kv.Value)
		leaving := wire.LeavingOf(kv.Value)
		st.members[name] = memberInfo{createRev: kv.CreateRevision, lease: kv.Lease, modRev: kv.ModRevision, protocols: protocols, capacity: capacity, leaving: leaving, zone: wire.ZoneOf(kv.Value)}
		st.touched[name] = true
		if !existed {
			delete(st.unlisted, name)
		}
		if g, ok := st.ghosts[kv.Lease]; ok && g == name {
			// The key is bound to the ghost's lease again (a restore
			// brought it back before its member saw it go): a member in
			// view, whom the barrier waits for as for any.
			delete(st.ghosts, kv.Lease)
		}
		if !existed || old.createRev != kv.CreateRevision || !slices.Equal(old.protocols, protocols) || old.capacity != capacity || old.leaving != leaving {
			st.dirty = true // (a resume rebinds the key to a new lease: no change)
		}
		if name == r.opts.member && st.inc != nil && kv.CreateRevision == st.inc.CreateRev && r.ownKeyEdited(kv.Value) {
			r.writeOwnKeyBack(st.inc, kv.ModRevision)
		}
		if name == r.opts.member && st.inc != nil && !st.selfSeen && kv.CreateRevision == st.inc.CreateRev && kv.ModRevision >= st.inc.BoundRev {
			// The view has reached our own join (or resume): from here on
			// it is at least as new as anything our earlier lives saw.
			st.selfSeen = true
			r.reconcile()
			if r.ackOwed() {
				r.sendAck()
			}
		}
	case r.keys.IsElection(key):
		if !r.keys.IsCandidate(kv) {
			st.strays.note(r.log, key, "not made by a campaign")
			r.dropElection(key) // a candidate's key overwritten without its lease
			if key == st.leader {
				st.leader = ""
			}
			if s, ok := st.strayKeys[key]; !ok || s.rev != kv.ModRevision {
				st.strayKeys[key] = strayKey{rev: kv.ModRevision}
			}
			return
		}
		delete(st.strayKeys, key)
		r.dropElection(key)
		cand := candidateName(kv.Value)
		st.elect[key] = electInfo{createRev: kv.CreateRevision, value: cand, lease: kv.Lease}
		st.electOf[cand] = append(st.electOf[cand], key)
		st.touched[cand] = true
		if l, ok := st.elect[st.leader]; st.leader != "" && ok && kv.CreateRevision < l.createRev {
			st.leader = key
		}
	case r.keys.IsFloor(key):
		st.floor = wire.DecodeFloor(kv.Value)
		r.unreported()
		if r.ackOwed() {
			r.sendAck() // a new leader, or one that lists us as lagging (see ackOwed)
		}
	}
}

// liveByAge lists live members, oldest join first.
func liveByAge(members map[string]memberInfo) []string {
	type aged struct {
		name string
		rev  int64
	}
	all := make([]aged, 0, len(members))
	for name, m := range members {
		all = append(all, aged{name, m.createRev})
	}
	// (Keys and revisions side by side: with a lookup per comparison the
	// sort took 8 % of the process's CPU while a 10,000-member rink was
	// built, by a CPU profile.)
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.rev, b.rev) })
	names := make([]string, len(all))
	for i, a := range all {
		names[i] = a.name
	}
	return names
}

// lowestKey returns the election key of the lowest create revision: the
// leader's.
func lowestKey(elect map[string]electInfo) string {
	var key string
	var lowest int64
	for k, e := range elect {
		if lowest == 0 || e.createRev < lowest {
			key, lowest = k, e.createRev
		}
	}
	return key
}
