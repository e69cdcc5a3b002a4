package rink

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A map key whose value an operator damaged by hand — cut short, not JSON,
// or a whole map that breaks a map's invariants — is written over by the
// leader with a whole map, and the rink heals: every member follows the
// next map and every role is held again. (Every member refused such a map
// as unusable and left the rink, the leader too, until a person wrote a
// usable map: the simulator's key-edit fault found it.) Members keep what
// they hold meanwhile: a map nobody can read moves nothing.
func TestDamagedMapWrittenOver(t *testing.T) {
	h := &history{}
	name, ms, record := recordRink(t, h)
	k := newKeys(name)
	cli := newClient(t)
	whole, _, err := readWhole(cli, name, 64)
	if err != nil {
		t.Fatal(err)
	}
	bad := whole
	bad.Table = append([]int32(nil), whole.Table...)
	bad.Table[0] = 99 // (an index past the members)
	for i, v := range []string{string(record[:len(record)/2]), "oops", string(bad.Encode()), "{}"} {
		before, _, _ := readWhole(cli, name, 64)
		if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Map(), v); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, fmt.Sprintf("damage %d (%.40q): a usable map written over it", i, v), func() bool {
			m, _, err := readWhole(cli, name, 64)
			return err == nil && m.Version > before.Version
		})
		settle(t, h, ms...)
	}
	h.check(t)
}

// Processes that start into a rink whose map key was damaged while none
// ran join it (New does not refuse a map nobody can read), and the first
// to lead writes a usable map over it.
func TestJoinOverADamagedMap(t *testing.T) {
	h := &history{}
	name, ms, _ := recordRink(t, h)
	for _, m := range ms {
		if err := m.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	k := newKeys(name)
	cli := newClient(t)
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Map(), `{"schema":3,"change":tr`); err != nil {
		t.Fatal(err)
	}
	a := join(t, newClient(t), name, WithMemberName("a"), WithSlots(64), h.hook())
	b := join(t, newClient(t), name, WithMemberName("b"), WithSlots(64), h.hook())
	if _, err := a.AwaitRoleContext(ctxTimeout(t, 15*time.Second), "leader"); err != nil {
		if _, err := b.AwaitRoleContext(ctxTimeout(t, 1*time.Second), "leader"); err != nil {
			t.Fatal("nobody leads over a damaged map")
		}
	}
	settle(t, h, a, b)
	h.check(t)
}

// A member key whose value somebody else wrote — saying the member speaks
// no protocol the rink speaks, here — is written back by its member, which
// is ranked again. (Nothing wrote it back but the leaving flag, and the
// member stayed unranked for good: the simulator's key-edit fault found
// it, with -replicas 2 -zones 3.)
func TestOwnMemberKeyWrittenBack(t *testing.T) {
	h := &history{}
	name, ms, _ := cluster(t, h, 2)
	settle(t, h, ms...)
	k := newKeys(name)
	cli := newClient(t)
	want, _, _ := getKV(t, name, k.Member("m1"))
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Member("m1"), `{"protocols":[-1]}`, clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "m1 writes its key back", func() bool {
		v, _, _ := getKV(t, name, k.Member("m1"))
		return string(v) == string(want)
	})
	eventually(t, 10*time.Second, "m1 ranked", func() bool { return ms[0].Rank().Size == 2 && ms[1].Rank().Index >= 0 })
	settle(t, h, ms...)
	h.check(t)
}

// An election key whose value an operator changed to a name no member has,
// bound to a live member's lease, makes no ghost: the member is in view
// under its own key, and a ghost would last as long as its lease, with
// nothing started meanwhile. (The simulator's key-edit fault found it.)
func TestElectionKeyRenamedMakesNoGhost(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, ms, clis := cluster(t, h, 3)
	settle(t, h, ms...)
	k := newKeys(name)
	cli := newClient(t)
	leader := ms[0].Rank().Leader
	var victim string
	for _, m := range ms {
		if m.Member() != leader {
			victim = m.Member()
		}
	}
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Election(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == victim {
			if _, err := cli.Put(ctxTimeout(t, 5*time.Second), string(kv.Key), "nobody", clientv3.WithIgnoreLease()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The leader crashes: the next lists the rink, and must not wait for
	// a ghost to hand out the crashed member's slots.
	var rest []*Rink
	for i, m := range ms {
		if m.Member() == leader {
			clis[i].Close() // (its lease is left to expire)
		} else {
			rest = append(rest, m)
		}
	}
	eventually(t, 15*time.Second, "the crashed leader's successor ranks two", func() bool { return rest[0].Rank().Size == 2 })
	settle(t, h, rest...)
	h.check(t)
}
