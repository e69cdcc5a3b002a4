package rink

import (
	"context"
	"errors"
	"github.com/rink-go/rink/internal/core"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestAckWriterSteps drives the ack writer's state machine alone: lazy
// acknowledgements wait ackPause, others go at once; a failed write is
// retried after a backoff, or at once for a newer one; a foreign delete of
// the key writes the last acknowledgement again, guarded by the key's
// absence; a dead incarnation's acknowledgement is dropped.
func TestAckWriterSteps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inc := &incarnation{Inc: core.Inc{Lease: 7, CreateRev: 3, Done: ctx.Done()}, ctx: ctx}
	w := newAckWriter(newKeys("r"), "m", zap.NewNop())
	now := time.Unix(100, 0)
	ok := func(rev int64) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: rev}}
	}
	guardOf := func(txn *etcdserverpb.TxnRequest) *etcdserverpb.Compare { return txn.Compare[2] }

	if txn, wait := w.next(now); txn != nil || !wait.IsZero() {
		t.Fatal("an idle writer has something to do")
	}
	// The first write of an incarnation is never lazy, and is guarded by
	// the key's absence.
	w.take(ackReq{inc: inc, lineage: 1, version: 1, seq: 1, lazy: true})
	txn, _ := w.next(now)
	if txn == nil || guardOf(txn).Target != etcdserverpb.Compare_VERSION {
		t.Fatalf("first write: %v", txn)
	}
	w.replied(ok(10), nil, now)
	if w.watchRev != 11 || !w.idle() {
		t.Fatalf("after the first write: watch from %d, idle %v", w.watchRev, w.idle())
	}

	// A lazy one waits ackPause; one that is not lazy replaces it and goes.
	w.take(ackReq{inc: inc, lineage: 1, version: 2, seq: 2, lazy: true})
	if txn, wait := w.next(now); txn != nil || !wait.Equal(now.Add(ackPause)) {
		t.Fatalf("lazy: txn %v, wait %v", txn, wait)
	}
	w.take(ackReq{inc: inc, lineage: 1, version: 3, seq: 3})
	txn, _ = w.next(now)
	if txn == nil || string(guardOf(txn).GetValue()) != `{"ack":1,"lineage":1,"seq":1}` {
		t.Fatalf("not lazy: %v", txn)
	}

	// A failed write is retried after a backoff; a newer acknowledgement
	// goes at once, and is lazy only if the failed one was.
	w.replied(nil, errors.New("unavailable"), now)
	if txn, wait := w.next(now); txn != nil || !wait.After(now) {
		t.Fatalf("after a failure: txn %v, wait %v", txn, wait)
	}
	w.take(ackReq{inc: inc, lineage: 1, version: 4, seq: 4, lazy: true})
	if txn, _ := w.next(now); txn == nil {
		t.Fatal("a newer acknowledgement after a failure waits")
	}
	w.replied(ok(12), nil, now)

	// Somebody deletes the key: the last acknowledgement goes again,
	// guarded by the key's absence. Our own put coming back is nothing.
	w.changed(clientv3.WatchResponse{Events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{ModRevision: 12}}}}, true)
	if !w.idle() {
		t.Fatal("our own put came back as a foreign change")
	}
	w.changed(clientv3.WatchResponse{Events: []*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{ModRevision: 13}}}}, true)
	txn, _ = w.next(now)
	if txn == nil || guardOf(txn).Target != etcdserverpb.Compare_VERSION || w.cur.seq != 4 {
		t.Fatalf("after a foreign delete: %v", txn)
	}

	// The incarnation ends: what it had to write is dropped.
	cancel()
	if txn, wait := w.next(now); txn != nil || !wait.IsZero() || !w.idle() {
		t.Fatal("a dead incarnation's acknowledgement is still written")
	}
}
