package rink

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func FuzzDecodeLoad(f *testing.F) {
	f.Add([]byte(`{"v":1,"slots":[[0,1.5,3,2],[7,0,0,1]]}`))
	f.Add([]byte(`{"v":1,"slots":[[1e300,1,1,1]]}`))
	f.Add([]byte(`{"v":1,"slots":[[0,1.5,3,2]],"await":[[0,3],[5,2],[5,1],[70,1],[6,-1],[7,0.5],[8]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, ok := wire.DecodeLoad(data, 64)
		if !ok && (len(rep.Slots) > 0 || len(rep.Await) > 0) {
			t.Fatal("entries from a value that does not decode")
		}
		seen := map[int]bool{}
		for _, s := range rep.Slots {
			if s.Slot < 0 || s.Slot >= 64 || seen[s.Slot] || !(s.Rate >= 0) || math.IsInf(s.Rate, 1) || !(s.Age >= 0) || s.Roles < 0 {
				t.Fatalf("entry %+v let through", s)
			}
			seen[s.Slot] = true
		}
		for _, a := range rep.Await {
			if a.Slot < 0 || a.Slot >= 64 || seen[a.Slot] || a.Roles < 0 {
				t.Fatalf("await entry %+v let through", a)
			}
			seen[a.Slot] = true
		}
		if ok {
			again, ok2 := wire.DecodeLoad(rep.Encode(), 64)
			if !ok2 || len(again.Slots) != len(rep.Slots) || !slices.Equal(again.Await, rep.Await) {
				t.Fatalf("re-encoded report does not decode alike: %s", rep.Encode())
			}
		}
	})
}

// AddLoad is on the holders' hot path: it must not allocate.
func TestAddLoadAllocs(t *testing.T) {
	r := &Rink{opts: options{slots: 1024}, load: newLoadAcc(1024)}
	if n := testing.AllocsPerRun(1000, func() { r.AddLoad("BTC/ETH", 1.5) }); n != 0 {
		t.Errorf("AddLoad allocates %v times per call", n)
	}
	if got := r.load.acc.load(wire.SlotOf("BTC/ETH", 1024)); got != 1501.5 {
		t.Errorf("accumulated %v, want 1501.5", got) // AllocsPerRun runs it once more to warm up
	}
}

func BenchmarkAddLoad(b *testing.B) {
	r := &Rink{opts: options{slots: 1024}, load: newLoadAcc(1024)}
	roles := []string{"BTC/ETH", "partition:42", "tenant-7", "leader"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.AddLoad(roles[i&3], 1)
			i++
		}
	})
}

// Members report their load and awaited roles, observers see them, and a
// member writes its load key at most once per interval, and not at all
// while its figures hold still.
func TestLoadReported(t *testing.T) {
	name := rinkName(t)
	// Balanced by count: the roles stay where they hash (by load, the
	// leader would even out the three and the one).
	opts := []Option{WithLoadInterval(100 * time.Millisecond), WithLoadWindow(time.Second), WithSlots(64), WithImbalanceTolerance(0)}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	ob, err := NewObserver(newClient(t), name, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	eventually(t, 10*time.Second, "both ranked", func() bool { return ob.State().Version > 0 && len(ob.State().Members) == 2 })
	// One role of each member, awaited, and two more of a's.
	var ra, rb []string
	for i := 0; len(ra) < 3 || len(rb) < 1; i++ {
		role := "role-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		switch o, _ := ob.Owner(role); {
		case o == "a" && len(ra) < 3:
			ra = append(ra, role)
		case o == "b" && len(rb) < 1:
			rb = append(rb, role)
		}
	}
	for _, role := range ra {
		if _, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.AwaitRoleContext(ctxTimeout(t, 10*time.Second), rb[0]); err != nil {
		t.Fatal(err)
	}
	member := func(n string) MemberState {
		for _, m := range ob.State().Members {
			if m.Name == n {
				return m
			}
		}
		return MemberState{}
	}
	eventually(t, 10*time.Second, "awaited roles reported", func() bool { return member("a").Roles == 3 && member("b").Roles == 1 })

	// a does three times b's work.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, 5*time.Millisecond, func() {
			a.AddLoad(ra[0], 2)
			a.AddLoad(ra[1], 1)
			b.AddLoad(rb[0], 1)
		})
	}()
	defer func() { cancel(); <-done }()
	eventually(t, 10*time.Second, "loads reported in the ratio of the work", func() bool {
		la, lb := member("a").Load, member("b").Load
		return lb > 0 && la/lb > 2.5 && la/lb < 3.5
	})

	// At most one write per interval.
	cli := newClient(t)
	key := newKeys(name).Load("a")
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp, err)
	}
	v0, t0 := resp.Kvs[0].Version, time.Now()
	eventually(t, 10*time.Second, "a second gone by", func() bool { return time.Since(t0) > time.Second })
	resp, err = cli.Get(ctxTimeout(t, 5*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp, err)
	}
	if n, most := resp.Kvs[0].Version-v0, int64(time.Since(t0)/(100*time.Millisecond))+1; n > most {
		t.Errorf("%d writes of the load key in %v, want at most %d", n, time.Since(t0), most)
	}

	// Once the work stops and the rates have decayed, the summary stays
	// still and nothing is written.
	cancel()
	<-done
	eventually(t, 20*time.Second, "the load decayed", func() bool { return member("a").Load == 0 && member("b").Load == 0 })
	resp, _ = cli.Get(ctxTimeout(t, 5*time.Second), key)
	v1, t1 := resp.Kvs[0].Version, time.Now()
	eventually(t, 10*time.Second, "a second gone by", func() bool { return time.Since(t1) > time.Second })
	resp, _ = cli.Get(ctxTimeout(t, 5*time.Second), key)
	if n := resp.Kvs[0].Version - v1; n != 0 {
		t.Errorf("%d writes of a load key that did not change", n)
	}
}

// A member's first load summary is written with its key, in the join's
// transaction (a write less per join), and the reporter does not write the
// same summary again.
func TestLoadWrittenWithKey(t *testing.T) {
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"), WithLoadInterval(100*time.Millisecond))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	k := newKeys(name)
	cli := newClient(t)
	resp, err := cli.Txn(ctxTimeout(t, 5*time.Second)).Then(clientv3.OpGet(k.Member("a")), clientv3.OpGet(k.Load("a"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	mk, lk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(mk) != 1 || len(lk) != 1 {
		t.Fatalf("member key %v, load key %v", mk, lk)
	}
	if lk[0].CreateRevision != mk[0].CreateRevision || lk[0].Lease != mk[0].Lease {
		t.Fatalf("load key created at %d on lease %x, member key at %d on lease %x: not in one transaction",
			lk[0].CreateRevision, lk[0].Lease, mk[0].CreateRevision, mk[0].Lease)
	}
	// Idle, it holds every slot now: other slots, no load, nothing new to
	// say (see loadChanged). Two intervals on, the key is as written (or
	// measured once).
	v0, t0 := lk[0].Version, time.Now()
	eventually(t, 10*time.Second, "half a second gone by", func() bool { return time.Since(t0) > 500*time.Millisecond })
	resp2, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Load("a"))
	if err != nil || len(resp2.Kvs) != 1 {
		t.Fatalf("load key of a: %v %v", resp2, err)
	}
	if n := resp2.Kvs[0].Version - v0; n > 1 {
		t.Fatalf("an idle member rewrote its load summary %d times in half a second", n)
	}
}

// A member that awaits roles before it owns a slot reports them once a
// map gives it slots, not at its next load interval: in a rink that has
// seen no load, they are what turns the leader to balancing by load, and
// until it hears of them it says that the rink is at rest, balanced by
// count, and moves slots a load interval later (issue 44: the flake of
// TestNewLeaderKeepsLoadBalance, whose first member's summary went out
// before the map that ranked it, and said nothing of its roles).
func TestGainedSlotsReportRoles(t *testing.T) {
	name := rinkName(t)
	// (b's first load interval ends after the test: only an early write
	// can tell the leader. Early writes come at most one per tenth of an
	// interval, 2 s: the delay ranks b after b's last.)
	opts := []Option{WithLoadInterval(20 * time.Second), WithSlots(64)}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"), WithRebalanceDelay(4*time.Second))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	set, err := b.Watch(Handler{Assigned: func(context.Context, string) {}}, partitions(256)...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// b awaits roles in every slot and owns none: what it writes as it
	// joins and as it awaits them says nothing of them.
	eventually(t, 10*time.Second, "b ranked", func() bool { return b.Rank().Index >= 0 && len(a.ownersNow().Members) == 2 })
	if a.ownersNow().ByLoad {
		t.Fatal("the map that ranks b is balanced by load: the test shows nothing")
	}
	eventually(t, 10*time.Second, "the rink balanced by load (b's roles reported)", func() bool { return a.ownersNow().ByLoad })
}

// TestDeletedLoadKeyIsWrittenAgain: an operator deletes a member's load
// key in a rink balanced by load. The member does not follow its load key,
// and its summary does not change, so it would not write it again; the
// leader, lacking it, would run no load round for good. The leader names
// it in the floor's "unreported", and the member writes its summary again
// at once; the floor then names nobody.
func TestDeletedLoadKeyIsWrittenAgain(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	opts := []Option{WithLoadInterval(time.Second), WithLoadWindow(3 * time.Second), WithSlots(16), WithImbalanceTolerance(0.1)}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	waitSettled(t, a, b)
	cli := newClient(t)
	k := newKeys(name)
	floor := func() wire.AckFloor {
		resp, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Floor())
		if err != nil || len(resp.Kvs) != 1 {
			return wire.AckFloor{}
		}
		return wire.DecodeFloor(resp.Kvs[0].Value)
	}
	if f := floor(); len(f.Unreported) != 0 {
		t.Fatalf("every member has reported, but the floor names %v", f.Unreported)
	}
	// (The summary written with the key says it measured nothing yet; the
	// first measured one follows an interval later, and then none while
	// nothing changes.)
	eventually(t, 10*time.Second, "b's first measured summary", func() bool {
		resp, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Load("b"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Version >= 2 && !strings.Contains(string(resp.Kvs[0].Value), "unmeasured")
	})
	if _, err := cli.Delete(ctxTimeout(t, 5*time.Second), k.Load("b")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b's load key written again", func() bool {
		resp, err := cli.Get(ctxTimeout(t, 5*time.Second), k.Load("b"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
	})
	eventually(t, 10*time.Second, "a floor that names nobody unreported", func() bool {
		f := floor()
		return f.Version > 0 && len(f.Unreported) == 0
	})
}
