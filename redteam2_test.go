package rink

import (
	"context"
	"github.com/rink-go/rink/internal/core"
	"slices"
	"sync"
	"testing"
	"time"
)

// Red-team tests (second round) for lazy acknowledgements (acks.go:
// ackPause, sendAckLazily; loop.go: applyMap) and for the warm-up change
// in warmup.go (startLeaving, heirsWarm).

// Path: the map key is deleted (an operator, or dropLineage after a
// restore) and a leader creates it again: a new lineage, whose first map
// has seq 1. applyMap resets st.prevSeq to 0 for a new lineage, so the
// lazy test `st.prevSeq == st.curSeq-1` reads 0 == 1-1 and, for a member
// whose slots the new map leaves as they were (the usual case: the leader
// writes its last view again), the first acknowledgement of the new
// lineage is sent lazy. The writer's own guard (same incarnation, a value
// written before) does not catch it either: the old lineage's ack was
// written by this incarnation. acks.go and design.md promise "never the
// first acknowledgement of an incarnation or of a lineage": until it is
// known, every member's others() fails and nobody starts anything, so
// every member of the rink delays every acquisition of the new lineage by
// ackPause.
func TestRedteam2FirstAckOfNewLineageIsLazy(t *testing.T) {
	b := newBare(t, "b", 2, 5)
	b.noStill = true // (a leader that says Still asks for no acknowledgement of seq 2: see still.go)
	b.put(memberKV("b", 5, 5, 0, 0), memberKV("c", 6, 6, 0, 0))
	// Lineage 10: seqs 1 and 2 (the second changes nothing for b).
	b.put(mapKVSeq(twoSlots(1, []string{"c", "b"}, 0, 1), 10, 20, 1), memberKVSeq("c", 6, 21, 1, 1, 10))
	b.wantHeld(1, true, "ours, c acknowledged seq 1")
	drainAck(b)
	b.put(mapKVSeq(twoSlots(2, []string{"c", "b"}, 0, 1), 10, 22, 2))
	if req, ok := drainAck(b); !ok || !req.Lazy {
		t.Fatalf("seq 2 changes nothing for b: want a lazy ack (the change's own case), got %+v (sent %v)", req, ok)
	}
	// The map key is deleted and created again: lineage 40, seq 1, same table.
	b.del(newKeys("bare").Map(), 30)
	drainAck(b)
	b.put(mapKVSeq(twoSlots(3, []string{"c", "b"}, 0, 1), 40, 40, 1))
	if b.r.st.lineage != 40 {
		t.Fatalf("lineage = %d, want 40", b.r.st.lineage)
	}
	req, ok := drainAck(b)
	if !ok {
		t.Fatal("no acknowledgement of the new lineage's first map")
	}
	if req.Lineage != 40 || req.Seq != 1 {
		t.Fatalf("ack %+v, want lineage 40 seq 1", req)
	}
	if req.Lazy {
		t.Errorf("the first acknowledgement of lineage 40 is lazy (prevSeq %d, curSeq %d): it waits ackPause, and until it is known nobody in the rink starts anything", b.r.st.prevSeq, b.r.st.curSeq)
	}
}

// drainAck takes the acknowledgement the member handed to its (absent)
// writer, if any.
func drainAck(b *bare) (core.AckReq, bool) {
	select {
	case req := <-b.r.ackCh:
		return req, true
	default:
		return core.AckReq{}, false
	}
}

// Path: warmup.go after e3cc40b. A member leaving with a warm-up starts
// nothing (tryAcquire returns while st.leaving), and since e3cc40b it
// leaves at once only when it holds no slot; heirsWarm waits for the heirs
// of the slots it holds. A member that holds some slots and also owns
// slots it has not started yet (their previous owner still drains them,
// the case e3cc40b's message names) keeps those ranked to itself: the
// leader's announcement keeps every live owner's slots, the member never
// starts them, and it waits for the heirs of its held slots. So once the
// previous owner's drain ends, those roles have no holder at all until
// the heirs are warm or the whole warm-up time has passed (here the heirs
// never get ready: 6 s), though the rink is otherwise quiet.
//
// Setup: m0 and m1 hold 4 of 8 slots each; every role on m0 runs a Run
// function that ignores its context until the test lets it go, so the
// slot m0 gives the newcomer b drains (m0 withholds its ack). b gets m1's
// slot at once and m0's only after the drain: b then leaves with a
// warm-up, m0's functions return, and m0 acknowledges. The slot b owns
// but never started must get a holder well within the warm-up.
func TestRedteam2WarmLeaveKeepsUnstartedSlotUnheld(t *testing.T) {
	const S = 8
	const warmup = 6 * time.Second
	h := &history{}
	opts := []Option{WithSlots(S), WithWarmup(warmup), WithDrainTimeout(20 * time.Second), WithImbalanceTolerance(0), WithRebalanceDelay(300 * time.Millisecond)}
	name, ms, _ := cluster(t, h, 2, opts...)
	m0, m1 := ms[0], ms[1]
	settle(t, h, ms...)
	roles := redteamRolePerSlot(S)

	// Every role m0 holds runs a function that outlives its holding.
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo()
	runCtx, stopRuns := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	defer func() { stopRuns(); letGo(); runs.Wait() }()
	m := m0.ownersNow()
	for s := 0; s < S; s++ {
		if m.Owner(s) != m0.Member() {
			continue
		}
		role := roles[s]
		runs.Add(1)
		go func() {
			defer runs.Done()
			_ = m0.Run(runCtx, role, func(context.Context) error {
				select {
				case <-release:
				case <-runCtx.Done():
				}
				return nil
			})
		}()
	}
	eventually(t, 10*time.Second, "m0's functions run", func() bool {
		for s := 0; s < S; s++ {
			if st := m0.slots.load(s); m.Owner(s) == m0.Member() && (st == nil || st.runners.Load() == 0) {
				return false
			}
		}
		return true
	})
	// The heirs of the newcomer's slots, later, never get ready.
	for _, r := range ms {
		set, err := r.Watch(blockingWarm(), roles...)
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
	}

	b := join(t, newClient(t), name, append([]Option{WithMemberName("b"), h.hook()}, opts...)...)
	var fromM0, fromM1 []int
	eventually(t, 15*time.Second, "b ranked, holding m1's slot, m0's still draining", func() bool {
		cur := m1.ownersNow()
		fromM0, fromM1 = fromM0[:0], fromM1[:0]
		for s := 0; s < S; s++ {
			if cur.Owner(s) == "b" && len(cur.Incoming) == 0 {
				switch m.Owner(s) {
				case m0.Member():
					fromM0 = append(fromM0, s)
				case m1.Member():
					fromM1 = append(fromM1, s)
				}
			}
		}
		if len(fromM0) == 0 || len(fromM1) == 0 {
			return false
		}
		held := h.holders()
		for _, s := range fromM1 {
			if !slices.Equal(held[s], []string{"b"}) {
				return false
			}
		}
		return true
	})
	for _, s := range fromM0 {
		if held := h.holders()[s]; len(held) != 0 {
			t.Fatalf("slot %d (m0's, draining) held by %v", s, held)
		}
	}
	t.Logf("b holds %v (from m1), owns %v (from m0, draining)", fromM1, fromM0)

	left := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*warmup)
		defer cancel()
		left <- b.Shutdown(ctx)
	}()
	eventually(t, 10*time.Second, "the leader announces b's slots", func() bool { return len(m0.ownersNow().Incoming) > 0 })
	letGo() // m0's drain ends: it acknowledges, and b's unstarted slots are free
	ended := time.Now()

	within := 3 * time.Second // half the warm-up
	for {
		held := h.holders()
		var unheld []int
		for _, s := range fromM0 {
			if len(held[s]) == 0 {
				unheld = append(unheld, s)
			}
		}
		if len(unheld) == 0 {
			t.Logf("held %v after the drain ended", time.Since(ended))
			break
		}
		if time.Since(ended) > within {
			cur := m0.ownersNow()
			t.Errorf("%v after m0's drain ended, slots %v (owned by leaving b, never started) have no holder; map %d table %v incoming %v leave %v",
				within, unheld, cur.Version, cur.Table, cur.Incoming, cur.Leave)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-left:
		if err != nil {
			t.Errorf("b's Shutdown: %v", err)
		}
	case <-time.After(4 * warmup):
		t.Error("b's Shutdown did not return")
	}
	h.check(t)
}
