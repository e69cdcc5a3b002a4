package rink

import (
	"errors"
	"fmt"
	"github.com/rink-go/rink/internal/core"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Red team of protocol 3 (change records in the map key, the whole map in
// .map). Each test below states the path it exercises.

// An OLDER change record put back by hand (a GitOps re-sync of the map
// key, `etcdctl put rink/X/map "$saved"` with a value saved a few maps
// ago) is, like any put of the map key, "simply the next map" (design.md,
// The rank map). In protocol 2 that value was a whole map: members applied
// it, moved slots through the barrier, and the leader proclaimed anew
// (stale version). In protocol 3 it is a record, and members that follow
// the watch apply it to their current map (loop.go applyMap -> readMap ->
// apply). Records apply as assignments, so an older record re-sizes
// Members to what it said then (Size), re-names indexes (Names) and
// re-adds waiters (Wait): applied to today's map the result routinely
// fails validate (a slot owned by an index past the end, a member listed
// twice, a waiter that is ranked). apply's own comment says the member
// "then reads the map whole", but readMap returns the error and applyMap
// hands it to unusable: every following member, the leader included,
// fences (drops every role) and sets st.incompatible. plan() returns early
// for a non-waitsOut incompatible leader, depart() refuses to hand over,
// and nobody else writes the map key, so the rink stays empty until an
// operator deletes the key: a put-back that protocol 2 survived is a
// total, permanent outage in protocol 3.
func TestRedteam25OlderRecordPutBackFencesEveryone(t *testing.T) {
	const S = 64
	h := &history{}
	name, ms, _ := cluster(t, h, 3, WithSlots(S))
	settle(t, h, ms...)
	k := newKeys(name)
	cli := newClient(t)
	var saved [][]byte
	save := func() {
		val, _, _ := getKV(t, name, k.Map())
		saved = append(saved, val)
	}
	save()
	// m2 leaves (its departure record sizes the members down to 2) ...
	if err := ms[2].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ms = ms[:2]
	settle(t, h, ms...)
	save()
	// ... and two others join: 4 ranked members.
	for i := 0; i < 2; i++ {
		ms = append(ms, join(t, newClient(t), name, WithMemberName(fmt.Sprintf("n%d", i)), WithSlots(S), h.hook()))
		settle(t, h, ms...)
		save()
	}
	eventually(t, 10*time.Second, "four ranked", func() bool {
		for _, m := range ms {
			if rk := m.Rank(); rk.Index < 0 || rk.Size != 4 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)
	cur, _, err := readWhole(cli, name, S)
	if err != nil {
		t.Fatal(err)
	}
	// Pick a value the map key held earlier that, put back, does not fit
	// today's map (as members will find when they apply it).
	var old []byte
	for _, v := range saved {
		c, ok := wire.DecodeRecord(v)
		if !ok {
			continue
		}
		if _, err := wire.Apply(&cur, &c); err != nil {
			old = v
			t.Logf("putting back %s (applied to the current map: %v)", v, err)
			break
		}
	}
	if old == nil {
		t.Fatalf("precondition: no saved record fails to apply to the current map (saved %d values)", len(saved))
	}
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Map(), string(old)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			dumpRink(t, name)
			for _, m := range ms {
				t.Logf("%s: %+v", m.Member(), m.Rank())
			}
		}
	}()
	// Protocol 2's promise for an older map put back: the rink carries on,
	// every slot held by the owner of the newest map, every member on it.
	eventually(t, 15*time.Second, "the rink heals after an older record was put back (every slot held as the newest map says)", func() bool {
		m, kv, err := readWhole(cli, name, S)
		if err != nil || kv.Version <= 1 {
			return false
		}
		for _, r := range ms {
			if r.Rank().Version != m.Version {
				return false
			}
		}
		return h.heldAsMapped(&m)
	})
	h.check(t)
}

// apply (records.go) sizes a table that the map before had none of from
// prev.Slots. Members pass their configured slot count to decodeMap, but
// the Observer (observer.go: readMap(..., 0)) and the leader's ack
// aggregator (acks.go ackView.shapeOf: decodeMap(value, peekSlots(value)))
// take "any slot count": a whole map with no members passes validate
// whatever its "slots" says (validate returns early for an empty Members).
// A hand-written whole map such as {"schema":3,"version":9,"slots":-1,
// "members":[]} is thus kept as the Observer's cur / the aggregator's
// v.whole, and the next change record that ranks a member (size 1) makes
// apply call make(slotTable, -1): a runtime panic in the Observer's run
// goroutine, or in the leader's aggregator goroutine — either takes the
// whole process down (rinkctl, or the service hosting the leader). A map
// that does not fit should be refused with an error, never a panic
// (FuzzApplyRecord's promise, "never a panic", for prev it considers).
func TestRedteam25ApplyPanicsOnAnySlotCountPrev(t *testing.T) {
	k := newKeys("rt25")
	whole := []byte(`{"schema":3,"version":9,"slots":-1,"members":[]}`)
	// Decoders refuse it now (a slot count out of range is a damaged map:
	// see wire.ErrMapDamaged); apply must not panic on it all the same.
	if _, err := wire.DecodeMap(whole, wire.PeekSlots(whole)); !errors.Is(err, wire.ErrMapDamaged) {
		t.Fatalf("a map of -1 slots decoded: %v", err)
	}
	prev := wire.Map{Schema: 3, Version: 9, Slots: -1, Members: []string{}}
	one := 1
	rec := wire.Record{Schema: 3, Change: true, Version: 10, Size: &one, Names: map[string]string{"0": "a"}}
	kv := &mvccpb.KeyValue{Key: []byte(k.Map()), Value: rec.Encode(), CreateRevision: 5, ModRevision: 12, Version: 3}
	noPanic := func(what string, fn func()) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s panicked on a record after a whole map it accepted: %v", what, p)
			}
		}()
		fn()
	}
	// The Observer's call (observer.go run): slots 0, prev usable.
	noPanic("readMap as the Observer calls it", func() { _, _ = wire.ReadMap(kv, nil, &prev, true, 2, 5, wire.Geometry{}) })
	// The aggregator's path (acks.go ackView.put): shapeOf keeps v.whole,
	// and the next record is applied to it.
	noPanic("the leader's ack aggregator (ackView.put)", func() {
		v := &core.AckView{Members: map[string]core.AckMember{}, Acks: map[string]core.AckKey{}, Ranked: map[string]bool{}}
		v.Put(k, &mvccpb.KeyValue{Key: []byte(k.Map()), Value: whole, CreateRevision: 5, ModRevision: 11, Version: 2}, false)
		v.Put(k, kv, false)
	})
}

// Checked, holds at 40a6560 (it failed before: at 425757e a leader that
// listed the rink could not apply a lone record and its proclamations,
// guarded on map revision 0, failed forever): the whole rink stopped, the
// map key holding a record put back by hand (no .map beside it), then a
// fresh member starts. Every member lists and cannot derive; the leader
// writes a whole map over the record (plan, underived) and the rink runs.
func TestRedteam25ColdStartOnLoneRecord(t *testing.T) {
	const S = 16
	h := &history{}
	name, ms, _ := cluster(t, h, 2, WithSlots(S))
	settle(t, h, ms...)
	k := newKeys(name)
	cli := newClient(t)
	for _, m := range ms {
		if err := m.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	val, _, _ := getKV(t, name, k.Map())
	if _, ok := wire.DecodeRecord(val); !ok {
		t.Fatalf("precondition: the map key holds %s, want a record", val)
	}
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), k.Map(), string(val)); err != nil {
		t.Fatal(err)
	}
	n := join(t, newClient(t), name, WithMemberName("n"), WithSlots(S), h.hook())
	eventually(t, 15*time.Second, "the fresh member ranked on a cold start over a lone record", func() bool {
		return n.Rank().Index >= 0
	})
	settle(t, h, n)
	h.check(t)
}
