package rink

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/rink-go/rink/internal/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ghostState: leases of members whose key went while the applied map still
// ranked them (see noteGhosts): nothing starts until they are gone.
type ghostState struct {
	ghosts map[int64]string
	// ghostMeta keeps, by lease, what the key of a ghost said of its
	// member (its zone and capacity): the leader plans with the ghost
	// ranked, and a ghost of unknown zone counted as a zone of its own
	// made the leader move secondaries onto it (see plannedMembers).
	// Entries whose lease is no ghost's are dropped as the leader plans.
	ghostMeta map[int64]memberInfo
	leaseBook // the leases the maps record, and those etcd said ended (see leases.go)
	// ownLeaseRec is the lease the applied map records for this member
	// (0: none), and leasesOn whether it records leases at all (a map of
	// an earlier leader does not): see leaseGate.
	ownLeaseRec int64
	leasesOn    bool
	// ownLeaseRev is the mod revision of the map from which on the maps
	// applied have recorded ownLeaseRec for this member (0: none): a
	// holding's fencing token is at least it (see acquire), since an
	// earlier incarnation of the name, a process an operator let a
	// replacement in beside, may have held the same slots under the
	// maps before, with tokens from their revisions.
	ownLeaseRev int64
	// curLeased says that the applied map records leases: a whole map
	// that lists them, or a record that says so (see change.Leased). A
	// member that plans from a map that does not writes its next record
	// with every ranked member's lease, and a leader proclaims one at
	// once: an earlier build's record opened every member's gate.
	curLeased bool
	// ending holds, by lease, ghosts etcd said are gone while the map
	// key was older than the view's, with the view's revision then (see
	// endGhost).
	ending map[int64]int64
}

// ghostEnd is etcd's answer that a ghost's lease is gone, with the mod
// revision of the map key read right after it (0: absent) and the
// revision of that read.
type ghostEnd struct{ lease, mapRev, rev int64 }

// endGhost takes etcd's answer that a ghost's lease is gone. An answer is
// proof of the lease's end only in the history the member's view follows:
// after a restore of etcd from a snapshot, a lease granted since the
// snapshot is gone at once, while its member, cut off, still acts until
// its deadline (the simulator found it: seed 2004 with -keys). A map put
// records every lease a ranked member holds slots under, after the lease
// was granted, so the restore brings back a map key older than the view's;
// the driver reads the map key right after the answer, and the ghost ends
// only when that key is at least as new as the applied map. Otherwise the
// member asks again once its view moved on (by then it has noticed the
// restore, or the map key came back: see endReached).
func (r *Rink) endGhost(e ghostEnd) {
	st := &r.st
	if _, ok := st.ghosts[e.lease]; !ok {
		return
	}
	// The applied map was put at or before the read (rev), so the map key
	// then was at least as new, unless etcd went back; or the view has
	// passed the read, and noticed any restore before it.
	if !(st.curRev != 0 && st.curRev <= e.rev && e.mapRev >= st.curRev || st.rev >= e.rev && st.curRev > e.rev) {
		if st.ending == nil {
			st.ending = map[int64]int64{}
		}
		st.ending[e.lease] = st.rev
		return
	}
	delete(st.ending, e.lease)
	delete(st.ghosts, e.lease)
	r.leaseEnded(e.lease)
	st.dirty = true // the leader kept it ranked (see withGhosts): plan without it
}

// endReached asks etcd again about the ghosts whose answer came with a
// map key older than the view's (see endGhost), once the view moved on.
func (r *Rink) endReached() {
	st := &r.st
	for _, lease := range slices.Sorted(maps.Keys(st.ending)) { // (in one order: a history replays)
		if st.ending[lease] < st.rev {
			delete(st.ending, lease)
			if name, ok := st.ghosts[lease]; ok {
				r.fx().awaitLeaseGone(name, lease)
			}
		}
	}
}

// Ghosts. A member key can go while its member still acts: an operator
// deletes it (or revokes nothing and deletes the key) while the member is
// cut off etcd, and the member, which cannot see the deletion, holds its
// roles until it fences, up to 7/8 of a TTL after its last renewal. So a
// key that goes while the applied map still ranks its member (a graceful
// departure removes the member from the map in the same transaction; a
// crash's key goes with its lease) makes the member a ghost: nothing
// starts until its lease is gone, which etcd tells (LeaseTimeToLive). A
// crash's ghost is gone at the first question; an operator's lasts until
// the member's lease runs out.

// noteGhosts makes ghosts of the members whose keys went (gone: the keys a
// watch batch deleted, or that a listing no longer has, as they were) and
// have none now, while the applied map ranks them, or a map the member
// still remembers gave them a slot and none said they departed (an older
// map put back by hand may rank them no more: see forgotten). It costs what the batch
// deleted, not what the view holds: a clone of the view per batch made
// every member's every event O(members), and a join at 1,000 members six
// times slower (issue 25).
func (r *Rink) noteGhosts(gone map[string]memberInfo) {
	st := &r.st
	for _, name := range slices.Sorted(maps.Keys(gone)) { // (in one order: a history replays)
		m := gone[name]
		if _, ok := st.members[name]; ok || name == r.opts.member || m.lease == 0 || r.rankedIndex(name) < 0 && !r.forgotten(name) {
			continue
		}
		r.addGhost(name, m.lease)
		if st.ghostMeta == nil {
			st.ghostMeta = map[int64]memberInfo{}
		}
		st.ghostMeta[m.lease] = m
	}
}

// plannedMembers returns the members the leader plans with: the view's,
// and the ghosts it keeps ranked (see withGhosts), with what their keys
// said of them, so that a ghost keeps its zone and capacity in the plan.
func (r *Rink) plannedMembers() map[string]memberInfo {
	st := &r.st
	for lease := range st.ghostMeta {
		if _, ok := st.ghosts[lease]; !ok {
			delete(st.ghostMeta, lease)
		}
	}
	if len(st.ghostMeta) == 0 {
		return st.members
	}
	out := maps.Clone(st.members)
	for lease, m := range st.ghostMeta {
		if name := st.ghosts[lease]; name != "" {
			if _, ok := out[name]; !ok {
				out[name] = m
			}
		}
	}
	return out
}

// noteCandidates makes ghosts of the leases that campaign for one of
// names (their election keys, bound to the lease of the incarnation that
// campaigns) while the member key of that name is gone or bound to another
// lease, and the applied map ranks the name: an incarnation whose key an
// operator deleted. It finds them from any view, not only from a deletion
// seen (issue 22):
//
//   - a member whose first listing, or a listing after a broken watch,
//     comes after the deletion: the map still ranks the member, whose
//     election key is there while its lease lives;
//   - a member restarted under the same name after an operator deleted
//     the old key to let it in: the map ranks its own name, and the old
//     incarnation's election key names it with the old lease.
//
// A graceful departure takes its member out of the map in the transaction
// that deletes its key, so its election key, gone a moment later with the
// revoked lease, makes no ghost. Only mismatches cost a look at the map.
//
// After a listing (listed), a name that no map ranks counts too, whatever
// the maps the member remembers: an older map put back by hand may have
// dropped a member whose key an operator deleted while it was cut off, and
// a leader elected after that, which never saw the key go nor remembers a
// map that gave it a slot, must still know it may act (seed 80033835). A
// graceful leaver's election key, which outlives its key until its lease
// is revoked a moment later, costs one question to etcd then.
func (r *Rink) noteCandidates(names func(yield func(string) bool), listed bool) {
	st := &r.st
	if r.planted(plantForgetGhosts) {
		return
	}
	var own int64
	if st.inc != nil {
		own = int64(st.inc.Lease)
	}
	for _, name := range slices.Sorted(names) { // (in one order: a history replays)
		for _, key := range st.electOf[name] {
			e, ok := st.elect[key]
			if !ok || e.lease == 0 || e.lease == own {
				continue
			}
			if m, ok := st.members[name]; ok && m.lease == e.lease {
				continue
			}
			if _, ok := st.ghosts[e.lease]; ok || !listed && r.rankedIndex(name) < 0 || r.leaseInView(e.lease) {
				continue
			}
			r.addGhost(name, e.lease)
		}
	}
}

// leaseInView reports whether a member key in view is bound to lease: its
// process is that member, in view, and the barrier waits for it as for
// any. An election key bound to it that names another member was edited
// by hand (its value damaged: the simulator's key-edit fault found it); a
// ghost made of it would last as long as the live member's lease, and
// nothing would start for good. (Only an operator who binds a member key
// to another process's lease, forging evidence rather than damaging it,
// can make this answer wrong.) It costs a pass over the view: it is asked
// only of mismatched candidates.
func (r *Rink) leaseInView(lease int64) bool {
	for _, m := range r.st.members {
		if m.lease == lease {
			return true
		}
	}
	return false
}

// forgotten reports whether a name that the applied map does not rank
// held a slot in a map the member still remembers, and no map said it
// departed gracefully since (see noteGone): a leaver holds nothing, and
// its election key, which outlives its key until its lease is revoked,
// is no ghost. It costs a pass over the slot changes the history keeps
// (at most maxHistChanges): it is asked only of names that went.
func (r *Rink) forgotten(name string) bool {
	if _, ok := r.st.view.goneAt[name]; ok {
		return false
	}
	return r.st.hist.Gave(name)
}

// addGhost makes a ghost of a member's lease: nothing starts until etcd
// says it is gone.
func (r *Rink) addGhost(name string, lease int64) {
	st := &r.st
	if st.ghosts == nil {
		st.ghosts = map[int64]string{}
	}
	if _, ok := st.ghosts[lease]; ok || slices.Contains(st.past, lease) {
		return // (an ended incarnation of this process acts on nothing: see lifecycle.past)
	}
	if r.planted(plantGoneOnDeletion) {
		r.leaseEnded(lease)
		return
	}
	st.ghosts[lease] = name
	r.fx().awaitLeaseGone(name, lease)
}

// awaitLeaseGone asks etcd until lease is gone, then (when tell) tells the
// run goroutine, with the map key read right after the answer (see
// endGhost): it carries out what a core.GhostAsk decides. checkOwnName
// waits on it without telling.
func (r *Rink) awaitLeaseGone(name string, lease int64, tell bool) {
	b := newBackoff()
	g, step := core.NewGhostAsk(name, lease, tell, r.opts.ttl, r.now(), b.Next, r.log)
	for !step.Done {
		if step.After > 0 {
			t := time.NewTimer(step.After)
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				return
			}
		}
		if r.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.opts.ttl)
		if step.AskTTL {
			resp, err := r.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
			ttl := int64(0)
			if err == nil {
				ttl = resp.TTL
			}
			step = g.TTL(ttl, err, r.now())
		} else {
			resp, err := r.cli.Get(ctx, r.keys.Map())
			rev, mapRev := int64(0), int64(0)
			if err == nil {
				rev = resp.Header.Revision
				if len(resp.Kvs) > 0 {
					mapRev = resp.Kvs[0].ModRevision
				}
			}
			step = g.MapRead(rev, mapRev, err)
		}
		cancel()
	}
	if tell {
		e := ghostEnd{lease: lease, rev: step.Rev, mapRev: step.MapRev}
		r.inbox.send(func(m *mail) { m.ghosts = append(m.ghosts, e) })
	}
}
