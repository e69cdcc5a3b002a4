package rink

import (
	"context"
	"maps"
	"time"

	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// depart is a ranked member's last act when it shuts down: one
// transaction proclaims a map without this member (promoting the
// longest-waiting member into its index, or moving the highest index into
// it) and deletes this member's key, so that the members taking over its
// slots see both in one watch event and start at once. Any member may do
// it, leader or not: the transaction is guarded by the map's mod revision
// (a leader's concurrent proclamation fails, or makes this one fail), and
// by a comparison over the member keys' create revisions, so that a member
// that joined after this member's view (a newcomer whose New returned the
// moment before this Shutdown) is never passed over. When a guard fails it
// plans again from the listing the failed transaction returns. It reports
// whether the map was written; if not, the caller's lease revocation
// deletes the key, and the leader proclaims the map.
//
// release ends this member's holdings; depart calls it right before its
// first transaction, once the map is planned and encoded, so that
// planning is not on the handover's path (the caller calls it anyway).
// The decisions are handOver's; depart carries out its requests.
//
// keep reports that the caller must leave the member key to expire with
// its lease, not revoke it (see handOver.keep).
func (r *Rink) depart(ctx context.Context, release func()) (handed, keep bool) {
	d, ok := r.newHandOver()
	if !ok {
		return false, false
	}
	if d.narrow {
		resp, err := execTxn(ctx, r.cli, d.listTxn())
		if err != nil {
			r.log.Warn("listing the rink to hand over failed", zap.Error(err))
			return false, false
		}
		if !d.listed(resp) {
			return false, d.keep
		}
	}
	for ctx.Err() == nil {
		txn, ok := d.next()
		if !ok {
			return false, d.keep
		}
		release()
		r.awaitDrains(r.stopCtx)
		resp, err := execTxn(ctx, r.cli, txn)
		if err != nil {
			r.log.Warn("hand-over failed; successors wait for the lease to be revoked", zap.Error(err))
			return false, false
		}
		if d.answered(resp) {
			return true, d.keep
		}
	}
	return false, d.keep
}

// handOver plans a departure (see depart) from the run goroutine's state
// as it was when the member began to leave, and from the listings that
// failed transactions return. It does no I/O: depart, or the simulator,
// sends its requests and hands it the answers.
//
// Invariants: cur is the map of lineage at curRev (seq curSeq), as the
// view of members at viewRev saw it; attempts counts the transactions
// asked for (at most maxDepartures); done is set once the departure
// succeeded or cannot go on.
type handOver struct {
	r                  *Rink
	members            map[string]memberInfo
	cur                wire.Map
	curRev, curSeq     int64
	viewRev, version   int64
	ghosts             map[int64]string
	leases             map[string]int64 // the leases cur records, by name (see leaseBook)
	leased             bool             // cur records leases (see mapLeased)
	narrow             bool             // the member follows the narrow view: list the member keys first
	attempts           int
	done, ok           bool
	lineage, createRev int64
	lease              clientv3.LeaseID
	inc                *incarnation
	// keep: the caller must leave the member key to expire with its lease
	// rather than revoke it. A listing showed the map key older than the
	// map applied (etcd was restored from a snapshot), or the incarnation
	// ended (fenced, or past its deadline) before a transaction was sent:
	// after a restore, the member key, restored with its lease, is what
	// keeps the slots the restored map gives this member from others, some
	// of whom may still act on them unseen (see hush), and a fenced
	// incarnation hands nothing over (its slots may be others' now, and a
	// restore may have brought its key back).
	keep bool
}

// maxDepartures bounds the departure's transactions.
const maxDepartures = 3

// newHandOver begins a departure, if this member is ranked in a usable
// map that holds its name's slots for its lease: else there is nothing
// to hand over. A map that records another lease for the name (see
// leaseGate) holds its slots for that lease's process: an earlier
// incarnation of the name, perhaps cut off and still acting, that an
// operator let this process in beside (rink-sim -keys seed 4650). This
// process started none of them under its own lease (the gate keeps it
// from starting any: a holding from before the gate closed is released
// without a hand-over), and the leader moves them once that lease is gone.
func (r *Rink) newHandOver() (*handOver, bool) {
	st := &r.st
	if st.inc == nil || st.incompatible != nil || st.curRev == 0 || st.cur.Index(r.opts.member) < 0 || st.taint != 0 && st.taint == st.lineage ||
		!r.leaseGate() || r.ownNameHaunted() {
		return nil, false
	}
	return &handOver{r: r, members: st.members, cur: st.cur, curRev: st.curRev, curSeq: st.curSeq, viewRev: st.rev,
		version: r.nextVersion(), ghosts: st.ghosts, leases: st.recorded, leased: st.curLeased, narrow: !st.view.wide,
		lineage: st.lineage, createRev: st.inc.CreateRev, lease: clientv3.LeaseID(st.inc.Lease), inc: st.inc}, true
}

// ownNameHaunted reports whether an earlier incarnation of this member's
// name may still act: this process is still checking for one (see
// checkOwnName), or knows its lease as a ghost (a process makes none of
// its own incarnations: see lifecycle.past). The slots the map gives the
// name are that incarnation's, which this process started none of, and a
// hand-over of them would let heirs start them at once. It is what
// leaseGate tells from a map that records the earlier lease; a map that
// records none (written back by hand without its leases) does not (rink-sim
// -keys -kinds map-unleased,pause,partition,crash,leave,member-keys-delete,duplicate
// seed 212: a duplicate that left handed over slot 8, which the first
// process, cut off, still held).
func (r *Rink) ownNameHaunted() bool {
	st := &r.st
	if st.view.selfCheck == 1 {
		return true
	}
	for _, name := range st.ghosts {
		if name == r.opts.member {
			return true
		}
	}
	return false
}

// listTxn lists the member keys, the map key and the whole map, for a
// member that follows the narrow view (see view.go), which has no member
// keys.
func (d *handOver) listTxn() *etcdserverpb.TxnRequest {
	k := d.r.keys
	return &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{
		wire.Range(k.Members(), clientv3.GetPrefixRangeEnd(k.Members())), wire.Get(k.Map()), wire.Get(k.Snapshot()),
	}}
}

// listed plans from the narrow view's listing: ranked members without a
// key stay ranked in the plan (this member cannot tell a crash from a
// ghost, and the leader moves them as it finds out). It reports whether
// the departure can go on.
func (d *handOver) listed(resp *etcdserverpb.TxnResponse) bool {
	if !d.relisted(resp) {
		d.done = true
		return false
	}
	d.ghosts = nil // (next keeps every ranked member without a key ranked)
	return true
}

// next returns the next transaction to send, or false when the departure
// is over (it succeeded, failed, or the map it would write is one that
// members would refuse).
func (d *handOver) next() (*etcdserverpb.TxnRequest, bool) {
	r := d.r
	if d.done || d.attempts == maxDepartures {
		return nil, false
	}
	if d.inc != nil && (d.inc.fenced.Load() || d.inc.expired()) {
		// Fenced (a process stopped past its deadline and resumed to
		// leave): hand nothing over. (Not merely cancelled: a Shutdown
		// whose context ended cancels the incarnation's roles, and still
		// hands over.)
		d.done, d.keep = true, true
		return nil, false
	}
	d.attempts++
	self := r.opts.member
	key := r.keys.Member(self)
	cur := d.cur
	cur.Leases = wire.BaseLeases(cur.Members, d.leases, d.leased) // (what the record changes: see leaseChanges)
	// Every ranked member without a key stays ranked, with its slots:
	// this member cannot tell a crash from a ghost (keys are evidence,
	// leases are proof: see leases.go), and the leader moves them as it
	// finds out.
	ghosts := maps.Clone(d.ghosts)
	for i, name := range cur.Members {
		if _, ok := d.members[name]; !ok {
			if ghosts == nil {
				ghosts = map[int64]string{}
			}
			ghosts[-int64(i)-1] = name
		}
	}
	live := deleteName(withGhosts(ghosts, speakers(liveByAge(d.members), d.members, cur.Schema), d.members, cur), self)
	leavers := []string{self}
	for _, name := range live {
		if d.members[name].leaving {
			live = deleteName(live, name) // it is on its way out: no heir
			leavers = append(leavers, name)
		}
	}
	next := plan.PlanMap(cur, plan.Input{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}, Capacity: capacities(d.members), ByLoad: cur.ByLoad,
		Replicas: cur.ReplicaCount(), Zones: zones(d.members), Handed: handed(leavers)})
	next.Version, next.Leader = d.version, cur.Leader
	next.Schema = cur.Schema // a departure changes no protocol
	next.Leases = leasesFor(next.Members, d.leases, nil, d.members, ghosts, self, int64(d.lease))
	if r.st.lead != nil {
		next.Leader = self
	}
	if err := r.usable(next); err != nil {
		r.log.Error("hand-over: refusing to proclaim a map that members would refuse", zap.Error(err))
		d.done = true
		return nil, false
	}
	fkey, fend := r.keys.Followed()
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			wire.ModRevisionEq(r.keys.Map(), d.curRev),
			wire.CreatedBelow(r.keys.Members(), d.viewRev+1),
			wire.CreateRevisionEq(key, d.createRev),
			wire.LeaseEq(key, int64(d.lease)),
		},
		Success: append(r.mapOps(&cur, &next, d.curRev, wire.Transition{View: d.viewRev, Gone: []string{self}}), wire.Delete(key)),
		Failure: []*etcdserverpb.RequestOp{wire.Range(fkey, fend), wire.Get(r.keys.Snapshot())},
	}, true
}

// answered takes a transaction's answer: it reports whether the departure
// succeeded; if not, it plans again from the listing the failure returned,
// or ends (see next).
func (d *handOver) answered(resp *etcdserverpb.TxnResponse) bool {
	if resp.Succeeded {
		d.r.log.Info("handed over", zap.Int64("version", d.version), zap.Int("attempt", d.attempts-1))
		d.done, d.ok = true, true
		return true
	}
	if !d.relisted(resp) {
		d.done = true
	}
	return false
}

// relisted plans again from the rink as a listing (resp) saw it: its
// last response the whole map, the others the member keys and the map
// key among others. It reports whether the departure can go on.
func (d *handOver) relisted(resp *etcdserverpb.TxnResponse) bool {
	r := d.r
	key := r.keys.Member(r.opts.member)
	d.members, d.viewRev = map[string]memberInfo{}, resp.Header.Revision
	ours := false
	var snap *mvccpb.KeyValue
	last := len(resp.Responses) - 1
	if last < 0 {
		return false
	}
	if kvs := resp.Responses[last].GetResponseRange().Kvs; len(kvs) > 0 {
		snap = kvs[0]
	}
	prevRev := d.curRev
	d.curRev = 0
	var kvs []*mvccpb.KeyValue
	for _, rr := range resp.Responses[:last] {
		kvs = append(kvs, rr.GetResponseRange().Kvs...)
	}
	for _, kv := range kvs {
		k := string(kv.Key)
		switch {
		case r.keys.IsMember(k):
			if name, ok := r.keys.LiveMember(kv); ok {
				protocols, capacity := wire.MetaOf(kv.Value)
				d.members[name] = memberInfo{createRev: kv.CreateRevision, lease: kv.Lease, protocols: protocols, capacity: capacity, leaving: wire.LeavingOf(kv.Value), zone: wire.ZoneOf(kv.Value)}
			}
			ours = ours || k == key && kv.CreateRevision == d.createRev && clientv3.LeaseID(kv.Lease) == d.lease
		case r.keys.IsMap(k):
			m, err := wire.ReadMap(kv, snap, &d.cur, prevRev != 0, d.curSeq, d.lineage, r.geometry())
			if kv.ModRevision == prevRev {
				m, err = d.cur, nil // (the guard failed on the member keys)
			}
			if prevRev != 0 && kv.ModRevision < prevRev || kv.CreateRevision == d.lineage && kv.Version < d.curSeq {
				d.keep = true
			}
			if err != nil || kv.CreateRevision != d.lineage || kv.Version < d.curSeq {
				return false // unusable, another lineage, or etcd went back: leave it to the leader
			}
			d.cur, d.curRev, d.curSeq = m, kv.ModRevision, kv.Version
			if kv.ModRevision != prevRev {
				var rec *wire.Record
				if c, ok := wire.DecodeRecord(kv.Value); ok {
					rec = &c
				}
				d.leased = wire.MapLeased(&m, rec)
			}
			if l, ok := wire.WholeLeases(kv, snap); ok {
				d.leases = l
			}
			d.version = max(d.version, m.Version+1)
		}
	}
	return d.curRev != 0 && d.cur.Index(r.opts.member) >= 0 && ours // (our key is not ours any more: leave it to the leader)
}
