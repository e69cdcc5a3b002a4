package rink

// Planted bugs. The simulator must be able to fail: it plants one of these
// in a member's core (simhook.Config.Plant; nothing else can set it) and
// must find the violation it causes. Each names the defence it undoes.
const (
	plantSkipBarrier  = "skip-barrier"  // start owned slots without waiting for the barrier
	plantEarlyAck     = "early-ack"     // acknowledge a map before releasing the slots it takes
	plantIgnoreFence  = "ignore-fence"  // act on after the lease's deadline has passed
	plantForgetGhosts = "forget-ghosts" // find no ghosts from election keys (see noteCandidates), nor from the leases maps record (see noteRecorded)
	// plantSkipReplicaBarrier starts memberships of replica sets without
	// the barrier that keeps at most k members holding a slot (see
	// secondary.go); the primary's own barrier stays. It can fail only in
	// a rink of more than one replica per slot.
	plantSkipReplicaBarrier = "skip-replica-barrier"
	// plantForgetRecorded finds no ghosts from the leases the maps record
	// (see noteRecorded); plantGoneOnDeletion takes a member whose keys
	// went as gone at once, without asking etcd about its lease (see
	// addGhost): a slot freed on a key deletion alone (issue 42).
	plantForgetRecorded = "forget-recorded"
	plantGoneOnDeletion = "gone-on-deletion"
	// plantSkipDrain drains nothing (see startDrain): a slot given away,
	// by a new map or on Shutdown, goes to its heir while functions still
	// run on it. It can fail only with a drain timeout.
	plantSkipDrain = "skip-drain"
	// plantSkipFenceDrain revokes a fenced lease while functions still run
	// on the holdings the fence ended, before its deadline (see
	// revokeFenced): another process of the member's name, which waits
	// for that lease to be gone, starts them beside those functions. It
	// can fail only with a drain timeout.
	plantSkipFenceDrain = "skip-fence-drain"
)

// plants lists the bugs a simulator may plant.
var plants = []string{plantSkipBarrier, plantEarlyAck, plantIgnoreFence, plantForgetGhosts, plantSkipReplicaBarrier,
	plantForgetRecorded, plantGoneOnDeletion, plantSkipDrain, plantSkipFenceDrain}

// planted reports whether bug p is planted in this member (never outside
// the simulator).
func (r *Rink) planted(p string) bool { return r.plant == p }

// releaseLate releases the slots an early acknowledgement left held (see
// plantEarlyAck).
func (r *Rink) releaseLate() {
	st := &r.st
	late := st.late
	st.late = nil
	idx := r.rankedIndex(r.opts.member)
	for _, s := range late {
		if idx >= 0 && len(st.cur.Table) > s && int(st.cur.Table[s]) == idx {
			continue // ours again
		}
		if st.mine.isHeld(s) {
			r.release(s, ErrRoleMoved)
		}
		st.mine.disown(s)
	}
}
