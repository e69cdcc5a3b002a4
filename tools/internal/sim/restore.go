package sim

import (
	"maps"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The model's snapshots and restores, as an operator takes them with
// `etcdctl snapshot save` and brings one back with `etcdutl snapshot
// restore --bump-revision N --mark-compacted` (as rink-chaos does): the
// keys and leases of the snapshot come back, the revision is the
// snapshot's plus the bump, and the history before it is compacted, so
// that every watch is cancelled and lists again. The restored cluster's
// new leader renews every lease (see ExtendLeases); leases granted after
// the snapshot are gone, and with them their keep-alives.

// Snapshot is the model's state at one revision.
type Snapshot struct {
	rev       int64
	kvs       map[string]*mvccpb.KeyValue
	leases    map[int64]int64 // TTL by lease ID
	nextLease int64
}

// Rev is the revision the snapshot was taken at.
func (s *Snapshot) Rev() int64 { return s.rev }

// Snapshot takes the model's keys and leases as they are now.
func (e *Etcd) Snapshot() *Snapshot {
	s := &Snapshot{rev: e.rev, kvs: make(map[string]*mvccpb.KeyValue, len(e.kvs)), leases: map[int64]int64{}, nextLease: e.nextLease}
	for k, kv := range e.kvs {
		s.kvs[k] = clone(kv)
	}
	for id, l := range e.leases {
		s.leases[id] = l.ttl
	}
	return s
}

// Restore replaces the model's keys and leases with the snapshot's, at
// its revision plus bump, compacted there: every watch owes revisions the
// store no longer has, and is cancelled at its next delivery.
func (e *Etcd) Restore(s *Snapshot, bump int64) {
	prev := e.rev
	// Never back: the bump must exceed the revisions written since the
	// snapshot, and an operator restoring an older snapshot after an
	// earlier restore (two restores of one history: restore-unseen's and
	// restore's snapshots) bumps past the revision etcd is at. A revision
	// that only went one past it would leave a watch that owes nothing
	// uncancelled, and the restore unseen by a watcher of any key.
	e.rev = s.rev + bump
	if e.rev <= prev {
		e.rev = prev + bump
	}
	e.compacted = e.rev
	e.log = nil
	e.kvs = make(map[string]*mvccpb.KeyValue, len(s.kvs))
	for k, kv := range s.kvs {
		e.kvs[k] = clone(kv)
	}
	e.order = slices.Sorted(maps.Keys(e.kvs))
	e.leases = map[int64]*lease{}
	for _, id := range slices.Sorted(maps.Keys(s.leases)) {
		e.leases[id] = &lease{id: id, ttl: s.leases[id], keys: map[string]bool{}}
	}
	for _, k := range e.order {
		if id := e.kvs[k].Lease; id != 0 {
			e.attach(id, k)
		}
	}
	e.nextLease = max(e.nextLease, s.nextLease)
	e.ExtendLeases()
}
