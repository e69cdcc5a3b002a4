package rink

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The aggregator folds the batches that piled up as one (see maxMerged):
// the merged batch must say what the batches said, in order.
func TestWatchBatchThen(t *testing.T) {
	ev := func(key string, rev int64) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
	}
	keys := func(b watchBatch) (out []string) {
		for _, e := range b.events {
			out = append(out, string(e.Kv.Key))
		}
		return out
	}
	first := make([]*clientv3.Event, 1, 4) // (room to spare: then must not write into it)
	first[0] = ev("a", 5)
	spare := first[:2]
	b := watchBatch{events: first, rev: 5}.then(watchBatch{events: []*clientv3.Event{ev("b", 6), ev("c", 6)}, rev: 6})
	if got := keys(b); len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" || b.rev != 6 || b.snapshot {
		t.Fatalf("merged %v at %d (snapshot %v), want [a b c] at 6", got, b.rev, b.snapshot)
	}
	if spare[1] != nil {
		t.Fatal("then wrote into the first batch's slice")
	}
	// A listing replaces what came before it; events after it follow it.
	snap := watchBatch{snapshot: true, kvs: []*mvccpb.KeyValue{{Key: []byte("x")}}, rev: 9}
	b = b.then(snap).then(watchBatch{events: []*clientv3.Event{ev("d", 10)}, rev: 10})
	if got := keys(b); !b.snapshot || len(b.kvs) != 1 || len(got) != 1 || got[0] != "d" || b.rev != 10 {
		t.Fatalf("after a listing: snapshot %v, %d kvs, events %v at %d; want the listing and [d] at 10", b.snapshot, len(b.kvs), got, b.rev)
	}
}
