package rink

import (
	"encoding/json"
	"github.com/rink-go/rink/internal/core"
	"reflect"
	"slices"
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The floor of a leader that says Still counts members whose slots no map
// since their acknowledgement changed as having acknowledged the newest
// map, in seqs and in versions; the others keep their own.
func TestFloorStill(t *testing.T) {
	k := newKeys("bare")
	v := &core.AckView{Members: map[string]core.AckMember{}, Acks: map[string]core.AckKey{}, Ranked: map[string]bool{}}
	member := func(name string, lease, createRev int64) {
		v.Put(k, &mvccpb.KeyValue{Key: []byte(k.Member(name)), Value: []byte(wire.MemberValue(1)), Lease: lease, CreateRevision: createRev, ModRevision: createRev}, false)
	}
	ack := func(name string, lease, seq int64) {
		val, _ := json.Marshal(wire.AckValue{Ack: seq, Lineage: 10, Seq: seq})
		v.Put(k, &mvccpb.KeyValue{Key: []byte(k.Ack(name)), Value: val, Lease: lease}, false)
	}
	mapAt := func(seq, rev int64, m wire.Map) {
		m.Version, m.Slots, m.Schema = seq, len(m.Table), wire.SchemaVersion
		v.Put(k, &mvccpb.KeyValue{Key: []byte(k.Map()), Value: m.Encode(), CreateRevision: 10, ModRevision: rev, Version: seq}, false)
	}
	member("a", 1, 11)
	member("b", 2, 12)
	member("c", 3, 13)
	mapAt(1, 14, wire.Map{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2}})
	ack("a", 1, 1)
	ack("b", 2, 1)
	ack("c", 3, 1)
	mapAt(2, 20, wire.Map{Members: []string{"a", "b", "c"}, Table: wire.SlotTable{0, 1, 2}, Waiting: []wire.Waiter{{Name: "n"}}})
	member("n", 4, 19)
	f := v.Compute()
	// (n's acknowledgement is unknown: its bound, the map current when
	// it joined, rises to seq 2 and counts, in seqs and versions, as n is
	// not ranked: a join alone changes no floor.)
	if !f.Still || f.Base != 1 || f.SeqFloor != 2 || f.Floor != 2 || len(f.SeqLagging) != 0 || len(f.Lagging) != 0 {
		t.Fatalf("a map that moves nothing: %+v, want everyone at seq and version 2", f)
	}
	mapAt(3, 30, wire.Map{Members: []string{"a", "b", "c", "n"}, Table: wire.SlotTable{0, 3, 2}}) // b -> n
	f = v.Compute()
	// b acknowledged 1 and n joined while map 1 was current: both are
	// raised to 2, the map before the change. (n, ranked now and its
	// acknowledgement unknown, holds the seq floor at 0.)
	want := map[string]int64{"b": 2, "n": 2}
	if f.SeqFloor != 0 || !reflect.DeepEqual(f.SeqLagging, want) || !reflect.DeepEqual(f.Lagging, map[string]int64{"b": 1, "n": 0}) {
		t.Fatalf("b's slot moves to n: %+v, want seq lagging %v", f, want)
	}
	ack("b", 2, 3)
	ack("n", 4, 3)
	if f = v.Compute(); f.SeqFloor != 3 || f.Floor != 3 || len(f.SeqLagging) != 0 {
		t.Fatalf("b and n acknowledged: %+v", f)
	}
	// A listing: nothing is known of the changes before it.
	v.Put(k, &mvccpb.KeyValue{Key: []byte(k.Map()), Value: (&wire.Map{Schema: wire.SchemaVersion, Version: 3, Slots: 3, Members: []string{"a", "b", "c", "n"}, Table: wire.SlotTable{0, 3, 2}}).Encode(), CreateRevision: 10, ModRevision: 30, Version: 3}, true)
	if f = v.Compute(); f.Base != 3 || !reflect.DeepEqual(f.SeqLagging, map[string]int64{"a": 1, "c": 1}) {
		t.Fatalf("after a listing: %+v, want a and c lagging at 1", f)
	}
	if !slices.Contains([]int64{3}, f.Seq) {
		t.Fatal(f.Seq)
	}
}
