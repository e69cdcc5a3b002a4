package rink

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/rink-go/rink/internal/core"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A member of this build in a rink whose leader is of an earlier build
// (one that records no leases: a mixed-version roll) starts its slots.
// The leader's records say nothing of leases; a member that had applied a
// whole map of a leader that records them kept waiting for its own lease
// to be recorded, which the earlier leader never does, and held none of
// the slots the map gave it (TestMixedVersionUpgrade, now and then:
// "role partition:4: owner c3, newest holder b4", c3 acknowledged and at
// rest, holding nothing).
func TestLeaseGateUnderALeaderThatRecordsNoLeases(t *testing.T) {
	r := &Rink{opts: options{member: "c"}}
	r.st.inc = &incarnation{Inc: core.Inc{Lease: 7}}
	// A whole map of a leader that records leases, c waiting.
	r.st.selfIdx = -1
	r.keepOwnLease(&wire.Map{Members: []string{"a"}, Leases: []int64{5}}, nil)
	// A leader of this build ranks c: its record names c's lease.
	next := wire.Map{Members: []string{"a", "c"}, Leases: []int64{5, 7}}
	rec := wire.Diff(&wire.Map{Members: []string{"a"}, Leases: []int64{5}}, &next)
	r.st.selfIdx = 1
	r.keepOwnLease(&wire.Map{Members: next.Members}, decoded(t, rec))
	if !r.leaseGate() {
		t.Fatal("a record that records c's lease leaves c gated")
	}
	// One that ranks c with another lease keeps c gated (issue 42).
	r.st.selfIdx = -1
	r.keepOwnLease(&wire.Map{Members: []string{"a"}, Leases: []int64{5}}, nil)
	next.Leases[1] = 6
	rec = wire.Diff(&wire.Map{Members: []string{"a"}, Leases: []int64{5}}, &next)
	r.st.selfIdx = 1
	r.keepOwnLease(&wire.Map{Members: next.Members}, decoded(t, rec))
	if r.leaseGate() {
		t.Fatal("a record that records another lease for c lets c start slots")
	}
	// A leader of an earlier build ranks c: its record says nothing of
	// leases (encoded as that build does: no lease field at all).
	r.st.selfIdx = -1
	r.keepOwnLease(&wire.Map{Members: []string{"a"}, Leases: []int64{5}}, nil)
	old := wire.Diff(&wire.Map{Members: []string{"a"}}, &wire.Map{Members: []string{"a", "c"}})
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if json.Valid(b) && string(b) != "" && containsField(b, "leases") {
		t.Fatalf("the earlier build's record %s names leases", b)
	}
	r.st.selfIdx = 1
	r.keepOwnLease(&wire.Map{Members: []string{"a", "c"}}, decoded(t, old))
	if !r.leaseGate() {
		t.Fatal("under a leader that records no leases, c starts nothing")
	}
	// A leader of this build follows, and records another lease for c
	// (its view is older than c's rejoin): c is gated again.
	back := wire.Diff(&wire.Map{Members: []string{"a", "c"}}, &wire.Map{Members: []string{"a", "c"}, Leases: []int64{5, 6}})
	r.keepOwnLease(&wire.Map{Members: []string{"a", "c"}}, decoded(t, back))
	if r.leaseGate() {
		t.Fatal("after an earlier build's leader, a record of another lease for c lets c start slots")
	}
}

// decoded returns c as a member decodes it from the map key.
func decoded(t *testing.T, c wire.Record) *wire.Record {
	t.Helper()
	out, ok := wire.DecodeRecord(c.Encode())
	if !ok {
		t.Fatalf("record %s does not decode", c.Encode())
	}
	return &out
}

func containsField(b []byte, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[name]
	return ok
}

// A leader of this build whose rink applied a record of an earlier
// build's member (a departure in a rolling upgrade: no "leased") proclaims
// again, with a record that names every ranked member's lease: the earlier
// record opened every member's lease gate, and one whose lease did not
// change would otherwise stay outside it until a whole map came (a member
// that fenced and resumed meanwhile would start its slots while the map
// recorded its old lease: issue 42's hazard).
func TestLeaderRecordsLeasesAfterAnUnleasedRecord(t *testing.T) {
	name := rinkName(t)
	cli := newClient(t)
	a := join(t, newClient(t), name, WithMemberName("a"), WithRebalanceDelay(time.Second))
	eventually(t, 10*time.Second, "a leads", func() bool { return a.Rank().Leader == "a" && a.Rank().Index == 0 })
	c := join(t, newClient(t), name, WithMemberName("c"), WithRebalanceDelay(time.Second))
	waitSettled(t, a, c)
	k := newKeys(name)
	leaseOf := func(member string) int64 {
		resp, err := cli.Get(context.Background(), k.Member(member))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("member key of %s: %v", member, err)
		}
		return resp.Kvs[0].Lease
	}
	la, lc := leaseOf("a"), leaseOf("c")
	// An earlier build's record: nothing changes, and it says nothing of
	// leases.
	resp, err := cli.Get(context.Background(), k.Map())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the map key: %v", err)
	}
	m := a.ownersNow()
	old := fmt.Sprintf(`{"schema":%d,"change":true,"version":%d}`, m.Schema, m.Version+1)
	if _, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(k.Map()), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(k.Map(), old)).Commit(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a record that names every member's lease", func() bool {
		resp, err := cli.Get(context.Background(), k.Map())
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		rec, ok := wire.DecodeRecord(resp.Kvs[0].Value)
		return ok && rec.Version > m.Version+1 && rec.Leased && rec.Leases["a"] == la && rec.Leases["c"] == lc
	})
}
