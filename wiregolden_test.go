package rink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/rink-go/rink/internal/core"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// updateWire rewrites testdata/wire/*.golden (go test -run TestWireGolden -wire.update .).
var updateWire = flag.Bool("wire.update", false, "rewrite testdata/wire/*.golden from what the code writes now")

// TestWireGolden pins the bytes rink writes to etcd: every encoding, and
// every transaction the core builds, on fixed inputs (no clock, no
// randomness, no etcd), against testdata/wire/<case>.golden. The code
// moves between packages (plan of issue 43); these files must not change.
//
// An encoding's file holds its exact bytes. A transaction's holds its
// comparisons and requests, one a line (every field set, and a
// comparison's result and target), then whether the transaction the
// client sends (captured by a KV client that answers every transaction
// itself) is the one built ("sent as built", or "sent differs:" and the
// one sent), then the sha256 of the built one's deterministic proto
// bytes. Transactions built inline with the client (deleteStray,
// rewriteMemberKey, dropLineage, writeLoad) are the ones sent.
func TestWireGolden(t *testing.T) {
	cases := wireCases(t)
	again := wireCases(t) // (a second build: the bytes depend on nothing but the inputs)
	dir := filepath.Join("testdata", "wire")
	if *updateWire {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	for i, c := range cases {
		if names[c.name] {
			t.Fatalf("case %s twice", c.name)
		}
		names[c.name] = true
		if again[i].name != c.name || !bytes.Equal(again[i].got, c.got) {
			t.Errorf("%s: two builds differ:\n%s\n%s", c.name, c.got, again[i].got)
			continue
		}
		path := filepath.Join(dir, c.name+".golden")
		if *updateWire {
			if err := os.WriteFile(path, c.got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run with -wire.update to write it)", c.name, err)
			continue
		}
		if !bytes.Equal(c.got, want) {
			t.Errorf("%s: the bytes written to etcd changed (%s)\n got: %s\nwant: %s", c.name, path, c.got, want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.golden"))
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); !names[name] {
			if *updateWire {
				_ = os.Remove(f)
				continue
			}
			t.Errorf("%s: no case writes it any more", f)
		}
	}
}

type wireCase struct {
	name string
	got  []byte
}

// wireSince is the waiting members' time: fixed, in UTC, with nanoseconds.
var wireSince = time.Date(2026, 3, 4, 5, 6, 7, 890000001, time.UTC)

// wireMap3 is a map of protocol 3 as most rinks have it: one replica.
func wireMap3() wire.Map {
	return wire.Map{Schema: wire.SchemaVersion, Version: 7, Slots: 4, Leader: "a", Members: wire.MemberList{"a", "b"}, Table: wire.SlotTable{0, 1, 0, 1}}
}

// wireMapFull sets every field of a map, with two replicas per slot.
func wireMapFull() wire.Map {
	return wire.Map{Schema: wire.SchemaReplicas, Version: 42, Slots: 4, Leader: "a", Members: wire.MemberList{"a", "b", "c"},
		Waiting: []wire.Waiter{{Name: "w1", Since: wireSince}}, Table: wire.SlotTable{0, 1, 2, 0, 1, 2, 0, 1}, Replicas: 2, ByLoad: true,
		Incoming: map[string][]int{"c": {0, 3}, "b": {2}}, Leave: []string{"a"}, Leases: []int64{0x11, 0x22, 0}}
}

// wireFloor sets every field of a floor.
func wireFloor() *wire.AckFloor {
	return &wire.AckFloor{Lineage: 5, Version: 9, Floor: 7, Complete: true, Lagging: map[string]int64{"c": 0, "b": 7},
		Seq: 12, SeqFloor: 10, SeqComplete: true, SeqLagging: map[string]int64{"b": 10},
		Rest: 9, Round: true, Imbalance: 1.25, Tolerance: 0.1, Still: true, Base: 3,
		Ghosts: 2, Covered: []int64{0x44, 0x55}, Leader: "a"}
}

// wireLoad sets every field of a load summary, with a rate below 0, one
// above maxRate, and one of more than 4 significant digits.
func wireLoad() wire.LoadReport {
	return wire.LoadReport{Slots: []wire.SlotLoad{{Slot: 0, Rate: 12.3456789, Age: 5.5, Roles: 3}, {Slot: 2, Rate: -1, Age: 0.1}, {Slot: 3, Rate: 1e20, Age: 120, Roles: 1}},
		Await: []wire.SlotRoles{{Slot: 1, Roles: 2}, {Slot: 3}}, Unmeasured: true}
}

func wireCases(t *testing.T) []wireCase {
	var out []wireCase
	enc := func(name string, b []byte) { out = append(out, wireCase{name, slices.Clone(b)}) }
	txn := func(name string, built, sent *etcdserverpb.TxnRequest) {
		t.Helper()
		if built == nil || sent == nil {
			t.Fatalf("%s: no transaction", name)
		}
		out = append(out, wireCase{name, renderTxn(t, built, sent)})
	}

	// Encodings.
	enc("map-full", wireMapFull().Encode())
	enc("map-schema3", wireMap3().Encode())
	leader, size, byLoad := "b", 3, true
	incoming, leave, waiting := map[string][]int{"c": {1}}, []string{"a"}, []wire.Waiter{{Name: "w2", Since: wireSince}}
	rec := wire.Record{Schema: wire.SchemaVersion, Change: true, Version: 43, Leader: &leader, Size: &size, Names: map[string]string{"2": "c", "0": "a"},
		Moves: []int{1, 2, 3, 2}, Waiting: &waiting, Unwait: []string{"w1"}, Wait: []wire.Waiter{{Name: "w3", Since: wireSince}},
		ByLoad: &byLoad, Incoming: &incoming, Leave: &leave, Leases: map[string]int64{"c": 0x33, "a": 0x11}, Leased: true,
		Transition: wire.Transition{View: 100, From: 42, Gone: []string{"old"}, Incs: map[string]int64{"b": 77}, ByLeader: true, Quiet: true}}
	enc("change", rec.Encode())
	enc("transition", wire.WithTransition(wireMap3().Encode(),
		wire.Transition{View: 100, From: 6, Gone: []string{"old", "older"}, Incs: map[string]int64{"b": 77, "a": 5}, ByLeader: true, Quiet: true}))
	fl, err := json.Marshal(wireFloor()) // (as fold writes it)
	if err != nil {
		t.Fatal(err)
	}
	enc("floor", fl)
	enc("load-report", wireLoad().Encode())
	enc("member-value-default", []byte(wire.MemberValue(1)))
	enc("member-value-full", []byte(wire.MemberValueOf(2.5, "eu-west", true, 3)))

	// The core's transactions.
	kv := &captureKV{}
	r := &Rink{cli: &clientv3.Client{KV: clientv3.NewKVFromKVClient(kv, nil)}, log: zap.NewNop(), keys: newKeys("orders"),
		opts: options{member: "m1", slots: 4, replicas: 1, capacity: 2.5, zone: "eu-west", ttl: 2 * time.Second, loadEvery: time.Second}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer r.cancel()
	inc := &incarnation{Inc: core.Inc{Lease: 0x1a, CreateRev: 9, BoundRev: 9}}
	inc.ctx, inc.cancel = context.WithCancelCause(r.ctx)
	inc.Done, inc.Owner = inc.ctx.Done(), inc
	k := r.keys
	send := func(built *etcdserverpb.TxnRequest) *etcdserverpb.TxnRequest {
		t.Helper()
		if _, err := execTxn(r.ctx, r.cli, built); err != nil {
			t.Fatal(err)
		}
		return kv.last(t)
	}
	coreTxn := func(name string, built *etcdserverpb.TxnRequest) { t.Helper(); txn(name, built, send(built)) }

	join, _ := r.joinTxn(0x1a)
	coreTxn("txn-join", join)
	coreTxn("txn-resume", r.resumeTxn(&core.Inc{Lease: 0x10, CreateRev: 5}, 0x1b))

	l := &leadership{key: k.ElectionKey(0xa), rev: 3}
	m3 := wireMap3()
	coreTxn("txn-proclaim-first", r.proclaimTxn(l, &wire.Map{}, &m3, 0, wire.Transition{View: 100, Incs: map[string]int64{"b": 77}, ByLeader: true, Quiet: true}))
	big := wire.Map{Schema: wire.SchemaVersion, Version: 20, Slots: 16, Leader: "a", Members: wire.MemberList{"a", "b", "c", "d", "e", "f"},
		Table: wire.SlotTable{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3}, Leases: []int64{1, 2, 3, 4, 5, 6}}
	moved := big
	moved.Version, moved.Members, moved.Leases = 21, wire.MemberList{"a", "b", "c", "g", "e", "f"}, []int64{1, 2, 3, 7, 5, 6}
	moved.Table = slices.Clone(big.Table)
	moved.Table[15], moved.Waiting = 0, []wire.Waiter{{Name: "w1", Since: wireSince}}
	coreTxn("txn-proclaim-record", r.proclaimTxn(l, &big, &moved, 50, wire.Transition{View: 120, Gone: []string{"d"}, ByLeader: true}))
	shrunk := m3 // (a record no smaller than the map: the whole map alone, with the transition)
	shrunk.Version, shrunk.Leader, shrunk.Members, shrunk.Table = 8, "c", wire.MemberList{"c"}, wire.SlotTable{0, 0, 0, 0}
	whole := r.proclaimTxn(l, &m3, &shrunk, 50, wire.Transition{View: 121, Gone: []string{"a", "b"}, ByLeader: true})
	if len(whole.Success) != 1 {
		t.Fatalf("the shrinking map was written as a record")
	}
	coreTxn("txn-proclaim-whole", whole)
	two := m3
	two.Schema = 2
	coreTxn("txn-proclaim-schema2", r.proclaimTxn(l, &wire.Map{}, &two, 0, wire.Transition{View: 100}))

	d := &handOver{r: r, cur: wire.Map{Schema: wire.SchemaVersion, Version: 7, Slots: 4, Leader: "a", Members: wire.MemberList{"a", "m1", "c"},
		Waiting: []wire.Waiter{{Name: "w", Since: wireSince}}, Table: wire.SlotTable{0, 1, 2, 1}, Leases: []int64{0x11, 0x1a, 0x33}},
		members: map[string]memberInfo{
			"a":  {createRev: 2, lease: 0x11, protocols: []int{2, 3}},
			"m1": {createRev: 9, lease: 0x1a, protocols: []int{2, 3}, capacity: 2.5, zone: "eu-west"},
			"c":  {createRev: 12, lease: 0x33, protocols: []int{2, 3}},
			"w":  {createRev: 20, lease: 0x44, protocols: []int{2, 3}},
		},
		curRev: 50, curSeq: 7, viewRev: 120, version: 8, leases: map[string]int64{"a": 0x11, "m1": 0x1a, "c": 0x33}, leased: true,
		narrow: true, lineage: 40, createRev: 9, lease: 0x1a}
	coreTxn("txn-handover-list", d.listTxn())
	hand, ok := d.next()
	if !ok {
		t.Fatal("the departure planned no transaction")
	}
	coreTxn("txn-handover", hand)

	aw := core.NewAckWriter(k, "m1", zap.NewNop(), newBackoff())
	aw.Take(core.AckReq{Inc: &inc.Inc, Lineage: 5, Version: 9, Seq: 12, Warm: 8})
	first, _ := aw.Next(time.Unix(100, 0))
	enc("ack-value", first.Success[0].GetRequestPut().Value)
	coreTxn("txn-ack-first", first)
	aw.Replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: 70}}, nil, time.Unix(100, 0))
	aw.Take(core.AckReq{Inc: &inc.Inc, Lineage: 5, Version: 10, Seq: 13})
	second, _ := aw.Next(time.Unix(101, 0))
	coreTxn("txn-ack-next", second)

	fw := core.NewFloorWriter(k, k.ElectionKey(0xa), 3, zap.NewNop(), newBackoff())
	fw.Take(fl)
	floorTxn, _ := fw.Next(time.Unix(100, 0))
	coreTxn("txn-floor", floorTxn)
	fw.Replied(&etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: 61}}, nil, time.Unix(100, 0))
	fw.Take(fl)
	floorTxn, _ = fw.Next(time.Unix(100, 0))
	coreTxn("txn-floor-again", floorTxn)

	// The campaign, stage by stage: write, list, read the key below, and
	// delete it (a stray: no lease).
	cp := core.NewCampaigner(k, "m1", &inc.Inc, zap.NewNop(), newBackoff())
	step := func(name string, resp *etcdserverpb.TxnResponse) {
		t.Helper()
		c, _, _, _ := cp.Next(time.Unix(100, 0))
		coreTxn(name, c)
		if resp != nil && cp.Replied(resp, nil, time.Unix(100, 0)) != nil {
			t.Fatalf("%s: elected", name)
		}
	}
	ranged := func(kvs ...*mvccpb.KeyValue) *etcdserverpb.TxnResponse {
		return &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: 31}, Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}}}
	}
	stray := &mvccpb.KeyValue{Key: []byte(k.Election() + "zz"), CreateRevision: 20, ModRevision: 21}
	step("txn-campaign-write", &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: 30}})
	step("txn-campaign-list", ranged(&mvccpb.KeyValue{Key: stray.Key, CreateRevision: 20}))
	step("txn-campaign-peek", ranged(stray))
	step("txn-campaign-delete", nil)

	// Transactions built with the client where they are sent.
	inline := func(name string, do func()) {
		t.Helper()
		do()
		r.wg.Wait()
		sent := kv.last(t)
		txn(name, sent, sent)
	}
	inline("txn-delete-stray", func() { r.fx().deleteStray(inc, k.ElectionKey(0x99), 44) })
	inline("txn-rewrite-member-key", func() { r.rewriteMemberKey(inc, r.ownMemberValue(false), "test") })
	inline("txn-drop-lineage", func() { r.dropLineage(61) })
	inline("txn-write-load", func() {
		if !r.writeLoad(inc, wireLoad()) {
			t.Error("writeLoad failed")
		}
	})
	return out
}

// captureKV is a KV client that keeps every transaction sent through it,
// and answers each with success.
type captureKV struct {
	etcdserverpb.KVClient // (nil: only Txn is called)
	mu                    sync.Mutex
	txns                  []*etcdserverpb.TxnRequest
}

func (c *captureKV) Txn(_ context.Context, in *etcdserverpb.TxnRequest, _ ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.txns = append(c.txns, proto.Clone(in).(*etcdserverpb.TxnRequest))
	return &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: 1000}}, nil
}

// last returns the one transaction sent since last was last called.
func (c *captureKV) last(t *testing.T) *etcdserverpb.TxnRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.txns) != 1 {
		t.Fatalf("%d transactions sent, want 1", len(c.txns))
	}
	txn := c.txns[0]
	c.txns = nil
	return txn
}

// renderTxn renders built (see TestWireGolden), and sent if it differs.
func renderTxn(t *testing.T, built, sent *etcdserverpb.TxnRequest) []byte {
	var b strings.Builder
	lines := func(prefix string, txn *etcdserverpb.TxnRequest) {
		for i, c := range txn.Compare {
			fmt.Fprintf(&b, "%scompare[%d] %s\n", prefix, i, fieldsOf(c.ProtoReflect(), "result", "target"))
		}
		for i, op := range txn.Success {
			fmt.Fprintf(&b, "%ssuccess[%d] %s\n", prefix, i, fieldsOf(op.ProtoReflect()))
		}
		for i, op := range txn.Failure {
			fmt.Fprintf(&b, "%sfailure[%d] %s\n", prefix, i, fieldsOf(op.ProtoReflect()))
		}
	}
	lines("", built)
	if proto.Equal(built, sent) {
		b.WriteString("sent as built\n")
	} else {
		b.WriteString("sent differs:\n")
		lines("sent ", sent)
		fmt.Fprintf(&b, "sent sha256 %s\n", txnSum(t, sent))
	}
	fmt.Fprintf(&b, "sha256 %s\n", txnSum(t, built))
	return []byte(b.String())
}

// txnSum is the sha256 of txn's deterministic proto bytes.
func txnSum(t *testing.T, txn *etcdserverpb.TxnRequest) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fieldsOf renders m's fields that are set, and those named in always, in
// the order the proto declares them: name=value, space-separated; bytes
// and strings quoted, enums by name, messages in braces.
func fieldsOf(m protoreflect.Message, always ...protoreflect.Name) string {
	var parts []string
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if !m.Has(fd) && !slices.Contains(always, fd.Name()) {
			continue
		}
		v := m.Get(fd)
		s := ""
		switch {
		case fd.IsList():
			var elems []string
			for j := 0; j < v.List().Len(); j++ {
				elems = append(elems, scalarOf(fd, v.List().Get(j)))
			}
			s = "[" + strings.Join(elems, " ") + "]"
		case fd.IsMap():
			s = "map" // (no request of rink's has one; the sha256 covers it)
		default:
			s = scalarOf(fd, v)
		}
		parts = append(parts, string(fd.Name())+"="+s)
	}
	return strings.Join(parts, " ")
}

func scalarOf(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.BytesKind:
		return strconv.Quote(string(v.Bytes()))
	case protoreflect.StringKind:
		return strconv.Quote(v.String())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "{" + fieldsOf(v.Message()) + "}"
	}
	return v.String()
}
