package rink

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
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
func (r *Rink) mapOps(base, next *wire.Map, mapRev int64, t wire.Transition) []*etcdserverpb.RequestOp {
	wholeJSON := next.Encode()
	whole := string(wholeJSON)
	if next.Schema < 3 {
		return []*etcdserverpb.RequestOp{wire.Put(r.keys.Map(), whole, 0)}
	}
	if mapRev == 0 || base.Version == 0 {
		// The first map of a lineage, whole: with the view it was planned
		// from (see transition.View), which a process restarted under a
		// ranked name waits past, and the names whose keys other
		// processes hold now (transition.Incs); not what it changed from
		// a base.
		return []*etcdserverpb.RequestOp{wire.Put(r.keys.Map(), string(wire.WithTransition(wholeJSON, wire.Transition{View: t.View, Incs: t.Incs, ByLeader: t.ByLeader, Quiet: t.Quiet})), 0)}
	}
	c := wire.Diff(base, next)
	t.From = base.Version
	c.Transition = t
	rec := c.Encode()
	if alone := wire.WithTransition(wholeJSON, c.Transition); len(rec) >= len(alone) {
		// A change as large as the map (a hole closed in a small rink
		// renumbers half the slots): the whole map alone, which members
		// read as one. The whole map beside the key would double what
		// the transaction writes, on the path of a handover.
		return []*etcdserverpb.RequestOp{wire.Put(r.keys.Map(), string(alone), 0)}
	}
	return []*etcdserverpb.RequestOp{wire.Put(r.keys.Map(), string(rec), 0), wire.Put(r.keys.Snapshot(), whole, 0)}
}

// proclaimTxn is the transaction that writes m as the rink's map over
// base, provided we still lead (l) and the map key is still at mapRev.
func (r *Rink) proclaimTxn(l *leadership, base, m *wire.Map, mapRev int64, t wire.Transition) *etcdserverpb.TxnRequest {
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			wire.CreateRevisionEq(l.key, l.rev),
			wire.ModRevisionEq(r.keys.Map(), mapRev),
		},
		Success: r.mapOps(base, m, mapRev, t),
		Failure: []*etcdserverpb.RequestOp{wire.Get(l.key), wire.Get(r.keys.Map())},
	}
}

// proclaim writes m as the rink's map (see proclaimTxn).
func (r *Rink) proclaim(ctx context.Context, l *leadership, base, m wire.Map, mapRev int64, t wire.Transition) proclaimResult {
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
		wait := l.retry.Next()
		r.log.Warn("proclaiming the map failed, retrying", zap.Error(res.err), zap.Int64("version", res.version), zap.Duration("backoff", wait))
		st.SetTimer(core.TimerPlan, r.now().Add(wait))
		st.dirty = false // the timer sets it again
	case res.ok:
		l.retry.Reset()
		l.waitRev = res.rev
		l.proclaimed = max(l.proclaimed, res.version) // (see nextVersion)
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
		st.SetTimer(core.TimerPlan, r.now().Add(l.retry.Next()))
		st.dirty = false // the timer sets it again
	case res.rev < res.based:
		// The key's mod revision only rises (a deleted key comes back at a
		// higher one): etcd went back in time.
		r.restored(fmt.Sprintf("the map key is at revision %d, below revision %d seen before", res.rev, res.based))
	case res.rev == res.based:
		// The map is where our plan found it, yet the guard failed: our
		// view is wrong in a way waiting will not mend. Back off and plan
		// again rather than spin.
		wait := l.retry.Next()
		r.log.Warn("proclaiming the map failed although the view is current, retrying",
			zap.Int64("map_revision", res.rev), zap.Int64("view_revision", st.rev), zap.Duration("backoff", wait))
		st.SetTimer(core.TimerPlan, r.now().Add(wait))
		st.dirty = false // the timer sets it again
	default:
		// The map changed under us: plan again once the view has caught up.
		l.waitRev = res.rev
	}
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
// next drops, and that have no member key in members and are no ghosts:
// they hold nothing. (A ghost, whose key went while its lease lives,
// stays ranked (see withGhosts), unless a map put back by hand stopped
// ranking it; either way it may hold its slots.) Members that follow only
// the map learn it from the transition written with next.
func goneFrom(base, next *wire.Map, members map[string]memberInfo, ghosts map[int64]string) []string {
	var gone []string
	drop := func(name string) {
		if _, live := members[name]; !live && next.Index(name) < 0 && !next.Waits(name) && !slices.Contains(gone, name) {
			for _, g := range ghosts {
				if g == name {
					return // (it may hold its slots still: never said gone)
				}
			}
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
func withGhosts(ghosts map[int64]string, live []string, members map[string]memberInfo, cur wire.Map) []string {
	for _, lease := range slices.Sorted(maps.Keys(ghosts)) { // (in one order: a history replays)
		name := ghosts[lease]
		if _, ok := members[name]; !ok && cur.Index(name) >= 0 && !slices.Contains(live, name) {
			live = append(live, name)
		}
	}
	return live
}

// withRanked returns live with every name that cur ranks, for a leader in
// the quiet time after its rejoin (see hush): it plans no map that drops a
// ranked member until the quiet time ends. Such a leader cannot tell
// whether etcd was restored from a snapshot while it was away. If it was,
// a member ranked but gone at the snapshot (its key and lease gone before
// its slots were handed on) may have had its slots taken, after the
// snapshot, by a process the restore erased, which nothing in the
// restored keys names and which acts on them until its deadline, within
// 7/8 of a TTL of the restore, before the quiet time ends. A map planned
// without the gone member would give those slots to a member that starts
// them at once (the leader itself, in a map put after its rebinding, which
// its quiet time spares: see hushSpares; or any other member, which knows
// of no restore). Its slots wait out the quiet time instead, as the
// leader's own do. (rink-sim -seed 1458 -kinds
// restore-unseen,leave,pause,etcd-errors: m4 resumed as the leader of the
// restored etcd, dropped a ranked member whose lease had gone before the
// snapshot, took its slots, and started slot 5 12 ms after its rebinding
// while the erased m6 still held it.)
func withRanked(live []string, cur wire.Map) []string {
	for _, name := range cur.Members {
		if name != "" && !slices.Contains(live, name) {
			live = append(live, name)
		}
	}
	return live
}

// zones returns the members' zones, for planInput (nil: none has one).
func zones(members map[string]memberInfo) map[string]string {
	var out map[string]string
	for name, m := range members {
		if m.zone != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = m.zone
		}
	}
	return out
}

// handed returns names as a set, for planInput.Handed.
func handed(names ...[]string) map[string]bool {
	var out map[string]bool
	for _, l := range names {
		for _, name := range l {
			if out == nil {
				out = map[string]bool{}
			}
			out[name] = true
		}
	}
	return out
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
