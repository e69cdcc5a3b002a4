package rink

import (
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// departing is member a of a rink of a and b, at map v2 (seq 2, put at
// revision 12 in the lineage of revision 10), about to leave.
func departing(t *testing.T) (*bare, *handOver) {
	const L = 10
	b := newBare(t, "a", 2, 5)
	b.put(memberKV("a", 5, 5, 0, 0), memberKV("b", 6, 6, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"a", "b"}, 0, 1), L, L))
	b.put(mapKV(twoSlots(2, []string{"a", "b"}, 0, 1), L, 12))
	d, ok := b.r.newHandOver()
	if !ok {
		t.Fatal("a has nothing to hand over")
	}
	return b, d
}

// A hand-over whose listing shows the map key gone back to v1 (etcd was
// restored from a snapshot) gives up, and tells its caller to leave the
// member key to expire rather than revoke the lease: the restored key is
// what keeps the slots the restored map gives a from others, while a
// member that took them after the snapshot may still act on them unseen
// (rink-sim seed 358 with -kinds restore-unseen,crash,join,leave,partition).
func TestHandOverSeesEtcdGoBack(t *testing.T) {
	_, d := departing(t)
	k := newKeys("bare")
	member := func(name string, rev int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(k.Member(name)), Value: []byte(wire.MemberValue(1)), CreateRevision: rev, ModRevision: rev, Lease: rev}
	}
	rng := func(kvs ...*mvccpb.KeyValue) *etcdserverpb.ResponseOp {
		return &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}
	}
	resp := &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: 1_000_012}, Responses: []*etcdserverpb.ResponseOp{
		rng(member("a", 5), member("b", 6)), rng(mapKV(twoSlots(1, []string{"a", "b"}, 0, 1), 10, 10)), rng(),
	}}
	if d.relisted(resp) {
		t.Fatal("the hand-over goes on over a map older than the one applied")
	}
	if !d.keep {
		t.Fatal("etcd went back, and the caller would revoke the lease")
	}
}

// A hand-over from an incarnation fenced meanwhile (a process stopped past
// its deadline, told to leave, resumed) sends nothing, and the member key
// is left to expire: after a restore its key and lease may be back, and
// its restored slots another member's (rink-sim seed 886 on da1e50b).
func TestHandOverFromFencedIncarnationSendsNothing(t *testing.T) {
	b, d := departing(t)
	b.r.fence(b.r.st.inc, ErrFenced)
	if txn, ok := d.next(); ok || txn != nil {
		t.Fatal("a fenced incarnation hands its slots over")
	}
	if !d.keep {
		t.Fatal("fenced, and the caller would revoke the lease")
	}
}
