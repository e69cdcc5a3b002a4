package rink

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestProtocolsOf(t *testing.T) {
	for _, c := range []struct {
		value string
		want  []int
	}{
		{`{}`, []int{2}}, // members of 636d84c and before
		{``, []int{2}},
		{`garbage`, []int{2}},
		{`{"protocols":[]}`, []int{2}},
		{`{"protocols":[3,2,3]}`, []int{2, 3}},
		{`{"protocols":[2],"later":{"field":1}}`, []int{2}}, // unknown fields are ignored
		{wire.MemberValue(1), []int{2, 3}},                  // one replica: the key reads as an earlier release's
		{wire.MemberValueOf(1, "z", false, 2), []int{4}},    // replicas: protocol 4 alone
		{`{"protocols":[2,3,4],"zone":"a"}`, []int{2, 3, 4}},
	} {
		if got := wire.ProtocolsOf([]byte(c.value)); !slices.Equal(got, c.want) {
			t.Errorf("protocolsOf(%q) = %v, want %v", c.value, got, c.want)
		}
	}
}

func TestCapacityOf(t *testing.T) {
	for _, c := range []struct {
		value string
		want  float64
	}{
		{`{}`, 1},
		{`garbage`, 1},
		{wire.MemberValue(1), 1},
		{wire.MemberValue(2.5), 2.5},
		{`{"capacity":4}`, 4},
		{`{"protocols":[2],"capacity":0.5}`, 0.5},
		{`{"protocols":[2],"capacity":0}`, 1},
		{`{"protocols":[2],"capacity":-3}`, 1},
		{`{"protocols":[2],"capacity":1e999}`, 1}, // does not decode
		{`{"protocols":[2],"capacity":1e12}`, 1},  // above MaxCapacity
	} {
		if _, got := wire.MetaOf([]byte(c.value)); got != c.want {
			t.Errorf("metaOf(%q) capacity = %v, want %v", c.value, got, c.want)
		}
	}
	// A capacity this build cannot read costs nothing else.
	for _, v := range []string{`{"protocols":[2,3],"capacity":"2"}`, `{"protocols":[2,3],"capacity":1e999}`, `{"protocols":[2,3],"capacity":{"x":1}}`} {
		if p, c := wire.MetaOf([]byte(v)); !slices.Equal(p, []int{2, 3}) || c != 1 {
			t.Errorf("metaOf(%s) = %v, %v; want [2 3], 1", v, p, c)
		}
	}
	if wire.MemberValue(1) != wire.OwnValue || strings.Contains(wire.MemberValue(1), "capacity") {
		t.Errorf("memberValue(1) = %s: a capacity of 1 is left out", wire.MemberValue(1))
	}
}

func TestRinkProtocol(t *testing.T) {
	m := func(ps ...int) memberInfo { return memberInfo{protocols: ps} }
	for _, c := range []struct {
		name      string
		members   map[string]memberInfo
		want      int
		strangers []string
	}{
		{"empty", nil, 3, nil},
		{"old and new", map[string]memberInfo{"old": m(2), "new": m(2, 3)}, 2, nil},
		{"only newer", map[string]memberInfo{"a": m(2, 3), "b": m(2, 3, 4, 5)}, 3, nil}, // with one replica this build offers 2 and 3
		{"a stranger", map[string]memberInfo{"a": m(2), "future": m(4)}, 2, []string{"future"}},
	} {
		got, strangers := rinkProtocol(c.members, 1)
		if got != c.want || !slices.Equal(strangers, c.strangers) {
			t.Errorf("%s: rinkProtocol = %d, %v; want %d, %v", c.name, got, strangers, c.want, c.strangers)
		}
	}
	// With replicas, protocol 4 or nothing: members that do not speak it
	// stay unranked.
	for _, c := range []struct {
		name      string
		members   map[string]memberInfo
		want      int
		strangers []string
	}{
		{"empty", nil, 4, nil},
		{"all speak 4", map[string]memberInfo{"a": m(2, 3, 4), "b": m(2, 3, 4, 5)}, 4, nil},
		{"an earlier release", map[string]memberInfo{"a": m(2, 3, 4), "old": m(2, 3)}, 4, []string{"old"}},
	} {
		got, strangers := rinkProtocol(c.members, 2)
		if got != c.want || !slices.Equal(strangers, c.strangers) {
			t.Errorf("replicas, %s: rinkProtocol = %d, %v; want %d, %v", c.name, got, strangers, c.want, c.strangers)
		}
	}
}

// Members state the protocols they speak in their member keys, and the
// leader proclaims in the highest that every live member speaks (issue
// 12). Beside a member of a later release that speaks 2 and 3, and one of
// 636d84c that writes "{}", the map stays at 2 and nobody leaves; a member
// that speaks none of this build's protocols is logged and does not stop
// the rink: it is not ranked, since it would hold nothing the map gave it
// (issue 22).
func TestProtocolNegotiation(t *testing.T) {
	cli := newClient(t)
	name := rinkName(t)
	a := join(t, cli, name, WithMemberName("a"))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	k := newKeys(name)
	for member, value := range map[string]string{"later": `{"protocols":[2,3],"extra":true}`, "old": `{}`, "future": `{"protocols":[9]}`} {
		lease, err := cli.Grant(ctxTimeout(t, 5*time.Second), 30)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = cli.Revoke(context.Background(), lease.ID) }()
		if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Member(member), value, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := NewObserver(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	eventually(t, 10*time.Second, "all but the stranger ranked in a map of protocol 2", func() bool {
		s := ob.State()
		if s.Protocol != 2 || len(s.Members) != 3 || len(s.Waiting) != 0 {
			return false
		}
		for _, m := range s.Members {
			want := map[string][]int{"a": wire.Offered(1), "later": {2, 3}, "old": {2}}[m.Name]
			if !slices.Equal(m.Protocols, want) {
				return false
			}
		}
		return a.Rank().Size == 3 && a.Rank().Index >= 0
	})
}

// The rink moves up to a newer protocol once the last member that speaks
// only the older one is gone: with one map write, and no role moves. This
// build speaks protocols 2 and 3.
func TestProtocolMovesUp(t *testing.T) {
	h := &history{}
	cli := newClient(t)
	name := rinkName(t)
	k := newKeys(name)
	// A new member, then an old one (it writes "{}"), which waits.
	a := join(t, cli, name, WithMemberName("a"), WithRebalanceDelay(time.Hour), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	lease, err := cli.Grant(ctxTimeout(t, 5*time.Second), 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Member("old"), `{}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	ob, err := NewObserver(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	eventually(t, 10*time.Second, "a leads a map of protocol 2", func() bool {
		s := ob.State()
		return s.Protocol == 2 && len(s.Members) == 1 && len(s.Waiting) == 1 && a.Rank().Index == 0 && a.Rank().Version == s.Version
	})
	settle(t, h, a)
	version, held := a.Rank().Version, len(h.snapshot())
	if _, err := cli.Revoke(ctxTimeout(t, 5*time.Second), lease.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the map moved up to protocol 3", func() bool { return ob.State().Protocol == 3 && a.Rank().Version > version })
	if v := a.Rank().Version; v != version+1 {
		t.Errorf("moving up took versions %d to %d, want one map", version, v)
	}
	for _, e := range h.snapshot()[held:] {
		if e.Kind == EventAcquired || e.Kind == EventReleased || e.Kind == EventFenced {
			t.Errorf("a role moved when the protocol moved up: %+v", e)
		}
	}
}

// A map in a protocol this build does not speak (written by a member of a
// later release that has not seen this one yet) does not make a member
// leave, nor New fail: it holds nothing, keeps its key, and the leader
// proclaims in a protocol every live member speaks.
func TestUnknownProtocolWaitedOut(t *testing.T) {
	h := &history{}
	cli := newClient(t)
	name := rinkName(t)
	k := newKeys(name)
	a := join(t, cli, name, WithMemberName("a"), h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	settle(t, h, a)
	mark := time.Now()
	later := a.ownersNow()
	m := *later
	m.Schema, m.Version = 7, later.Version+1
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Map(), string(m.Encode())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a map of this build's protocol again, every slot held", func() bool {
		cur := a.ownersNow()
		if cur.Schema != wire.SchemaVersion || cur.Version <= m.Version {
			return false
		}
		held := h.holders()
		for s := 0; s < cur.Slots; s++ {
			if len(held[s]) != 1 {
				return false
			}
		}
		return true
	})
	if fencedSince(h, "a", mark) {
		t.Error("a fenced (left the rink) on a map in an unknown protocol")
	}
	h.check(t)

	// New beside a map in an unknown protocol joins.
	other := rinkName(t)
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), newKeys(other).Map(), string(m.Encode())); err != nil {
		t.Fatal(err)
	}
	b := join(t, cli, other, WithMemberName("b"))
	eventually(t, 10*time.Second, "b ranked in a map of this build's protocol", func() bool {
		cur := b.ownersNow()
		return b.Rank().Index == 0 && cur != nil && cur.Schema == wire.SchemaVersion
	})
}
