package rink

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An operator (or a script restoring keys) writes back a floor value the
// aggregator asked for a moment ago, after the newer one has landed. Taken
// for the aggregator's own write landing late, the stale floor stayed in
// the key until the computed floor changed: in a rink at rest, forever
// (members kept lower bounds, Settled stayed false). Found in review.
func TestFloorWrittenBackByOperatorHeals(t *testing.T) {
	s := newFloorSteps(t)
	r := &Rink{keys: s.k, inbox: newInbox()}
	kv := func(key string, value []byte, rev int64) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: value, ModRevision: rev, CreateRevision: rev, Version: 1}}
	}
	m := rankMap{Members: []string{"a", "b"}, Table: slotTable{0, 1}, Version: 1, Slots: 2, Schema: schemaVersion}
	ack := func(seq int64) []byte { v, _ := json.Marshal(ackValue{Ack: seq, Lineage: 10, Seq: seq}); return v }
	fold := func(evs ...*clientv3.Event) []byte {
		r.fold(s.a, watchBatch{events: evs})
		select {
		case v := <-s.a.reqs:
			return v
		default:
			return nil
		}
	}
	mapKV := &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(s.k.rankMap()), Value: m.encode(), CreateRevision: 10, ModRevision: 10, Version: 1}}
	mem := func(name string, lease, rev int64) *clientv3.Event {
		e := kv(s.k.member(name), []byte(memberValue(1)), rev)
		e.Kv.Lease = lease
		return e
	}
	ackKV := func(name string, lease, seq, rev int64) *clientv3.Event {
		e := kv(s.k.ack(name), ack(seq), rev)
		e.Kv.Lease = lease
		return e
	}
	first := fold(mem("a", 1, 8), mem("b", 2, 9), mapKV, ackKV("a", 1, 1, 11))
	second := fold(ackKV("b", 2, 1, 12))
	if first == nil || second == nil {
		t.Fatal("floors not asked for")
	}
	// Both land, in order.
	fold(kv(s.k.floor(), first, 13))
	if again := fold(kv(s.k.floor(), second, 14)); again != nil {
		t.Fatalf("asked again after our own write: %s", again)
	}
	// An operator puts the older value back.
	again := fold(kv(s.k.floor(), first, 15))
	// A later event that changes nothing the floor says (b rewrites its ack).
	if again == nil {
		again = fold(ackKV("b", 2, 1, 16))
	}
	if !bytes.Equal(again, second) {
		t.Fatalf("the floor key holds an older floor written by somebody else, and the aggregator asks for nothing (got %q): it stays stale", again)
	}
}
