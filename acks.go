package rink

import (
	"context"
	"github.com/rink-go/rink/internal/core"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// sendAck hands the applied map version to the ack writer, replacing any
// acknowledgement it has not written yet. It never blocks: the run goroutine
// is the only sender, so after draining the buffer there is room.
func (r *Rink) sendAck() { r.sendAckLazily(false) }

// sendAckLazily is sendAck; lazy marks an acknowledgement that may wait
// ackPause. An acknowledgement that replaces one not yet written is lazy
// only if that one was too.
func (r *Rink) sendAckLazily(lazy bool) {
	st := &r.st
	if st.inc == nil || !st.selfSeen || st.cur.Version == 0 || r.hushed() || len(st.draining) > 0 {
		return // a quiet time (see hush) and a drain (see drain.go) withhold acknowledgements
	}
	warm := r.warmedNow()
	st.acked = ackState{inc: st.inc, lineage: st.lineage, seq: st.curSeq, warm: warm}
	r.fx().ack(core.AckReq{Inc: &st.inc.Inc, Lineage: st.lineage, Version: st.cur.Version, Seq: st.curSeq, Warm: warm, Lazy: lazy})
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
	w := core.NewAckWriter(r.keys, r.opts.member, r.log, newBackoff())
	var (
		gone     clientv3.WatchChan // the ack key's changes (see ackWriter.watchRev)
		watched  int64              // the revision gone watches from (0: none)
		stopGone context.CancelFunc // ends gone's watch
	)
	unwatch := func() {
		if stopGone != nil {
			stopGone()
		}
		gone, stopGone, watched = nil, nil, 0
	}
	defer unwatch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		txn, wait := w.Next(r.now())
		if w.WatchRev != watched {
			unwatch()
			if w.WatchRev != 0 {
				gone, stopGone = watchKey(incOf(w.Written.Inc).ctx, r.cli, w.Key, w.WatchRev)
				watched = w.WatchRev
			}
		}
		if txn != nil {
			ctx, cancel := context.WithTimeout(incOf(w.Cur.Inc).ctx, r.opts.ttl)
			resp, err := execTxn(ctx, r.cli, txn)
			cancel()
			w.Replied(resp, err, r.now())
			continue
		}
		var changes clientv3.WatchChan
		if w.Idle() {
			changes = gone
		}
		var due <-chan time.Time
		if !wait.IsZero() {
			timer.Reset(wait.Sub(r.now()))
			due = timer.C
		}
		select {
		case req := <-r.ackCh:
			w.Take(req)
		case resp, ok := <-changes:
			w.Changed(resp.Events, resp.Err(), ok)
		case <-due:
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

// incOf returns the incarnation whose core part inc is.
func incOf(inc *core.Inc) *incarnation { return inc.Owner.(*incarnation) }
