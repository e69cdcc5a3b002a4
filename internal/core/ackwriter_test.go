package core

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	inc := &Inc{Lease: 7, CreateRev: 3, Done: ctx.Done()}
	w := NewAckWriter(wire.NewKeys("r"), "m", zap.NewNop(), NewBackoff(rand.New(rand.NewPCG(1, 2))))
	now := time.Unix(100, 0)
	ok := func(rev int64) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: rev}}
	}
	guardOf := func(txn *etcdserverpb.TxnRequest) *etcdserverpb.Compare { return txn.Compare[2] }

	if txn, wait := w.Next(now); txn != nil || !wait.IsZero() {
		t.Fatal("an idle writer has something to do")
	}
	// The first write of an incarnation is never lazy, and is guarded by
	// the key's absence.
	w.Take(AckReq{Inc: inc, Lineage: 1, Version: 1, Seq: 1, Lazy: true})
	txn, _ := w.Next(now)
	if txn == nil || guardOf(txn).Target != etcdserverpb.Compare_VERSION {
		t.Fatalf("first write: %v", txn)
	}
	w.Replied(ok(10), nil, now)
	if w.WatchRev != 11 || !w.Idle() {
		t.Fatalf("after the first write: watch from %d, idle %v", w.WatchRev, w.Idle())
	}

	// A lazy one waits ackPause; one that is not lazy replaces it and goes.
	w.Take(AckReq{Inc: inc, Lineage: 1, Version: 2, Seq: 2, Lazy: true})
	if txn, wait := w.Next(now); txn != nil || !wait.Equal(now.Add(AckPause)) {
		t.Fatalf("lazy: txn %v, wait %v", txn, wait)
	}
	w.Take(AckReq{Inc: inc, Lineage: 1, Version: 3, Seq: 3})
	txn, _ = w.Next(now)
	if txn == nil || string(guardOf(txn).GetValue()) != `{"ack":1,"lineage":1,"seq":1}` {
		t.Fatalf("not lazy: %v", txn)
	}

	// A failed write is retried after a backoff; a newer acknowledgement
	// goes at once, and is lazy only if the failed one was.
	w.Replied(nil, errors.New("unavailable"), now)
	if txn, wait := w.Next(now); txn != nil || !wait.After(now) {
		t.Fatalf("after a failure: txn %v, wait %v", txn, wait)
	}
	w.Take(AckReq{Inc: inc, Lineage: 1, Version: 4, Seq: 4, Lazy: true})
	if txn, _ := w.Next(now); txn == nil {
		t.Fatal("a newer acknowledgement after a failure waits")
	}
	w.Replied(ok(12), nil, now)

	// Somebody deletes the key: the last acknowledgement goes again,
	// guarded by the key's absence. Our own put coming back is nothing.
	w.Changed([]*mvccpb.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{ModRevision: 12}}}, nil, true)
	if !w.Idle() {
		t.Fatal("our own put came back as a foreign change")
	}
	w.Changed([]*mvccpb.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{ModRevision: 13}}}, nil, true)
	txn, _ = w.Next(now)
	if txn == nil || guardOf(txn).Target != etcdserverpb.Compare_VERSION || w.Cur.Seq != 4 {
		t.Fatalf("after a foreign delete: %v", txn)
	}

	// The incarnation ends: what it had to write is dropped.
	cancel()
	if txn, wait := w.Next(now); txn != nil || !wait.IsZero() || !w.Idle() {
		t.Fatal("a dead incarnation's acknowledgement is still written")
	}
}
