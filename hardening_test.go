package rink

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Paths that no calm test walks (issue 10): each test fires its steps back
// to back instead of waiting for the rink to settle in between.

// since returns the events of kind k after t0.
func since(h *history, t0 time.Time, k EventKind) []Event {
	var out []Event
	for _, e := range h.snapshot() {
		if e.Kind == k && e.Time.After(t0) {
			out = append(out, e)
		}
	}
	return out
}

// A newcomer whose New returned before a ranked member's Shutdown began
// takes that member's index and all its slots, whether or not the leaver
// leads: nothing moves twice, and nobody waits out the rebalance delay.
func TestShutdownRightAfterJoin(t *testing.T) {
	for _, leaverLeads := range []bool{true, false} {
		t.Run(fmt.Sprintf("leader=%v", leaverLeads), func(t *testing.T) {
			h := &history{}
			slow := []Option{h.hook(), WithRebalanceDelay(30 * time.Second), WithSlots(64)}
			// A first leader with no delay ranks m1..m3; once it has gone,
			// m1 leads with a delay longer than the test.
			name := rinkName(t)
			m0 := join(t, newClient(t), name, WithMemberName("m0"), h.hook(), WithSlots(64))
			eventually(t, 10*time.Second, "m0 ranked", func() bool { return m0.Rank().Index == 0 })
			var ms []*Rink
			for i := 1; i <= 3; i++ {
				ms = append(ms, join(t, newClient(t), name, append(slow, WithMemberName(fmt.Sprint("m", i)))...))
			}
			eventually(t, 10*time.Second, "all ranked", func() bool {
				for _, m := range ms {
					if m.Rank().Index < 0 {
						return false
					}
				}
				return true
			})
			if err := m0.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "m1 leads a rink of 3", func() bool { return ms[2].Rank().Leader == "m1" && ms[2].Rank().Size == 3 })
			settle(t, h, ms...)
			leaver := ms[1]
			if leaverLeads {
				leaver = ms[0]
			}
			idx := leaver.Rank().Index
			var theirs []int
			m := leaver.ownersNow()
			for s := 0; s < m.Slots; s++ {
				if m.Owner(s) == leaver.Member() {
					theirs = append(theirs, s)
				}
			}
			t0 := time.Now()
			n := join(t, newClient(t), name, append(slow, WithMemberName("new"))...)
			if err := leaver.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			rest := slices.DeleteFunc(slices.Clone(ms), func(r *Rink) bool { return r == leaver })
			eventually(t, 10*time.Second, "the newcomer ranked in the leaver's place", func() bool { return n.Rank().Index == idx })
			settle(t, h, append(rest, n)...)
			h.check(t)
			acq := since(h, t0, EventAcquired)
			var got []int
			for _, e := range acq {
				if e.Member != "new" {
					t.Errorf("%s acquired slot %d: the leaver's slots went elsewhere than the newcomer", e.Member, e.Slot)
				}
				got = append(got, e.Slot)
			}
			slices.Sort(got)
			if !slices.Equal(got, theirs) {
				t.Errorf("newcomer acquired %v, want the leaver's slots %v", got, theirs)
			}
		})
	}
}

// Waiters whose delays run out close together are ranked in one map: at
// a rink's first spread no slot moves twice.
func TestBurstOfJoinsRankedTogether(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	opts := []Option{h.hook(), WithRebalanceDelay(2 * time.Second), WithSlots(64)}
	first := join(t, newClient(t), name, append(opts, WithMemberName("m0"))...)
	eventually(t, 10*time.Second, "m0 ranked", func() bool { return first.Rank().Index == 0 })
	settle(t, h, first)
	t0 := time.Now()
	ms := []*Rink{first}
	for i := 1; i <= 3; i++ {
		ms = append(ms, join(t, newClient(t), name, append(opts, WithMemberName(fmt.Sprint("m", i)))...))
		time.Sleep(5 * time.Millisecond) // the demo's spacing: a burst, not a sequence
	}
	eventually(t, 20*time.Second, "all ranked", func() bool {
		for _, m := range ms {
			if m.Rank().Index < 0 || m.Rank().Size != 4 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)
	h.check(t)
	count := map[int]int{}
	for _, e := range since(h, t0, EventAcquired) {
		if count[e.Slot]++; count[e.Slot] > 1 {
			t.Errorf("slot %d acquired %d times after the burst", e.Slot, count[e.Slot])
		}
	}
}

// The map key put back unchanged (an etcdctl get|put, a GitOps re-sync):
// nobody leaves, nothing moves.
func TestMapPutBackUnchanged(t *testing.T) {
	h := &history{}
	name, ms, _ := cluster(t, h, 3, WithSlots(64))
	settle(t, h, ms...)
	cli := newClient(t)
	key := newKeys(name).Map()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal("no map", err)
	}
	t0 := time.Now()
	for i := 0; i < 3; i++ {
		if _, err := cli.Put(context.Background(), key, string(resp.Kvs[0].Value)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "a newer map version proclaimed", func() bool {
		for _, m := range ms {
			if m.Rank().Version <= ms[0].ownersNow().Version-1 || m.Rank().Index < 0 {
				return false
			}
		}
		m, kv, err := readWhole(cli, name, 64)
		return err == nil && m.Version > ms[0].Rank().Version-1 && kv.ModRevision > resp.Kvs[0].ModRevision+3
	})
	settle(t, h, ms...)
	h.check(t)
	if f := since(h, t0, EventFenced); len(f) > 0 {
		t.Errorf("%d fences after a map was put back unchanged (first: %s, %v)", len(f), f[0].Member, f[0].Cause)
	}
	if rel := since(h, t0, EventReleased); len(rel) > 0 {
		t.Errorf("%d releases after a map was put back unchanged", len(rel))
	}
}

// The map key rewritten by hand with the same version and another table:
// members follow it like any map, through the barrier, and the rink
// heals by itself.
func TestMapRewrittenSameVersion(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, ms, _ := cluster(t, h, 3, WithSlots(64))
	settle(t, h, ms...)
	cli := newClient(t)
	key := newKeys(name).Map()
	m, _, err := readWhole(cli, name, 64)
	if err != nil {
		t.Fatal(err)
	}
	for s := range m.Table {
		m.Table[s] = (m.Table[s] + 1) % int32(len(m.Members))
	}
	t0 := time.Now()
	if _, err := cli.Put(context.Background(), key, string(m.Encode())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every member on a map newer than the rewrite", func() bool {
		for _, r := range ms {
			if r.Rank().Version <= m.Version || r.Rank().Index < 0 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)
	h.check(t)
	if f := since(h, t0, EventFenced); len(f) > 0 {
		t.Errorf("%d fences after the map was rewritten (first: %s, %v)", len(f), f[0].Member, f[0].Cause)
	}
	if o := ms[0].ownersNow(); !slices.Equal(o.Table, m.Table) {
		t.Errorf("the rewritten table was not kept: the leader moved slots again")
	}
}
