package rink

import (
	"encoding/json"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ackWriter decides what this member's ack writer does (see writeAcks): a
// state machine over the acknowledgements handed to it, the answers to its
// writes, the changes of its ack key, and time. It does no I/O: its driver
// asks it what to do next (next), carries that out, and tells it what came
// of it.
type ackWriter struct {
	member, key string // this member's member key and ack key
	log         *zap.Logger

	// cur is the acknowledgement to write (nil: none). Invariant: while a
	// write is in flight, cur is what it writes.
	cur *ackReq
	// inc is the incarnation whose ack key we last wrote or read, and last
	// the value we believe that key holds (nil: no key). Every write is
	// guarded by last, so a late write can never put an older value over a
	// newer one.
	inc  *incarnation
	last *string
	// lazyUntil: when a lazy acknowledgement waiting (see ackPause) is due
	// (zero: none waits).
	lazyUntil time.Time
	// written is the newest acknowledgement written, at revision wroteRev.
	written  *ackReq
	wroteRev int64
	// watchRev: the ack key is watched from this revision on, for
	// written's incarnation, to write written again when somebody else
	// deletes or overwrites the key (0: not watched). It changes only when
	// a new watch is wanted.
	watchRev int64
	// retryAt: a write failed; the next try is due then (zero: none).
	retryAt time.Time
	b       *backoff
	// val is the value the write in flight puts (see next).
	val string
}

func newAckWriter(k keys, member string, log *zap.Logger) *ackWriter {
	return &ackWriter{member: k.Member(member), key: k.Ack(member), log: log, b: newBackoff()}
}

// take adopts req, the newest acknowledgement, in place of one not yet
// written. After a failed write it is tried at once, and is lazy only if
// the one it replaces was too: that one was due.
func (w *ackWriter) take(req ackReq) {
	if !w.retryAt.IsZero() && w.cur != nil {
		req.lazy = req.lazy && w.cur.lazy
		w.retryAt = time.Time{}
	}
	w.cur = &req
}

// idle reports whether the writer waits for nothing but a new
// acknowledgement or a change of its key: only then does it read the
// changes (see changed).
func (w *ackWriter) idle() bool { return w.cur == nil }

// changed handles a watch response on the ack key (ok false: the watch
// ended). Our own puts come back up to wroteRev; anything else is somebody
// else's, and written goes out again. A watch that ended is dropped, and
// written goes out again too (a write that finds the key as we left it
// only repeats it); the write starts a new watch.
func (w *ackWriter) changed(resp clientv3.WatchResponse, ok bool) {
	var foreign *clientv3.Event
	for _, ev := range resp.Events {
		if ev.Type == clientv3.EventTypeDelete || ev.Kv.ModRevision > w.wroteRev {
			foreign = ev
		}
	}
	if ok && resp.Err() == nil && foreign == nil {
		return
	}
	if w.written.inc.Ended() {
		w.watchRev = 0
		return
	}
	switch {
	case foreign == nil:
		w.watchRev = 0
	case foreign.Type == clientv3.EventTypeDelete:
		w.log.Warn("own acknowledgement key deleted: writing it again")
		w.last = nil
	default:
		w.log.Warn("own acknowledgement key overwritten: writing it again")
		v := string(foreign.Kv.Value)
		w.last = &v
	}
	again := *w.written
	again.lazy = false
	w.cur = &again
}

// next returns what to do at now: a write to send (then replied), or
// nothing until wait (zero: until take or changed).
func (w *ackWriter) next(now time.Time) (txn *etcdserverpb.TxnRequest, wait time.Time) {
	for {
		if w.cur == nil {
			return nil, time.Time{}
		}
		if w.cur.inc.Ended() {
			w.cur, w.retryAt = nil, time.Time{}
			continue
		}
		if !w.retryAt.IsZero() {
			if now.Before(w.retryAt) {
				return nil, w.retryAt
			}
			w.retryAt = time.Time{}
		}
		if w.cur.lazy && w.cur.inc == w.inc && w.last != nil {
			// Wait until ackPause after the first lazy acknowledgement
			// not yet written, unless one that is not lazy comes first.
			// Never the first write of an incarnation: see others.
			if w.lazyUntil.IsZero() {
				w.lazyUntil = now.Add(ackPause)
			}
			if now.Before(w.lazyUntil) {
				return nil, w.lazyUntil
			}
			w.cur.lazy = false
		}
		w.lazyUntil = time.Time{}
		if w.cur.inc != w.inc {
			w.inc, w.last = w.cur.inc, nil
			w.watchRev = 0
		}
		cur := w.cur
		val, _ := json.Marshal(wire.AckValue{Ack: cur.version, Lineage: cur.lineage, Seq: cur.seq, Warm: cur.warm})
		w.val = string(val)
		guard := wire.VersionEq(w.key, 0)
		if w.last != nil {
			guard = wire.ValueEq(w.key, *w.last)
		}
		return &etcdserverpb.TxnRequest{
			Compare: []*etcdserverpb.Compare{
				wire.CreateRevisionEq(w.member, cur.inc.CreateRev),
				wire.LeaseEq(w.member, int64(cur.inc.Lease)),
				guard,
			},
			Success: []*etcdserverpb.RequestOp{wire.Put(w.key, w.val, int64(cur.inc.Lease))},
			Failure: []*etcdserverpb.RequestOp{wire.Get(w.member), wire.Get(w.key)},
		}, time.Time{}
	}
}

// replied handles the answer to the write next returned, at now.
func (w *ackWriter) replied(resp *etcdserverpb.TxnResponse, err error, now time.Time) {
	cur := w.cur
	switch {
	case err == nil && resp.Succeeded:
		v := w.val
		w.written, w.last, w.cur, w.wroteRev = cur, &v, nil, resp.Header.Revision
		if w.watchRev == 0 {
			w.watchRev = w.wroteRev + 1
		}
		w.b.Reset()
		return
	case err == nil:
		mkv := resp.Responses[0].GetResponseRange().Kvs
		if len(mkv) == 0 || mkv[0].CreateRevision != cur.inc.CreateRev || mkv[0].Lease != int64(cur.inc.Lease) {
			w.cur = nil // our key is gone, or a later incarnation's: the keeper or the run loop fences
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
	case cur.inc.Ended():
		return // (next drops it)
	}
	wait := w.b.Next()
	w.log.Warn("writing acknowledgement failed, retrying", zap.Error(err), zap.Int64("version", cur.version), zap.Duration("backoff", wait))
	w.retryAt = now.Add(wait)
}
