package rink

import (
	"context"
	"encoding/json"
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

// maxLagging bounds how many members the floor names one by one.
const maxLagging = 64

// AckValue is the JSON value of an ack key.
type AckValue struct {
	// Ack is the version of the newest map this member has applied, in the
	// map lineage Lineage (the map key's create revision).
	Ack     int64 `json:"ack"`
	Lineage int64 `json:"lineage"`
	// Seq names that map exactly: the etcd version of the map key when it
	// held the map (the count of puts since the key was created). Versions
	// can repeat when somebody writes the key by hand; seqs cannot. The
	// member holds no slot that the maps from Seq on do not give it.
	// Members of map schema 2 before seqs (commit 636d84c) leave it out.
	Seq int64 `json:"seq,omitempty"`
	// Warm is the version of the newest map announcing slots to this
	// member (see warmup.go) that it has warmed up for.
	Warm int64 `json:"warm,omitempty"`
}

// AckFloor is the JSON value of the floor key. Its first fields count in
// map versions, for members that predate seqs; the Seq fields carry the
// same bounds in seqs, and members use them wherever they are known.
type AckFloor struct {
	Lineage  int64            `json:"lineage"`
	Version  int64            `json:"version"` // the map version of the leader's view
	Floor    int64            `json:"floor"`   // 0: some live member's acknowledgement is unknown
	Complete bool             `json:"complete,omitempty"`
	Lagging  map[string]int64 `json:"lagging,omitempty"` // 0: unknown

	Seq         int64            `json:"seq,omitempty"` // the map's seq in the leader's view (0: a floor without seqs)
	SeqFloor    int64            `json:"seqfloor,omitempty"`
	SeqComplete bool             `json:"seqcomplete,omitempty"`
	SeqLagging  map[string]int64 `json:"seqlagging,omitempty"`

	// What the leader plans (see setRest). Leaders of d85b50e and before
	// leave these out: their rinks never say they are at rest.
	//
	// Rest, when it equals Version, says that the leader plans no move
	// after that map: nobody waits to be ranked, no move is announced
	// (WithWarmup) and no load round would move a slot. With every
	// member's acknowledgement of the map (Floor at Version), the rink is
	// at rest (see Rank.Settled): nothing moves until the membership, the
	// awaited roles or the measured load change.
	Rest int64 `json:"rest,omitempty"`
	// Round says that a load round would move slots.
	Round bool `json:"round,omitempty"`
	// Imbalance is the leader's estimate of the most loaded member's load
	// per capacity over the mean, to 0.01, and Tolerance its
	// WithImbalanceTolerance, when it balances by load (0: it does not).
	Imbalance float64 `json:"imbalance,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`

	// Still says that this leader counts a member as having acknowledged
	// the map of Seq when no map since its acknowledgement changed its
	// slots or the slots announced to it (see still.go), and Base is the
	// first map of the lineage its view saw: it knows the changes after
	// it only. Leaders of d85b50e and before leave both out, and members
	// then acknowledge every map.
	Still bool  `json:"still,omitempty"`
	Base  int64 `json:"base,omitempty"`

	// Ghosts counts the members the leader knows may still act while
	// their keys are gone (see ghosts.go): members that follow the narrow
	// view, which see no member key go, start nothing while it is above
	// 0, as the leader's own handover check does (see view.go).
	//
	// From issue 42 it counts only the ghosts whose bounds the floor does
	// not give: a ghost whose acknowledgement the leader saw, written
	// under the ghost's own lease, is in Covered instead, and the floor's
	// bound for its name is at most that acknowledgement, so that it
	// holds up only the slots it may hold (see aggregation.coverGhosts).
	Ghosts int `json:"ghosts,omitempty"`
	// Covered lists the leases of the ghosts the floor's bounds cover.
	// A member that knows ghosts of its own (the wide view) lets them
	// hold up only their own slots when the floor covers every one.
	Covered []int64 `json:"covered,omitempty"`
	// Leader names the leader that wrote the floor: members that follow
	// the narrow view learn the leader from it (see Rank.Leader).
	Leader string `json:"leader,omitempty"`
}

// Settled reports whether the floor says that the rink is at rest with
// the map of seq seq and version version, in lineage lineage: the leader
// plans no move after it, and every live member has acknowledged it.
func (f *AckFloor) Settled(lineage, version, seq int64) bool {
	if f.Lineage != lineage || f.Version != version || f.Rest != version || version < 1 || f.Floor < version {
		return false
	}
	return f.Seq == 0 || f.Seq == seq && f.SeqFloor >= seq
}

// decodeFloor decodes a floor key's value; one that does not decode says
// nothing.
func decodeFloor(value []byte) AckFloor {
	if f, ok := parseFloor(value); ok {
		return f
	}
	var f AckFloor
	if json.Unmarshal(value, &f) != nil {
		return AckFloor{}
	}
	return f
}

// Of returns a lower bound Of a member's acknowledged map version; below
// 1 it is unknown.
func (f *AckFloor) Of(name string) int64 {
	return boundIn(name, f.Version, f.Floor, f.Complete, f.Lagging)
}

// SeqOf returns a lower bound of a member's acknowledged seq; below 1 it
// is unknown.
func (f *AckFloor) SeqOf(name string) int64 {
	if f.Seq < 1 {
		return 0
	}
	return boundIn(name, f.Seq, f.SeqFloor, f.SeqComplete, f.SeqLagging)
}

func boundIn(name string, top, floor int64, complete bool, lagging map[string]int64) int64 {
	if !complete {
		return floor
	}
	if a, ok := lagging[name]; ok {
		return a
	}
	return top
}

// sendAck hands the applied map version to the ack writer, replacing any
// acknowledgement it has not written yet. It never blocks: the run goroutine
// is the only sender, so after draining the buffer there is room.
func (r *Rink) sendAck() { r.sendAckLazily(false) }

// ackPause is how long a member waits before it acknowledges a map that
// changes nothing it owns and announces nothing to it (a lazy
// acknowledgement). Such an acknowledgement is on nobody's way: the heirs
// of a map wait for the members that lose slots in it, and for the others
// they find in the maps they have applied that those never held the slots
// (see free). Written at once, the acknowledgements of every member not
// concerned would reach etcd together, right when the members concerned
// act on the map: with a graceful departure, while etcd is still sending
// the map to the heir. A moment later they go out behind the writes that
// matter, and a map that follows within the pause (an announcement and its
// move, a rolling deploy's next step) costs one write for both. An
// acknowledgement only ever comes late, never early, so the pause cannot
// let anybody start a slot sooner than before.
const ackPause = 3 * time.Millisecond

// sendAckLazily is sendAck; lazy marks an acknowledgement that may wait
// ackPause. An acknowledgement that replaces one not yet written is lazy
// only if that one was too.
func (r *Rink) sendAckLazily(lazy bool) {
	st := &r.st
	if st.inc == nil || !st.selfSeen || st.cur.Version == 0 || r.hushed() || len(st.draining) > 0 {
		return // a quiet time (see hush) and a drain (see drain.go) withhold acknowledgements
	}
	st.acked = ackState{inc: st.inc, lineage: st.lineage, seq: st.curSeq, warm: st.warmed}
	r.fx().ack(ackReq{inc: st.inc, lineage: st.lineage, version: st.cur.Version, seq: st.curSeq, warm: st.warmed, lazy: lazy})
}

type ackReq struct {
	inc     *incarnation
	lineage int64
	version int64
	seq     int64
	warm    int64
	lazy    bool // may wait ackPause (see sendAckLazily)
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
	w := newAckWriter(r.keys, r.opts.member, r.log)
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
		txn, wait := w.next(r.now())
		if w.watchRev != watched {
			unwatch()
			if w.watchRev != 0 {
				gone, stopGone = watchKey(w.written.inc.ctx, r.cli, w.key, w.watchRev)
				watched = w.watchRev
			}
		}
		if txn != nil {
			ctx, cancel := context.WithTimeout(w.cur.inc.ctx, r.opts.ttl)
			resp, err := execTxn(ctx, r.cli, txn)
			cancel()
			w.replied(resp, err, r.now())
			continue
		}
		var changes clientv3.WatchChan
		if w.idle() {
			changes = gone
		}
		var due <-chan time.Time
		if !wait.IsZero() {
			timer.Reset(wait.Sub(r.now()))
			due = timer.C
		}
		select {
		case req := <-r.ackCh:
			w.take(req)
		case resp, ok := <-changes:
			w.changed(resp, ok)
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
