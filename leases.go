package rink

import (
	"maps"
	"slices"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// Gone means its lease is gone (issue 42). A member's slots are free for
// others only when its acknowledgement says it released them, or when the
// lease it held them under has ended, as etcd says (LeaseTimeToLive
// answers -1). Keys are evidence of a lease, never proof of its end: an
// operator may delete a member's key, its election key, its ack and load
// keys, all of them, while the member, cut off etcd, still acts until it
// fences. A planner that never saw those keys (a leader elected after
// they went, with no history of the member) could not even name the lease
// to ask about. So every whole map records, beside each ranked member, the
// lease it holds its slots under (rankMap.Leases), and each change record
// the leases it changes (change.Leases); a member that plans (it follows
// the wide view) keeps them by name (leaseBook), and makes a ghost of
// every recorded lease that no member key of that name is bound to (see
// noteRecorded): the leader then keeps the name ranked, with its slots,
// until etcd says the lease is gone (withGhosts), and names it gone in no
// transition before (goneFrom).
//
// A leader records for a name the lease of its member key, except while
// a ghost of that name lives: then the ghost's lease, so that the record
// changes from one lease to another only once etcd said the first one is
// gone. A member that resumes after a fence rebinds its key to a new
// lease, and revokes the old one as it comes back (see resumed): its
// ghost ends at the first question.

// leaseBook is, for a member that plans, the leases the maps it applied
// record, by name, and every other lease a map it read recorded for a
// name: an older map put back by hand records older leases, and a leader
// elected after it, with no history, would otherwise know only those
// (rink-sim -keys seed 7426). Invariants: recorded and others are nil
// while the member follows the narrow view (it plans nothing, and keeps
// no entry per member); recorded holds, for every name the current map
// records a lease for, that lease; a lease leaves the book (others, or an
// entry of a name no map ranks any more) only once etcd said it ended, a
// key of its name is bound to it, or its name's departure was seen (see
// noteRecorded). ended holds leases etcd said are gone, until a restore
// (which can bring a lease back).
type leaseBook struct {
	recorded map[string]int64
	others   map[int64]string
	ended    map[int64]bool
}

// maxEnded bounds the leases kept as ended: past it the set starts again
// (a lease forgotten costs one more question to etcd). maxOthers bounds
// the other leases kept: past it, more are not kept (logged).
const (
	maxEnded  = 4096
	maxOthers = 4096
)

// keepLeases updates the lease book with the map m just applied (rec: its
// change record, nil for a whole map). A member in the narrow view keeps
// none. A whole map that records leases replaces the book; one that does
// not (a map of an earlier leader, or written by hand) says nothing of
// leases, and the book keeps what it knew; a record sets what it changed.
// What a map replaces stays in the book as evidence (others).
func (r *Rink) keepLeases(m *wire.Map, rec *wire.Record) {
	st := &r.st
	if !st.view.wide && st.lead == nil {
		st.recorded, st.others = nil, nil
		return
	}
	switch {
	case len(m.Leases) == len(m.Members) && len(m.Members) > 0:
		r.replaceBook(wire.ByName(m.Members, m.Leases))
	case rec != nil && st.recorded != nil:
		for name, l := range rec.Leases {
			if old := st.recorded[name]; old != 0 && old != l {
				r.keepOther(old, name)
			}
			if l == 0 {
				delete(st.recorded, name)
			} else {
				st.recorded[name] = l
			}
		}
	case st.recorded == nil:
		st.recorded = map[string]int64{}
	}
}

// replaceBook makes next the leases recorded, keeping those it replaces
// as evidence.
func (r *Rink) replaceBook(next map[string]int64) {
	st := &r.st
	for name, l := range st.recorded {
		if next[name] != l {
			r.keepOther(l, name)
		}
	}
	st.recorded = next
}

// keepOther keeps lease, recorded for name by some map, as evidence.
func (r *Rink) keepOther(lease int64, name string) {
	st := &r.st
	if lease == 0 || st.ended[lease] {
		return
	}
	if st.others == nil {
		st.others = map[int64]string{}
	}
	if _, ok := st.others[lease]; !ok && len(st.others) >= maxOthers {
		r.log.Warn("too many leases recorded by maps to keep: forgetting one", zap.String("member", name), zap.Int64("lease", lease))
		return
	}
	st.others[lease] = name
}

// listedLeases fills the lease book from a listing of the wide view (the
// map key and the whole map beside it), which applyMap may have skipped
// as already applied: a member that turns to the wide view (it was
// elected) knew no leases. The whole map of the map key's put is what the
// map records; a whole map of another put (the map key holds an older map
// put back by hand, and .map the newest a leader wrote) is evidence too.
func (r *Rink) listedLeases(mapKV, snapKV *mvccpb.KeyValue) {
	st := &r.st
	if st.recorded == nil && len(st.cur.Leases) == len(st.cur.Members) {
		// What the last whole map this member applied records (the
		// map key may be gone: a lineage that a restore brought back is
		// dropped, and so would be the evidence of a member, cut off,
		// whose keys an operator deleted: rink-sim -keys seed 14870).
		st.recorded = map[string]int64{}
		for i, name := range st.cur.Members {
			r.keepOther(st.cur.Leases[i], name)
		}
	}
	if mapKV == nil {
		// The map key is gone; the whole map beside it may still say
		// what the last lineage recorded (rink-sim -keys seed 53692: a
		// lineage a restore brought back was dropped, and the member
		// elected next had applied no whole map of it).
		if snapKV != nil {
			if other, ok := wire.LeasesIn(snapKV.Value); ok {
				for name, l := range other {
					r.keepOther(l, name)
				}
			}
		}
		return
	}
	if st.curRev != mapKV.ModRevision {
		return
	}
	cur, ok := wire.WholeLeases(mapKV, snapKV)
	if ok {
		r.replaceBook(cur)
	} else if st.recorded == nil {
		st.recorded = map[string]int64{}
	}
	if snapKV != nil && snapKV.ModRevision != mapKV.ModRevision {
		if other, ok := wire.LeasesIn(snapKV.Value); ok {
			for name, l := range other {
				if cur[name] != l {
					r.keepOther(l, name)
				}
			}
		}
	}
}

// noteRecorded makes a ghost of each recorded lease (see leaseBook) that
// no member key of its name is bound to, unless etcd said it ended: the
// key is gone or bound to another lease, and the member may still act
// under the recorded one. names are the names to look at; all of them
// when all is set (after a listing, or a map applied). Names that no map
// ranks any more count only while a map this member remembers gave them a
// slot and none said they departed (see forgotten); the others' entries
// go.
func (r *Rink) noteRecorded(names func(yield func(string) bool), all bool) {
	st := &r.st
	if st.recorded == nil || r.planted(plantForgetRecorded) || r.planted(plantForgetGhosts) {
		return
	}
	if all {
		names = maps.Keys(st.recorded)
	}
	var want []string // (made ghosts in one order, below: a history replays; a pass costs no sort)
	for name := range names {
		l, ok := st.recorded[name]
		if !ok || l == r.ownLease() {
			continue // (our own incarnations: see addGhost)
		}
		if m, ok := st.members[name]; ok && m.lease == l {
			// A key bound to it: the lease lives (after a restore, etcd
			// may hand out an ended lease's ID again).
			delete(st.ended, l)
			continue
		}
		if st.ended[l] || r.rankedIndex(name) < 0 && !r.forgotten(name) {
			if all {
				delete(st.recorded, name)
			}
			continue
		}
		if _, ok := st.ghosts[l]; ok {
			continue
		}
		want = append(want, name)
	}
	slices.Sort(want)
	for _, name := range want {
		r.addGhost(name, st.recorded[name])
	}
	for _, l := range slices.Sorted(maps.Keys(st.others)) {
		name := st.others[l]
		if m, ok := st.members[name]; ok && m.lease == l || st.ended[l] || l == r.ownLease() || r.rankedIndex(name) < 0 && !r.forgotten(name) {
			delete(st.others, l)
			continue
		}
		if _, ok := st.ghosts[l]; !ok {
			r.addGhost(name, l)
		}
	}
}

// keepOwnLease notes what the map m just applied (rec: its change
// record, nil for a whole map) records of this member's lease (see
// leaseGate). Every member keeps it, at the cost of a lookup per map.
func (r *Rink) keepOwnLease(m *wire.Map, rec *wire.Record) {
	st := &r.st
	before := st.ownLeaseRec
	defer func() {
		if st.ownLeaseRec != before || st.ownLeaseRev == 0 {
			st.ownLeaseRev = st.curRev
		}
	}()
	st.curLeased = wire.MapLeased(m, rec)
	switch {
	case len(m.Leases) == len(m.Members) && len(m.Members) > 0:
		st.leasesOn, st.ownLeaseRec = true, 0
		if st.selfIdx >= 0 && st.selfIdx < len(m.Leases) {
			st.ownLeaseRec = m.Leases[st.selfIdx]
		}
	case rec != nil && !rec.Leased:
		st.leasesOn, st.ownLeaseRec = false, 0 // (a record of a leader that records no leases: an earlier build's)
	case rec != nil:
		if l, ok := rec.Leases[r.opts.member]; ok {
			st.leasesOn, st.ownLeaseRec = true, l // (on again after an earlier build's records)
		}
	default:
		st.leasesOn, st.ownLeaseRec = false, 0 // (a whole map that records no leases: an earlier leader's, or one written by hand)
	}
}

// leaseGate reports whether this member may start slots under its
// current lease: the applied map records that lease for it, or records
// no leases at all (a map of a leader before issue 42). A member that
// came back under a new lease after a fence holds its slots under a lease
// that no map names until the leader records it, which it does once etcd
// said the old one ended (see leasesFor); until then a planner that knew
// only the map would take the member as gone once the old lease ended,
// and start its slots while the member, cut off with its keys deleted,
// starts them too (rink-sim -keys seed 55019). So it starts nothing.
func (r *Rink) leaseGate() bool {
	st := &r.st
	return !st.leasesOn || st.inc != nil && st.ownLeaseRec == int64(st.inc.Lease)
}

// leaseEnded records that etcd said lease is gone.
func (r *Rink) leaseEnded(lease int64) {
	st := &r.st
	if st.ended == nil || len(st.ended) >= maxEnded {
		st.ended = map[int64]bool{}
	}
	st.ended[lease] = true
}

// leasesFor returns the leases a map that ranks names records, index by
// index: for a name with a ghost, the ghost's lease (the one recorded, if
// it is a ghost's); else the one recorded, unless etcd said it ended (a
// record changes from one lease to another only then); else the lease of
// its member key. ghosts are the ghosts to keep, by lease; members the
// member keys. The planner's own name (self) records its own lease (own,
// when not 0): it knows its earlier incarnations act on nothing, and a
// lease an older map put back by hand recorded for it would otherwise
// stay, never asked about (rink-sim -keys seed 7426).
func leasesFor(names []string, recorded map[string]int64, ended map[int64]bool, members map[string]memberInfo, ghosts map[int64]string, self string, own int64) []int64 {
	var ghostOf map[string][]int64
	for l, name := range ghosts {
		if l <= 0 {
			continue // (a departure's stand-in for a name without a key: see handOver.listed)
		}
		if ghostOf == nil {
			ghostOf = map[string][]int64{}
		}
		ghostOf[name] = append(ghostOf[name], l)
	}
	out := make([]int64, len(names))
	for i, name := range names {
		rec := recorded[name]
		if name == self && own != 0 {
			out[i] = own
			continue
		}
		if gl := ghostOf[name]; len(gl) > 0 {
			if rec != 0 && slices.Contains(gl, rec) {
				out[i] = rec
			} else {
				out[i] = slices.Min(gl)
			}
			continue
		}
		if m, ok := members[name]; ok && m.lease != 0 && (rec == 0 || ended[rec]) {
			out[i] = m.lease
			continue
		}
		out[i] = rec
	}
	return out
}
