package core

import (
	"encoding/json"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// AckPause is how long a member waits before it acknowledges a map that
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
const AckPause = 3 * time.Millisecond

type AckReq struct {
	Inc     *Inc
	Lineage int64
	Version int64
	Seq     int64
	Warm    int64
	Lazy    bool // may wait ackPause (see sendAckLazily)
}

// ackWriter decides what this member's ack writer does (see writeAcks): a
// state machine over the acknowledgements handed to it, the answers to its
// writes, the changes of its ack key, and time. It does no I/O: its driver
// asks it what to do next (next), carries that out, and tells it what came
// of it.
type AckWriter struct {
	member, Key string // this member's member key and ack key
	log         *zap.Logger

	// Cur is the acknowledgement to write (nil: none). Invariant: while a
	// write is in flight, Cur is what it writes.
	Cur *AckReq
	// inc is the incarnation whose ack key we last wrote or read, and last
	// the value we believe that key holds (nil: no key). Every write is
	// guarded by last, so a late write can never put an older value over a
	// newer one.
	inc  *Inc
	last *string
	// lazyUntil: when a lazy acknowledgement waiting (see ackPause) is due
	// (zero: none waits).
	lazyUntil time.Time
	// Written is the newest acknowledgement Written, at revision wroteRev.
	Written  *AckReq
	wroteRev int64
	// WatchRev: the ack key is watched from this revision on, for
	// written's incarnation, to write written again when somebody else
	// deletes or overwrites the key (0: not watched). It changes only when
	// a new watch is wanted.
	WatchRev int64
	// retryAt: a write failed; the next try is due then (zero: none).
	retryAt time.Time
	Retry   *Backoff
	// val is the value the write in flight puts (see next).
	val string
}

func NewAckWriter(k wire.Keys, member string, log *zap.Logger, retry *Backoff) *AckWriter {
	return &AckWriter{member: k.Member(member), Key: k.Ack(member), log: log, Retry: retry}
}

// Take adopts req, the newest acknowledgement, in place of one not yet
// written. After a failed write it is tried at once, and is lazy only if
// the one it replaces was too: that one was due.
func (w *AckWriter) Take(req AckReq) {
	if !w.retryAt.IsZero() && w.Cur != nil {
		req.Lazy = req.Lazy && w.Cur.Lazy
		w.retryAt = time.Time{}
	}
	w.Cur = &req
}

// Idle reports whether the writer waits for nothing but a new
// acknowledgement or a change of its key: only then does it read the
// changes (see changed).
func (w *AckWriter) Idle() bool { return w.Cur == nil }

// Changed handles a watch response on the ack key (ok false: the watch
// ended). Our own puts come back up to wroteRev; anything else is somebody
// else's, and written goes out again. A watch that ended is dropped, and
// written goes out again too (a write that finds the key as we left it
// only repeats it); the write starts a new watch.
func (w *AckWriter) Changed(events []*mvccpb.Event, err error, ok bool) {
	var foreign *mvccpb.Event
	for _, ev := range events {
		if ev.Type == mvccpb.DELETE || ev.Kv.ModRevision > w.wroteRev {
			foreign = ev
		}
	}
	if ok && err == nil && foreign == nil {
		return
	}
	if w.Written.Inc.Ended() {
		w.WatchRev = 0
		return
	}
	switch {
	case foreign == nil:
		w.WatchRev = 0
	case foreign.Type == mvccpb.DELETE:
		w.log.Warn("own acknowledgement key deleted: writing it again")
		w.last = nil
	default:
		w.log.Warn("own acknowledgement key overwritten: writing it again")
		v := string(foreign.Kv.Value)
		w.last = &v
	}
	again := *w.Written
	again.Lazy = false
	w.Cur = &again
}

// Next returns what to do at now: a write to send (then replied), or
// nothing until wait (zero: until take or changed).
func (w *AckWriter) Next(now time.Time) (txn *etcdserverpb.TxnRequest, wait time.Time) {
	for {
		if w.Cur == nil {
			return nil, time.Time{}
		}
		if w.Cur.Inc.Ended() {
			w.Cur, w.retryAt = nil, time.Time{}
			continue
		}
		if !w.retryAt.IsZero() {
			if now.Before(w.retryAt) {
				return nil, w.retryAt
			}
			w.retryAt = time.Time{}
		}
		if w.Cur.Lazy && w.Cur.Inc == w.inc && w.last != nil {
			// Wait until ackPause after the first lazy acknowledgement
			// not yet written, unless one that is not lazy comes first.
			// Never the first write of an incarnation: see others.
			if w.lazyUntil.IsZero() {
				w.lazyUntil = now.Add(AckPause)
			}
			if now.Before(w.lazyUntil) {
				return nil, w.lazyUntil
			}
			w.Cur.Lazy = false
		}
		w.lazyUntil = time.Time{}
		if w.Cur.Inc != w.inc {
			w.inc, w.last = w.Cur.Inc, nil
			w.WatchRev = 0
		}
		cur := w.Cur
		val, _ := json.Marshal(wire.AckValue{Ack: cur.Version, Lineage: cur.Lineage, Seq: cur.Seq, Warm: cur.Warm})
		w.val = string(val)
		guard := wire.VersionEq(w.Key, 0)
		if w.last != nil {
			guard = wire.ValueEq(w.Key, *w.last)
		}
		return &etcdserverpb.TxnRequest{
			Compare: []*etcdserverpb.Compare{
				wire.CreateRevisionEq(w.member, cur.Inc.CreateRev),
				wire.LeaseEq(w.member, int64(cur.Inc.Lease)),
				guard,
			},
			Success: []*etcdserverpb.RequestOp{wire.Put(w.Key, w.val, int64(cur.Inc.Lease))},
			Failure: []*etcdserverpb.RequestOp{wire.Get(w.member), wire.Get(w.Key)},
		}, time.Time{}
	}
}

// Replied handles the answer to the write next returned, at now.
func (w *AckWriter) Replied(resp *etcdserverpb.TxnResponse, err error, now time.Time) {
	cur := w.Cur
	switch {
	case err == nil && resp.Succeeded:
		v := w.val
		w.Written, w.last, w.Cur, w.wroteRev = cur, &v, nil, resp.Header.Revision
		if w.WatchRev == 0 {
			w.WatchRev = w.wroteRev + 1
		}
		w.Retry.Reset()
		return
	case err == nil:
		mkv := resp.Responses[0].GetResponseRange().Kvs
		if len(mkv) == 0 || mkv[0].CreateRevision != cur.Inc.CreateRev || mkv[0].Lease != int64(cur.Inc.Lease) {
			w.Cur = nil // our key is gone, or a later incarnation's: the keeper or the run loop fences
			return
		}
		// The ack key is not what we thought (a late write of ours
		// landed): go again from what is there.
		w.last = nil
		if akv := resp.Responses[1].GetResponseRange().Kvs; len(akv) > 0 {
			v := string(akv[0].Value)
			w.last = &v
		}
		return
	case cur.Inc.Ended():
		return // (next drops it)
	}
	wait := w.Retry.Next()
	w.log.Warn("writing acknowledgement failed, retrying", zap.Error(err), zap.Int64("version", cur.Version), zap.Duration("backoff", wait))
	w.retryAt = now.Add(wait)
}
