package rink

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// mapOps returns the puts that write next as the rink's map over base, the
// map the map key holds at mapRev (0: the key is absent). In protocol 2
// the map key holds the whole map. From protocol 3 it holds a change
// record from base, and the snapshot key holds the whole map, written in
// the same transaction: members apply the record, and read the whole map
// only when they cannot (see readMap). The whole map goes into the map
// key alone when the key is absent (a lineage starts whole) and when the
// record would be no smaller.
func (r *Rink) mapOps(base, next *rankMap, mapRev int64, t transition) []*etcdserverpb.RequestOp {
	wholeJSON := next.encode()
	whole := string(wholeJSON)
	if next.Schema < 3 {
		return []*etcdserverpb.RequestOp{putOp(r.keys.rankMap(), whole, 0)}
	}
	if mapRev == 0 || base.Version == 0 {
		return []*etcdserverpb.RequestOp{putOp(r.keys.rankMap(), whole, 0)}
	}
	c := diff(base, next)
	t.From = base.Version
	c.transition = t
	rec := c.encode()
	if alone := withTransition(wholeJSON, c.transition); len(rec) >= len(alone) {
		// A change as large as the map (a hole closed in a small rink
		// renumbers half the slots): the whole map alone, which members
		// read as one. The whole map beside the key would double what
		// the transaction writes, on the path of a handover.
		return []*etcdserverpb.RequestOp{putOp(r.keys.rankMap(), string(alone), 0)}
	}
	return []*etcdserverpb.RequestOp{putOp(r.keys.rankMap(), string(rec), 0), putOp(r.keys.snapshot(), whole, 0)}
}

// proclaimTxn is the transaction that writes m as the rink's map over
// base, provided we still lead (l) and the map key is still at mapRev.
func (r *Rink) proclaimTxn(l *leadership, base, m *rankMap, mapRev int64, t transition) *etcdserverpb.TxnRequest {
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			cmpOf(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)),
			cmpOf(clientv3.Compare(clientv3.ModRevision(r.keys.rankMap()), "=", mapRev)),
		},
		Success: r.mapOps(base, m, mapRev, t),
		Failure: []*etcdserverpb.RequestOp{getOp(l.key), getOp(r.keys.rankMap())},
	}
}

// proclaim writes m as the rink's map (see proclaimTxn).
func (r *Rink) proclaim(ctx context.Context, l *leadership, base, m rankMap, mapRev int64, t transition) proclaimResult {
	resp, err := execTxn(ctx, r.cli, r.proclaimTxn(l, &base, &m, mapRev, t))
	return proclaimedBy(l, m.Version, mapRev, resp, err)
}

// proclaimedBy reads the answer to a proclamation of map version version
// over the map key at mapRev.
func proclaimedBy(l *leadership, version, mapRev int64, resp *etcdserverpb.TxnResponse, err error) proclaimResult {
	res := proclaimResult{lead: l, version: version, based: mapRev}
	if err != nil {
		res.err = err
		return res
	}
	res.rev, res.ok = resp.Header.Revision, resp.Succeeded
	if !resp.Succeeded {
		// Wait for the map write that beat us, not for the header revision:
		// in an etcd shared with others that may be a write our watch of
		// the rink's keys never sees.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		res.lost = len(kvs) == 0 || kvs[0].CreateRevision != l.rev
		res.rev = 0
		if m := resp.Responses[1].GetResponseRange().Kvs; len(m) > 0 {
			res.rev = m[0].ModRevision
		}
	}
	return res
}

func (r *Rink) onProclaimed(res proclaimResult) {
	st := &r.st
	l := st.lead
	if l == nil || res.lead != l {
		return
	}
	l.busy = false
	st.dirty = true
	switch {
	case res.err != nil:
		wait := l.retry.next()
		r.log.Warn("proclaiming the map failed, retrying", zap.Error(res.err), zap.Int64("version", res.version), zap.Duration("backoff", wait))
		st.setTimer(timerPlan, r.now().Add(wait))
		st.dirty = false // the timer sets it again
	case res.ok:
		l.retry.reset()
		l.waitRev = res.rev
		r.log.Info("proclaimed map", zap.Int64("version", res.version), zap.Int64("revision", res.rev))
	case res.lost:
		r.log.Warn("lost leadership: our election key is gone")
		r.stopLeading()
		if st.inc != nil && st.inc.ctx.Err() == nil {
			r.campaign(st.inc)
		}
	case res.rev == 0:
		// The map key is gone but our view still shows it: retry shortly,
		// once the watch has delivered the deletion.
		st.setTimer(timerPlan, r.now().Add(l.retry.next()))
		st.dirty = false // the timer sets it again
	case res.rev < res.based:
		// The key's mod revision only rises (a deleted key comes back at a
		// higher one): etcd went back in time.
		r.restored(fmt.Sprintf("the map key is at revision %d, below revision %d seen before", res.rev, res.based))
	case res.rev == res.based:
		// The map is where our plan found it, yet the guard failed: our
		// view is wrong in a way waiting will not mend. Back off and plan
		// again rather than spin.
		wait := l.retry.next()
		r.log.Warn("proclaiming the map failed although the view is current, retrying",
			zap.Int64("map_revision", res.rev), zap.Int64("view_revision", st.rev), zap.Duration("backoff", wait))
		st.setTimer(timerPlan, r.now().Add(wait))
		st.dirty = false // the timer sets it again
	default:
		// The map changed under us: plan again once the view has caught up.
		l.waitRev = res.rev
	}
}

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
func (r *Rink) depart(ctx context.Context, release func()) bool {
	st := &r.st
	self := r.opts.member
	key := r.keys.member(self)
	members, cur, curRev, curSeq, viewRev := st.members, st.cur, st.curRev, st.curSeq, st.rev
	version := r.nextVersion()
	if st.inc == nil || st.incompatible != nil || curRev == 0 || cur.index(self) < 0 || st.taint != 0 && st.taint == st.lineage {
		return false // not ranked, or no usable map: nothing to hand over
	}
	ghosts := st.ghosts
	// relisted plans again from the rink as a listing (resp) saw it: its
	// last response the whole map, the others the member keys and the map
	// key among others.
	relisted := func(resp *clientv3.TxnResponse) bool {
		members, viewRev = map[string]memberInfo{}, resp.Header.Revision
		ours := false
		var snap *mvccpb.KeyValue
		last := len(resp.Responses) - 1
		if kvs := resp.Responses[last].GetResponseRange().Kvs; len(kvs) > 0 {
			snap = kvs[0]
		}
		prevRev := curRev
		curRev = 0
		var kvs []*mvccpb.KeyValue
		for _, rr := range resp.Responses[:last] {
			kvs = append(kvs, rr.GetResponseRange().Kvs...)
		}
		for _, kv := range kvs {
			k := string(kv.Key)
			switch {
			case r.keys.isMember(k):
				if name, ok := r.keys.liveMember(kv); ok {
					protocols, capacity := metaOf(kv.Value)
					members[name] = memberInfo{createRev: kv.CreateRevision, protocols: protocols, capacity: capacity, leaving: leavingOf(kv.Value)}
				}
				ours = ours || k == key && kv.CreateRevision == st.inc.createRev && clientv3.LeaseID(kv.Lease) == st.inc.lease
			case r.keys.isMap(k):
				m, err := readMap(kv, snap, &cur, prevRev != 0, curSeq, st.lineage, r.opts.slots)
				if kv.ModRevision == prevRev {
					m, err = cur, nil // (the guard failed on the member keys)
				}
				if err != nil || kv.CreateRevision != st.lineage || kv.Version < curSeq {
					return false // unusable, another lineage, or etcd went back: leave it to the leader
				}
				cur, curRev, curSeq = m, kv.ModRevision, kv.Version
				version = max(version, m.Version+1)
			}
		}
		return curRev != 0 && cur.index(self) >= 0 && ours // (our key is not ours any more: leave it to the leader)
	}
	if !st.view.wide {
		// The narrow view has no member keys (see view.go): list them.
		// Ranked members without a key stay ranked in the plan: this
		// member cannot tell a crash from a ghost, and the leader moves
		// them as it finds out.
		// (Shutdown ends the roles when its context ends first: see
		// Shutdown. The departure still goes out, as any.)
		resp, err := r.listRink(ctx)
		if err != nil || !relisted(resp) {
			return false
		}
		ghosts = map[int64]string{}
		for i, name := range cur.Members {
			if _, ok := members[name]; !ok {
				ghosts[-int64(i)-1] = name
			}
		}
	}
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		live := deleteName(withGhosts(ghosts, speakers(liveByAge(members), members, cur.Schema), members, cur), self)
		for _, name := range live {
			if members[name].leaving {
				live = deleteName(live, name) // it is on its way out: no heir
			}
		}
		next := plan(cur, planInput{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}, Capacity: capacities(members), ByLoad: cur.ByLoad})
		next.Version, next.Leader = version, cur.Leader
		next.Schema = cur.Schema // a departure changes no protocol
		if st.lead != nil {
			next.Leader = self
		}
		if err := r.usable(next); err != nil {
			r.log.Error("hand-over: refusing to proclaim a map that members would refuse", zap.Error(err))
			return false
		}
		fkey, fend := r.keys.followed()
		txn := &etcdserverpb.TxnRequest{
			Compare: []*etcdserverpb.Compare{
				cmpOf(clientv3.Compare(clientv3.ModRevision(r.keys.rankMap()), "=", curRev)),
				cmpOf(clientv3.Compare(clientv3.CreateRevision(r.keys.members()), "<", viewRev+1).WithPrefix()),
				cmpOf(clientv3.Compare(clientv3.CreateRevision(key), "=", st.inc.createRev)),
				cmpOf(clientv3.Compare(clientv3.LeaseValue(key), "=", st.inc.lease)),
			},
			Success: append(r.mapOps(&cur, &next, curRev, transition{View: viewRev, Gone: []string{self}}), deleteOp(key)),
			Failure: []*etcdserverpb.RequestOp{rangeOp(fkey, fend), getOp(r.keys.snapshot())},
		}
		release()
		r.awaitDrains(r.stopCtx)
		pbResp, err := execTxn(ctx, r.cli, txn)
		resp := (*clientv3.TxnResponse)(pbResp)
		if err != nil {
			r.log.Warn("hand-over failed; successors wait for the lease to be revoked", zap.Error(err))
			return false
		}
		if resp.Succeeded {
			r.log.Info("handed over", zap.Int64("version", next.Version), zap.Int("attempt", attempt))
			return true
		}
		if !relisted(resp) {
			return false
		}
	}
	return false
}

// replacedNames returns, for each ghost (see ghosts.go) whose name a live
// member key holds now (a process restarted under the name after an
// operator deleted the old key), that key's create revision: the
// transition of the leader's maps carries them (see transition.Incs).
func (r *Rink) replacedNames() map[string]int64 {
	st := &r.st
	var incs map[string]int64
	for _, name := range st.ghosts {
		if m, ok := st.members[name]; ok {
			if incs == nil {
				incs = map[string]int64{}
			}
			incs[name] = m.createRev
		}
	}
	return incs
}

// goneFrom returns the members that base ranks or lists as waiting, that
// next drops, and that have no member key in members: they hold nothing
// (a ghost, whose key went while its lease lives, stays ranked: see
// withGhosts). Members that follow only the map learn it from the
// transition written with next.
func goneFrom(base, next *rankMap, members map[string]memberInfo) []string {
	var gone []string
	drop := func(name string) {
		if _, live := members[name]; !live && next.index(name) < 0 && !next.waits(name) && !slices.Contains(gone, name) {
			gone = append(gone, name)
		}
	}
	for _, name := range base.Members {
		drop(name)
	}
	for _, w := range base.Waiting {
		drop(w.Name)
	}
	return gone
}

// withGhosts returns live (names of members with keys, oldest first) with
// the ghosts that cur ranks (see ghosts.go) after them: planning keeps a
// ghost ranked, with its slots, until etcd says its lease is gone. Its
// member may still hold them, cut off etcd, until it fences; a map giving
// them to others would let a newcomer that never saw the key go (and so
// knows no ghost) start them at once (issue 22).
func withGhosts(ghosts map[int64]string, live []string, members map[string]memberInfo, cur rankMap) []string {
	for _, lease := range slices.Sorted(maps.Keys(ghosts)) { // (in one order: a history replays)
		name := ghosts[lease]
		if _, ok := members[name]; !ok && cur.index(name) >= 0 && !slices.Contains(live, name) {
			live = append(live, name)
		}
	}
	return live
}

// capacities returns the members' capacities other than 1, for planInput.
func capacities(members map[string]memberInfo) map[string]float64 {
	var out map[string]float64
	for name, m := range members {
		if m.capacity != 1 && m.capacity != 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[name] = m.capacity
		}
	}
	return out
}

func deleteName(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}
