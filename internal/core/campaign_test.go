package core

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// TestCampaignerSteps drives the election recipe's state machine alone:
// our key is written, a stray below it is deleted, a candidate below it
// is waited for, a failure starts again after a backoff, and the election
// is won once nothing is below.
func TestCampaignerSteps(t *testing.T) {
	k := wire.NewKeys("r")
	inc := &Inc{Lease: 0x20, CreateRev: 5}
	c := NewCampaigner(k, "m", inc, zap.NewNop(), NewBackoff(rand.New(rand.NewPCG(1, 2))))
	now := time.Unix(100, 0)
	hdr := func(rev int64) *etcdserverpb.ResponseHeader { return &etcdserverpb.ResponseHeader{Revision: rev} }
	rangeResp := func(rev int64, kvs ...*mvccpb.KeyValue) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(rev), Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}}}
	}
	expectTxn := func(what string) *etcdserverpb.TxnRequest {
		t.Helper()
		txn, key, _, _ := c.Next(now)
		if txn == nil || key != "" {
			t.Fatalf("%s: no transaction (watch %q)", what, key)
		}
		return txn
	}

	if txn := expectTxn("write"); string(txn.Success[0].GetRequestPut().Key) != k.ElectionKey(0x20) {
		t.Fatalf("writes %s", txn.Success[0].GetRequestPut().Key)
	}
	c.Replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(30)}, nil, now)
	if txn := expectTxn("list"); txn.Success[0].GetRequestRange().MaxCreateRevision != 29 || !txn.Success[0].GetRequestRange().KeysOnly {
		t.Fatalf("lists below %d (keys alone: %v)", txn.Success[0].GetRequestRange().MaxCreateRevision, txn.Success[0].GetRequestRange().KeysOnly)
	}
	// peek answers the listing with keys alone (etcd's index says no
	// lease), and the read of the key below with kv.
	peek := func(listRev, readRev int64, kv *mvccpb.KeyValue) {
		t.Helper()
		c.Replied(rangeResp(listRev, &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}), nil, now)
		if txn := expectTxn("read the key below"); string(txn.Success[0].GetRequestRange().Key) != string(kv.Key) || len(txn.Success[0].GetRequestRange().RangeEnd) != 0 {
			t.Fatalf("reads %v", txn)
		}
		c.Replied(rangeResp(readRev, kv), nil, now)
	}
	// A stray below (no lease): deleted, guarded by its revision.
	stray := &mvccpb.KeyValue{Key: []byte(k.Election() + "zz"), CreateRevision: 9, ModRevision: 9}
	peek(31, 31, stray)
	if txn := expectTxn("delete"); string(txn.Success[0].GetRequestDeleteRange().Key) != string(stray.Key) || txn.Compare[0].GetModRevision() != 9 {
		t.Fatalf("deletes %v", txn)
	}
	c.Replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(32)}, nil, now)
	// A candidate below: waited for, from the listing's revision.
	// (A key below that went, or was made anew, between the listing and
	// the read: listed again.)
	cand := &mvccpb.KeyValue{Key: []byte(k.ElectionKey(0x10)), Lease: 0x10, CreateRevision: 8, ModRevision: 8}
	expectTxn("list again")
	c.Replied(rangeResp(33, &mvccpb.KeyValue{Key: cand.Key, CreateRevision: 7, ModRevision: 7}), nil, now)
	expectTxn("read the key below")
	c.Replied(rangeResp(33, cand), nil, now)
	if txn := expectTxn("list after the key was made anew"); txn.Success[0].GetRequestRange().MaxCreateRevision != 29 {
		t.Fatalf("lists below %d", txn.Success[0].GetRequestRange().MaxCreateRevision)
	}
	peek(33, 34, cand)
	if txn, key, after, _ := c.Next(now); txn != nil || key != string(cand.Key) || after != 34 {
		t.Fatalf("waits for %q after %d", key, after)
	}
	// The watch fails: start again after a backoff.
	c.Changed(errors.New("watch broke"), now)
	if txn, _, _, wait := c.Next(now); txn != nil || !wait.After(now) {
		t.Fatal("a failure is retried at once")
	}
	now = now.Add(10 * time.Second)
	expectTxn("write again")
	c.Replied(&etcdserverpb.TxnResponse{Header: hdr(40), Responses: []*etcdserverpb.ResponseOp{
		{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: []*mvccpb.KeyValue{{CreateRevision: 30}}}}}}}, nil, now)
	expectTxn("list after the retry")
	if won := c.Replied(rangeResp(41), nil, now); won == nil || won.Rev != 30 || won.Key != k.ElectionKey(0x20) {
		t.Fatalf("won %+v", won)
	}
}

// A newcomer's join reads the newest candidacy before its own (the key
// named in .tail, and the revision that named it), and its campaign waits
// for that key rather than list every election key to find the one just
// below its own: at 10,000 members each such listing read 10,000 keys in
// etcd, and building the rink made one per member. A hint that no longer
// holds (the key gone, or made anew) falls back to the listing.
func TestCampaignerFollowsTheHint(t *testing.T) {
	k := wire.NewKeys("r")
	hdr := func(rev int64) *etcdserverpb.ResponseHeader { return &etcdserverpb.ResponseHeader{Revision: rev} }
	get := func(rev int64, kvs ...*mvccpb.KeyValue) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(rev), Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}}}
	}
	now := time.Unix(100, 0)
	below := &mvccpb.KeyValue{Key: []byte(k.ElectionKey(0x10)), Lease: 0x10, CreateRevision: 20, ModRevision: 20}
	for _, c := range []struct {
		name  string
		hint  CandidacyHint
		read  *mvccpb.KeyValue // the hinted key as read (nil: gone)
		peeks bool             // reads the hinted key rather than list
		waits bool             // and waits for it
	}{
		{"the key below", CandidacyHint{Key: string(below.Key), Rev: 20}, below, true, true},
		{"no hint", CandidacyHint{}, nil, false, false},
		{"gone", CandidacyHint{Key: string(below.Key), Rev: 20}, nil, true, false},
		{"made anew", CandidacyHint{Key: string(below.Key), Rev: 19}, below, true, false},
		{"above ours", CandidacyHint{Key: string(below.Key), Rev: 40}, nil, false, false},
		{"our own", CandidacyHint{Key: k.ElectionKey(0x20), Rev: 20}, nil, false, false},
		{"not an election key", CandidacyHint{Key: "r/members/x", Rev: 20}, nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			inc := &Inc{Lease: 0x20, CreateRev: 30, Hint: c.hint}
			cp := NewCampaigner(k, "m", inc, zap.NewNop(), NewBackoff(rand.New(rand.NewPCG(1, 2))))
			cp.Next(now)
			cp.Replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: hdr(30)}, nil, now)
			isList := func(txn *etcdserverpb.TxnRequest) bool {
				return txn != nil && txn.Success[0].GetRequestRange().GetSortTarget() == etcdserverpb.RangeRequest_CREATE
			}
			txn, _, _, _ := cp.Next(now)
			if !c.peeks {
				if !isList(txn) {
					t.Fatalf("does not list: %v", txn)
				}
				return
			}
			if isList(txn) || string(txn.Success[0].GetRequestRange().Key) != c.hint.Key {
				t.Fatalf("%v, want a read of the hinted key", txn)
			}
			if c.read == nil {
				cp.Replied(get(31), nil, now)
			} else {
				cp.Replied(get(31, c.read), nil, now)
			}
			txn, key, after, _ := cp.Next(now)
			if c.waits {
				if txn != nil || key != string(below.Key) || after != 31 {
					t.Fatalf("waits for %q after %d", key, after)
				}
				return
			}
			if !isList(txn) {
				t.Fatalf("does not list after a hint that failed: %v", txn)
			}
		})
	}
}
