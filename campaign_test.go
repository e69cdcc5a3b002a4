package rink

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// TestCampaignerSteps drives the election recipe's state machine alone:
// our key is written, a stray below it is deleted, a candidate below it
// is waited for, a failure starts again after a backoff, and the election
// is won once nothing is below.
func TestCampaignerSteps(t *testing.T) {
	k := newKeys("r")
	inc := &incarnation{lease: 0x20, createRev: 5, ctx: context.Background()}
	c := newCampaigner(k, "m", inc, zap.NewNop())
	now := time.Unix(100, 0)
	hdr := func(rev int64) *etcdserverpb.ResponseHeader { return &etcdserverpb.ResponseHeader{Revision: rev} }
	rangeResp := func(rev int64, kvs ...*mvccpb.KeyValue) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(rev), Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}}}
	}
	expectTxn := func(what string) *etcdserverpb.TxnRequest {
		t.Helper()
		txn, key, _, _ := c.next(now)
		if txn == nil || key != "" {
			t.Fatalf("%s: no transaction (watch %q)", what, key)
		}
		return txn
	}

	if txn := expectTxn("write"); string(txn.Success[0].GetRequestPut().Key) != k.electionKey(0x20) {
		t.Fatalf("writes %s", txn.Success[0].GetRequestPut().Key)
	}
	c.replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(30)}, nil, now)
	if txn := expectTxn("list"); txn.Success[0].GetRequestRange().MaxCreateRevision != 29 || !txn.Success[0].GetRequestRange().KeysOnly {
		t.Fatalf("lists below %d (keys alone: %v)", txn.Success[0].GetRequestRange().MaxCreateRevision, txn.Success[0].GetRequestRange().KeysOnly)
	}
	// peek answers the listing with keys alone (etcd's index says no
	// lease), and the read of the key below with kv.
	peek := func(listRev, readRev int64, kv *mvccpb.KeyValue) {
		t.Helper()
		c.replied(rangeResp(listRev, &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}), nil, now)
		if txn := expectTxn("read the key below"); string(txn.Success[0].GetRequestRange().Key) != string(kv.Key) || len(txn.Success[0].GetRequestRange().RangeEnd) != 0 {
			t.Fatalf("reads %v", txn)
		}
		c.replied(rangeResp(readRev, kv), nil, now)
	}
	// A stray below (no lease): deleted, guarded by its revision.
	stray := &mvccpb.KeyValue{Key: []byte(k.election() + "zz"), CreateRevision: 9, ModRevision: 9}
	peek(31, 31, stray)
	if txn := expectTxn("delete"); string(txn.Success[0].GetRequestDeleteRange().Key) != string(stray.Key) || txn.Compare[0].GetModRevision() != 9 {
		t.Fatalf("deletes %v", txn)
	}
	c.replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(32)}, nil, now)
	// A candidate below: waited for, from the listing's revision.
	// (A key below that went, or was made anew, between the listing and
	// the read: listed again.)
	cand := &mvccpb.KeyValue{Key: []byte(k.electionKey(0x10)), Lease: 0x10, CreateRevision: 8, ModRevision: 8}
	expectTxn("list again")
	c.replied(rangeResp(33, &mvccpb.KeyValue{Key: cand.Key, CreateRevision: 7, ModRevision: 7}), nil, now)
	expectTxn("read the key below")
	c.replied(rangeResp(33, cand), nil, now)
	if txn := expectTxn("list after the key was made anew"); txn.Success[0].GetRequestRange().MaxCreateRevision != 29 {
		t.Fatalf("lists below %d", txn.Success[0].GetRequestRange().MaxCreateRevision)
	}
	peek(33, 34, cand)
	if txn, key, after, _ := c.next(now); txn != nil || key != string(cand.Key) || after != 34 {
		t.Fatalf("waits for %q after %d", key, after)
	}
	// The watch fails: start again after a backoff.
	c.changed(errors.New("watch broke"), now)
	if txn, _, _, wait := c.next(now); txn != nil || !wait.After(now) {
		t.Fatal("a failure is retried at once")
	}
	now = now.Add(10 * time.Second)
	expectTxn("write again")
	c.replied(&etcdserverpb.TxnResponse{Header: hdr(40), Responses: []*etcdserverpb.ResponseOp{
		{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: []*mvccpb.KeyValue{{CreateRevision: 30}}}}}}}, nil, now)
	expectTxn("list after the retry")
	if won := c.replied(rangeResp(41), nil, now); won == nil || won.rev != 30 || won.key != k.electionKey(0x20) {
		t.Fatalf("won %+v", won)
	}
}
