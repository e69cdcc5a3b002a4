package core

import (
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
)

// floorWriter decides what the floor writer does: it writes the newest
// floor handed to it, guarded by the leader's election key and by the
// floor key's mod revision as it last knew it, so that a write that
// commits late cannot replace a newer one. A state machine with no I/O,
// as ackWriter.
type FloorWriter struct {
	key, electKey string
	electRev      int64
	log           *zap.Logger
	base          int64     // the floor key's mod revision as we believe it; 0: absent
	val           []byte    // the floor to write (nil: none)
	retryAt       time.Time // a write failed: the next try (zero: none)
	Retry         *Backoff
}

func NewFloorWriter(k wire.Keys, electKey string, electRev int64, log *zap.Logger, retry *Backoff) *FloorWriter {
	return &FloorWriter{key: k.Floor(), electKey: electKey, electRev: electRev, log: log, Retry: retry}
}

// Take adopts val, the newest floor; after a failed write it goes at once.
func (w *FloorWriter) Take(val []byte) { w.val, w.retryAt = val, time.Time{} }

// Next returns the write to send at now, or nothing until wait (zero:
// until take).
func (w *FloorWriter) Next(now time.Time) (txn *etcdserverpb.TxnRequest, wait time.Time) {
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

// Replied handles the answer to the write next returned, at now; false
// when we no longer lead (the run goroutine finds out on its own).
func (w *FloorWriter) Replied(resp *etcdserverpb.TxnResponse, err error, now time.Time) bool {
	switch {
	case err == nil && resp.Succeeded:
		w.base, w.val = resp.Header.Revision, nil
		w.Retry.Reset()
	case err == nil:
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != w.electRev {
			return false
		}
		w.base = 0
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			w.base = kvs[0].ModRevision
		}
	default:
		wait := w.Retry.Next()
		w.log.Warn("writing the acknowledgement floor failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
		w.retryAt = now.Add(wait)
	}
	return true
}
