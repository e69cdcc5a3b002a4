package rink

// A review of replicas and zones (issue 26) wrote these tests; each of the
// first four failed on the code it reviewed, and passes with its fix:
// resyncReplicas (secondary.go), heirs placed as the newest secondaries
// (placeAround), and placedAround (warmup.go). The last guards planning
// again with capacities, load and waiting members.

import (
	"fmt"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ---------------------------------------------------------------------
// Helpers

// replicaBare makes bare member self (see newBare) of a rink of k
// replicas per slot over S slots.
func replicaBare(t *testing.T, self string, S, k int, createRev int64) *bare {
	b := newBare(t, self, S, createRev)
	b.r.opts.replicas = k
	b.r.secs = newSlotStates(S)
	return b
}

// replicaMap is a map of schema 4 with k replicas per slot: rows lists
// each entry of the table (row 0, the primaries, first), as indexes of
// members.
func replicaMap(version int64, k int, members []string, rows ...int) wire.Map {
	return wire.Map{Schema: wire.SchemaReplicas, Version: version, Slots: len(rows) / k, Replicas: k, Members: members, Table: tableOf(rows...)}
}

// holdsReplica reports whether bare member b counts as holding slot s, as
// primary or secondary: its membership of s's replica set has started
// (see secondary.go), and a context of the slot's, primary's or
// secondary's, is live.
func holdsReplica(b *bare, s int) bool {
	e := b.r.st.reps[s]
	if e == nil || !e.started {
		return false
	}
	live := func(st *slotState) bool { return st != nil && st.ctx != nil && st.ctx.Err() == nil }
	return live(b.r.slots.load(s)) || live(b.r.secs.load(s))
}

// ---------------------------------------------------------------------
// Finding 1: a member that skips map seqs (a listing after a broken,
// compacted watch) keeps a started membership of a replica set across
// the maps it missed, even when one of them left it out of the set. The
// barrier's argument needs every holder to have been named in every map
// from its gain to its applied one; this one was not, and a member that
// joined the set in the missed map starts beside it while a member that
// the missed map still named has not let go: k+1 holders.
//
// One slot. k = 3: v5 [P, M, X]; v6 [P, N, X]; v7 [P, M, N].
// k = 2:           v5 [M, X];    v6 [X, N];    v7 [M, N].
// M misses v6 (it lists the rink after v7). N joined at v6 and waits for
// M; M acknowledges v7 (a bound past v6), so N starts. X, named in v6,
// has not applied v7 yet (a slow watch), and holds. So k+1 members hold
// the slot at once. (With one replica the same gap is harmless: the
// floor that shows M's acknowledgement of v7 reaches N after v7, which no
// longer gives N the slot; here v7 still names N.)
func TestRT26SkippedSeqKeepsMembership(t *testing.T) {
	for _, c := range []struct {
		k          int
		names      []string
		v5, v6, v7 []int
	}{
		{3, []string{"P", "M", "X", "N"}, []int{0, 1, 2}, []int{0, 3, 2}, []int{0, 1, 3}},
		{2, []string{"M", "X", "N"}, []int{0, 1}, []int{1, 2}, []int{0, 2}},
	} {
		t.Run(fmt.Sprint("k=", c.k), func(t *testing.T) {
			const L = 10
			k, names := c.k, c.names
			created := map[string]int64{}
			for i, n := range names {
				created[n] = int64(i + 1)
			}
			kv := func(name string, modRev, ack int64) *mvccpb.KeyValue {
				lin := int64(L)
				if ack == 0 {
					lin = 0
				}
				return memberKV(name, created[name], modRev, ack, lin)
			}
			all := func(modRev, ack int64) (out []*mvccpb.KeyValue) {
				for _, n := range names {
					out = append(out, kv(n, modRev, ack))
				}
				return out
			}
			v5, v6, v7 := replicaMap(5, k, names, c.v5...), replicaMap(6, k, names, c.v6...), replicaMap(7, k, names, c.v7...)
			cores := map[string]*bare{}
			for _, n := range names {
				b := replicaBare(t, n, 1, k, created[n])
				b.put(all(created[n], 0)...)
				b.put(append([]*mvccpb.KeyValue{mapKV(v5, L, L)}, all(11, 5)...)...)
				cores[n] = b
			}
			for _, n := range v5.ReplicaNames(0) {
				if !holdsReplica(cores[n], 0) {
					t.Fatalf("%s does not hold the slot at v5", n)
				}
			}
			gainM := cores["M"].r.st.reps[0].gain
			// v6 (N joins the set, M leaves it): everyone but M applies and
			// acknowledges it; M's watch is broken and it sees nothing of it.
			var acks6 []*mvccpb.KeyValue
			for _, n := range names {
				if n != "M" {
					acks6 = append(acks6, kv(n, 13, 6))
				}
			}
			for _, n := range names {
				if n != "M" {
					cores[n].put(append([]*mvccpb.KeyValue{mapKV(v6, L, 12)}, acks6...)...)
				}
			}
			if holdsReplica(cores["N"], 0) {
				t.Fatal("N started at v6 while M, which v5 names, has not acknowledged v6")
			}
			// v7 (M back, X leaves the set). M lists the rink after it (its
			// watch was compacted) and acknowledges v7; so do the others but
			// X, whose watch has not delivered v7 yet. N applies v7 and then
			// sees the acknowledgements.
			var acks7 []*mvccpb.KeyValue
			for _, n := range names {
				if n != "X" {
					acks7 = append(acks7, kv(n, 15, 7))
				} else {
					acks7 = append(acks7, kv(n, 13, 6))
				}
			}
			cores["M"].snapshot(15, append([]*mvccpb.KeyValue{mapKV(v7, L, 14)}, acks7...)...)
			for _, n := range names {
				if n != "M" && n != "X" {
					cores[n].put(mapKV(v7, L, 14))
					cores[n].put(acks7...)
				}
			}
			var holders []string
			for _, n := range names {
				if holdsReplica(cores[n], 0) {
					holders = append(holders, n)
				}
			}
			if e := cores["M"].r.st.reps[0]; e != nil {
				t.Logf("M's membership: gain %d (was %d at v5), started %v", e.gain, gainM, e.started)
			}
			if len(holders) > k {
				t.Fatalf("%d members hold slot 0 at once in a rink of %d replicas: %v (M kept its membership from v5 across v6, which it missed and which left it out)", len(holders), k, holders)
			}
		})
	}
}

// ---------------------------------------------------------------------
// Finding 3 (minor): with WithWarmup, a map that announces moves holds
// every live member's entries of the map before it, in every row, and
// takes only the orphans from the plan. A crash's promoted slot then has
// its new primary in row 0 (from the plan) and the same member in its
// secondary row (from the map before, where it was the secondary): the
// slot has no secondary for as long as the announcement lasts (up to the
// warm-up time), though the plan placed one; the promoted primary's crash
// meanwhile goes cold.
func TestRT26WarmupHoldDropsPromotedSecondaries(t *testing.T) {
	const S, k = 64, 2
	names := []string{"a", "b", "c", "d"}
	cur := planReplicated(k, S, names, nil)
	b := replicaBare(t, "a", S, k, 1)
	r := b.r
	r.opts.warmup = time.Minute
	r.st.cur = cur
	r.st.members = map[string]memberInfo{}
	for i, n := range []string{"a", "b", "d", "e"} { // c crashed; e waits, ready
		r.st.members[n] = memberInfo{createRev: int64(i + 1)}
	}
	r.st.lead = &leadership{since: map[string]time.Time{}, warmAcks: map[string]int64{}}
	live := []string{"a", "b", "d", "e"}
	in := plan.Input{Live: live, Ready: map[string]bool{"e": true}, Replicas: k}
	next := plan.PlanMap(cur, in)
	checkReplicated(t, next, k)
	r.holdForWarmup(&next, func() wire.Map { return plan.PlanMap(cur, in) }, time.Now())
	if len(next.Incoming) == 0 {
		t.Fatal("no announcement: the test needs the newcomer's moves announced")
	}
	short := 0
	for s := range S {
		if cur.Owner(s) != "c" {
			continue
		}
		if got := next.ReplicaNames(s); len(got) < k {
			short++
			if short <= 3 {
				t.Errorf("slot %d: replicas %v -> %v in the announcing map (c crashed): no secondary", s, cur.ReplicaNames(s), got)
			}
		}
	}
	if short > 0 {
		t.Errorf("%d of c's slots have no secondary in the map that announces the newcomer's moves", short)
	}
}

// Finding 3b (minor): keepRound puts a load round's announced moves back
// into the primaries' row of a map whose secondaries were placed around
// the old primaries: a slot moved to its secondary names that member as
// primary and as its secondary (no secondary), and the old primary, which
// held the role warmest, leaves the replica set.
func TestRT26KeepRoundLeavesNoSecondary(t *testing.T) {
	const S, k = 32, 2
	names := []string{"a", "b", "c"}
	cur := planReplicated(k, S, names, nil)
	b := replicaBare(t, "a", S, k, 1)
	r := b.r
	r.st.cur = cur
	// The round moves slot 0 to its secondary.
	sec := cur.ReplicaNames(0)[1]
	r.st.lead = &leadership{roundMoves: map[int]string{0: sec}}
	next := plan.PlanMap(cur, plan.Input{Live: names, Replicas: k})
	r.keepRound(&next)
	if got := next.ReplicaNames(0); len(got) < k {
		t.Errorf("slot 0: replicas %v -> %v after keepRound moved its primary to %s: no secondary", cur.ReplicaNames(0), got, sec)
	}
}
