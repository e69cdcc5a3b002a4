package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
)

// writeFloors writes the newest floor handed to it (see floorWriter) while
// ctx lasts.
func (r *Rink) writeFloors(ctx context.Context, electKey string, electRev int64, reqs <-chan []byte) {
	w := newFloorWriter(r.keys, electKey, electRev, r.log)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case next := <-reqs:
			w.take(next) // a newer floor replaces one not yet written
		default:
		}
		txn, wait := w.next(r.now())
		if txn != nil {
			wctx, cancel := context.WithTimeout(ctx, r.opts.ttl)
			resp, err := execTxn(wctx, r.cli, txn)
			cancel()
			if ctx.Err() != nil || !w.replied(resp, err, r.now()) {
				return
			}
			continue
		}
		var due <-chan time.Time
		if !wait.IsZero() {
			timer.Reset(wait.Sub(r.now()))
			due = timer.C
		}
		select {
		case next := <-reqs:
			w.take(next)
		case <-due:
		case <-ctx.Done():
			return
		}
	}
}

// floorWriter decides what the floor writer does: it writes the newest
// floor handed to it, guarded by the leader's election key and by the
// floor key's mod revision as it last knew it, so that a write that
// commits late cannot replace a newer one. A state machine with no I/O,
// as ackWriter.
type floorWriter struct {
	key, electKey string
	electRev      int64
	log           *zap.Logger
	base          int64     // the floor key's mod revision as we believe it; 0: absent
	val           []byte    // the floor to write (nil: none)
	retryAt       time.Time // a write failed: the next try (zero: none)
	b             *backoff
}

func newFloorWriter(k keys, electKey string, electRev int64, log *zap.Logger) *floorWriter {
	return &floorWriter{key: k.Floor(), electKey: electKey, electRev: electRev, log: log, b: newBackoff()}
}

// take adopts val, the newest floor; after a failed write it goes at once.
func (w *floorWriter) take(val []byte) { w.val, w.retryAt = val, time.Time{} }

// next returns the write to send at now, or nothing until wait (zero:
// until take).
func (w *floorWriter) next(now time.Time) (txn *etcdserverpb.TxnRequest, wait time.Time) {
	if w.val == nil {
		return nil, time.Time{}
	}
	if now.Before(w.retryAt) {
		return nil, w.retryAt
	}
	w.retryAt = time.Time{}
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			wire.CreateRevisionEq(w.electKey, w.electRev),
			wire.ModRevisionEq(w.key, w.base),
		},
		Success: []*etcdserverpb.RequestOp{wire.Put(w.key, string(w.val), 0)},
		Failure: []*etcdserverpb.RequestOp{wire.Get(w.electKey), wire.Get(w.key)},
	}, time.Time{}
}

// replied handles the answer to the write next returned, at now; false
// when we no longer lead (the run goroutine finds out on its own).
func (w *floorWriter) replied(resp *etcdserverpb.TxnResponse, err error, now time.Time) bool {
	switch {
	case err == nil && resp.Succeeded:
		w.base, w.val = resp.Header.Revision, nil
		w.b.Reset()
	case err == nil:
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != w.electRev {
			return false
		}
		w.base = 0
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			w.base = kvs[0].ModRevision
		}
	default:
		wait := w.b.Next()
		w.log.Warn("writing the acknowledgement floor failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
		w.retryAt = now.Add(wait)
	}
	return true
}
