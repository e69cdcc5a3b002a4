package rink

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// mapKVWith stands for the put of map m with transition t (see
// records.go), as a whole map written alone.
func mapKVWith(m wire.Map, t wire.Transition, createRev, modRev int64) *mvccpb.KeyValue {
	kv := mapKV(m, createRev, modRev)
	kv.Value = wire.WithTransition(kv.Value, t)
	return kv
}

// narrowStart is member b in the narrow view of a rink where a owned both
// slots, then handed slot 1 to b (seq 2), which a has not acknowledged:
// a's floor bound is seq 1.
func narrowStart(t *testing.T) *bare {
	const L = 10
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.put(memberKV("a", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"a"}, 0, 0), L, L), memberKV("a", 3, 11, 1, L))
	b.put(mapKV(twoSlots(2, []string{"a", "b"}, 0, 1), L, 12))
	b.wantHeld(1, false, "a has not acknowledged v2")
	return b
}

// A member in the narrow view sees no member key go: a departure reaches
// it as the transition of the map that drops the leaver, and the heirs
// start at once, without waiting for the leaver's acknowledgement in a
// floor. Without the transition they wait: the leaver may still hold its
// slots, for all the map says.
func TestNarrowDepartureByTransition(t *testing.T) {
	const L = 10
	b := narrowStart(t)
	b.put(mapKVWith(twoSlots(3, []string{"b"}, 0, 0), wire.Transition{From: 2, Gone: []string{"a"}}, L, 13))
	b.wantHeld(0, true, "a is gone: the map that dropped it says so")
	b.wantHeld(1, true, "a is gone")

	n := narrowStart(t)
	n.put(mapKV(twoSlots(3, []string{"b"}, 0, 0), L, 13))
	n.wantHeld(0, false, "a was dropped, and nothing says it holds nothing: its bound is seq 1")
	n.wantHeld(1, false, "a's bound is seq 1")
	n.put(memberKV("a", 3, 14, 3, L))
	n.wantHeld(0, true, "a acknowledged seq 3")
	n.wantHeld(1, true, "a acknowledged seq 3")
}

// A transition counts only for the put that follows the map it names:
// one written back by hand (here naming another base) says nothing of
// today's members.
func TestNarrowTransitionOfAnotherBase(t *testing.T) {
	const L = 10
	b := narrowStart(t)
	b.put(mapKVWith(twoSlots(3, []string{"b"}, 0, 0), wire.Transition{From: 1, Gone: []string{"a"}}, L, 13))
	b.wantHeld(0, false, "the transition names version 1 as its base, not 2")
	b.wantHeld(1, false, "the transition names version 1 as its base, not 2")
}

// While the leader's floor counts ghosts (members whose keys went while
// their leases live), a member in the narrow view starts nothing.
func TestNarrowFloorGhosts(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.manual = true
	b.put(memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"a", "b"}, 0, 1), L, L))
	f := wire.AckFloor{Lineage: L, Version: 1, Floor: 1, Complete: true, Seq: 1, SeqFloor: 1, SeqComplete: true, Still: true, Base: 1, Ghosts: 1}
	b.put(floorKV(f, 11))
	b.wantHeld(1, false, "a ghost may act")
	f.Ghosts = 0
	b.put(floorKV(f, 12))
	b.wantHeld(1, true, "no ghost")
}

// A member that applies records passes over the slots they move only (see
// mapDelta); what it owns must be what a pass over every slot finds, for
// any sequence of records: joins, departures that close a hole, renames.
func TestRecordsReconcileLikeWholeMaps(t *testing.T) {
	const L, S = 10, 12
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		b := newBare(t, "b", S, 5)
		b.narrowView()
		b.put(memberKV("b", 5, 5, 0, 0))
		names := []string{"a", "b", "c", "d", "e"}
		prev := wire.Map{}
		for seq := int64(1); seq <= 30; seq++ {
			m := wire.Map{Schema: wire.SchemaVersion, Version: seq, Slots: S}
			for _, n := range names {
				if rng.IntN(4) > 0 {
					m.Members = append(m.Members, n)
				}
			}
			rng.Shuffle(len(m.Members), func(i, j int) { m.Members[i], m.Members[j] = m.Members[j], m.Members[i] })
			if len(m.Members) > 0 {
				m.Table = make(wire.SlotTable, S)
				for s := range m.Table {
					m.Table[s] = int32(rng.IntN(len(m.Members)))
					if rng.IntN(3) > 0 && prev.Version > 0 && len(prev.Members) > 0 {
						if i := m.Index(prev.Owner(s)); i >= 0 {
							m.Table[s] = int32(i) // mostly unmoved
						}
					}
				}
			}
			kv := mapKV(m, L, L+seq)
			if seq > 1 {
				c := wire.Diff(&prev, &m)
				kv.Value = c.Encode()
			}
			b.r.onWatch(watchBatch{wide: !b.narrow, events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}}, rev: L + seq})
			st := &b.r.st
			if st.curSeq != seq {
				t.Fatalf("round %d: seq %d not applied (at %d)", round, seq, st.curSeq)
			}
			idx := m.Index("b")
			if st.selfIdx != idx {
				t.Fatalf("round %d seq %d: own index %d, want %d", round, seq, st.selfIdx, idx)
			}
			for s := range S {
				if want := idx >= 0 && int(m.Table[s]) == idx; st.mine.owns(s) != want {
					t.Fatalf("round %d seq %d: slot %d owned %v, want %v", round, seq, s, st.mine.owns(s), want)
				}
			}
			prev = m
		}
	}
}

// Issue 25's storm (seed 28): a process cut off etcd whose key an operator
// deleted and whose name a replacement took applied, as the cut ended, a
// map that gave its name more slots, before its own watch told it of the
// deletion, and started them with the replacement's token. The leader's
// map says whose the name is now (transition.Incs): a process of that name
// with another key fences before it starts anything.
func TestNarrowReplacedNameFences(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.put(memberKV("a", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	b.put(mapKV(twoSlots(1, []string{"a", "b"}, 0, 0), L, L), memberKV("a", 3, 11, 1, L))
	m := twoSlots(2, []string{"a", "b"}, 0, 1)
	b.put(mapKVWith(m, wire.Transition{From: 1, Incs: map[string]int64{"b": 40}}, L, 41))
	b.put(memberKV("a", 3, 42, 2, L))
	b.wantHeld(1, false, "the name b is another process's now")
	if b.r.st.inc.ctx.Err() == nil {
		t.Fatal("not fenced")
	}

	// The same map naming this process's own key changes nothing.
	n := newBare(t, "b", 2, 5)
	n.narrowView()
	n.put(memberKV("a", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0))
	n.put(mapKV(twoSlots(1, []string{"a", "b"}, 0, 0), L, L), memberKV("a", 3, 11, 1, L))
	n.put(mapKVWith(m, wire.Transition{From: 1, Incs: map[string]int64{"b": 5}}, L, 41))
	n.put(memberKV("a", 3, 42, 2, L))
	n.wantHeld(1, true, "the name is still ours, and a acknowledged")
}

// A listing of the narrow view reads the member's own key: a process whose
// key went while it was cut off fences before it starts what the listed
// map gives it.
func TestNarrowListingWithoutOwnKeyFences(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.put(memberKV("b", 5, 5, 0, 0))
	f := wire.AckFloor{Lineage: L, Version: 1, Floor: 1, Complete: true, Seq: 1, SeqFloor: 1, SeqComplete: true, Still: true, Base: 1}
	b.manual = true
	b.r.onWatch(watchBatch{snapshot: true, kvs: []*mvccpb.KeyValue{mapKV(twoSlots(1, []string{"a", "b"}, 0, 1), L, L), floorKV(f, 12)}, rev: 20})
	b.r.tryAcquire()
	b.wantHeld(1, false, "our key is not in the listing")
	if b.r.st.inc.ctx.Err() == nil {
		t.Fatal("not fenced")
	}
}

// Issue 25's storm (seed 28): an election key with no lease below every
// candidate's (the leader's own key, overwritten by hand while the leader
// was cut off) kept the rink without a leader, because the member next in
// line followed the narrow view, which shows it no stray. The next in line
// deletes a stray key just below its own as it campaigns.
func TestStrayElectionKeyBelowNarrowCandidate(t *testing.T) {
	h := &history{}
	p := newProxy(t)
	name := rinkName(t)
	ttl := WithSessionTTL(2 * time.Second)
	a := join(t, proxyClient(t, p), name, WithMemberName("a"), ttl, h.hook())
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, WithMemberName("b"), ttl, h.hook())
	settle(t, h, a, b)
	if b.wideView.Load() {
		t.Fatal("precondition: b follows the wide view")
	}
	p.PauseTx()
	p.PauseRx()
	t.Cleanup(func() { p.UnpauseTx(); p.UnpauseRx() })
	cli := newClient(t)
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), newKeys(name).Election(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) < 2 {
		t.Fatalf("election keys: %v, %v", resp, err)
	}
	// a's key, the lowest, bound to no lease now: it outlives a.
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), string(resp.Kvs[0].Key), "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "b leads", func() bool { rk := b.Rank(); return rk.Leader == "b" && rk.Size == 1 && rk.Index == 0 })
	settle(t, h, b)
	h.check(t)
}

// A member that New found joining a rink of protocol 3 follows the narrow
// view from the start: before its first listing arrives it knows no map,
// and must not ask for the wide view for that (a listing of every member
// key per joining member, and a watch torn down and made again twice).
func TestNarrowJoinStaysNarrowBeforeItsListing(t *testing.T) {
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.r.relistCh = make(chan struct{}, 1)
	b.r.syncView()
	if b.r.wideView.Load() {
		t.Fatal("a member with no listing yet asked for the wide view")
	}
	select {
	case <-b.r.relistCh:
		t.Fatal("a member with no listing yet asked for a new listing")
	default:
	}
	// A listing with no map at all: the rink has none, and the member
	// follows the wide view (a rink of no protocol yet).
	b.r.onWatch(watchBatch{snapshot: true, kvs: nil, rev: 20})
	b.r.syncView()
	if !b.r.wideView.Load() {
		t.Fatal("a member that listed a rink with no map follows the narrow view")
	}
}

// A batch of the view the member has left (sent before the watcher saw the
// switch) is dropped: a wide listing that arrives after the member asked
// for the narrow view must not fill the view with every member key (the
// narrow listing that follows would not empty it).
func TestNarrowDropsBatchesOfTheViewLeft(t *testing.T) {
	const L = 10
	b := newBare(t, "b", 2, 5)
	b.narrowView()
	b.r.onWatch(watchBatch{snapshot: true, wide: true, kvs: b.seen([]*mvccpb.KeyValue{
		memberKV("a", 3, 3, 0, 0), memberKV("b", 5, 5, 0, 0), memberKV("c", 4, 4, 0, 0),
		mapKV(twoSlots(1, []string{"a", "b"}, 0, 1), L, L)}), rev: 20})
	if n := len(b.r.st.members); n > 1 {
		t.Fatalf("the narrow view keeps %d member keys from a wide listing it had left", n)
	}
	if b.r.st.view.wide {
		t.Fatal("a wide listing of the view left made the view wide")
	}
	b.r.onWatch(watchBatch{wide: true, rev: 21, events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: memberKV("d", 21, 21, 0, 0)}}})
	if _, ok := b.r.st.members["d"]; ok {
		t.Fatal("the narrow view took a member key from a wide batch")
	}
}
