package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckHoldersFails: the holders check finds more than k members acting
// on a role at once, whether secondaries or a stale primary are the extra
// one, and windows that only touch count as overlapping.
func TestCheckHoldersFails(t *testing.T) {
	tests := []struct {
		name string
		k    int
		recs []Record
		want string // substring of the first violation
		at   int64  // its time, ms
	}{
		{"a third member acquires a secondary and acts while two act", 2, []Record{
			rec(0, "a", Acquire, "r", 5), rec(50, "a", Act, "r", 5), rec(1000, "a", Act, "r", 5),
			rec(0, "b", AcquireSecondary, "r", 1), rec(50, "b", ActSecondary, "r", 1), rec(1000, "b", ActSecondary, "r", 1),
			rec(500, "c", AcquireSecondary, "r", 3), rec(550, "c", ActSecondary, "r", 3),
		}, "holders: 3 members acted on the role at 0.500s, more than 2 replicas: a (a, primary, token 5) acquired at 0.000s, acted 2 times from 0.050s to 1.000s; " +
			"b (b, secondary #1) acquired at 0.000s, acted 2 times from 0.050s to 1.000s; c (c, secondary #3) acquired at 0.500s, acted 1 times from 0.550s to 0.550s", 500},
		{"a stopped secondary acts after resuming, beside its successor", 2, []Record{
			rec(0, "a", Acquire, "r", 5), rec(50, "a", Act, "r", 5), rec(6000, "a", Act, "r", 5),
			rec(0, "b", AcquireSecondary, "r", 1), rec(50, "b", ActSecondary, "r", 1),
			rec(3000, "c", AcquireSecondary, "r", 2), rec(3050, "c", ActSecondary, "r", 2), rec(6000, "c", ActSecondary, "r", 2),
			rec(5000, "b", ActSecondary, "r", 1), // b resumed and acted: its window spans 0.000s to 5.000s
		}, "holders: 3 members acted on the role at 3.000s", 3000},
		{"a primary and a secondary beside the secondary promoted, with one replica", 1, []Record{
			rec(0, "a", Acquire, "r", 5), rec(50, "a", Act, "r", 5), rec(100, "a", Act, "r", 5),
			rec(100, "b", Acquire, "r", 9), rec(150, "b", Act, "r", 9), // touches a's last action
		}, "holders: 2 members acted on the role at 0.100s, more than 1 replicas", 100},
		{"a late acquisition acted on", 2, []Record{
			rec(0, "a", Acquire, "r", 5), rec(50, "a", Act, "r", 5), rec(500, "a", Act, "r", 5),
			rec(0, "b", AcquireSecondary, "r", 1), rec(500, "b", ActSecondary, "r", 1),
			rec(300, "c", Acquire, "r", 4), rec(310, "c", Act, "r", 4),
		}, "holders: 3 members acted on the role at 0.300s", 300},
		{"two processes under one name are two members", 2, []Record{
			rec(0, "a", Acquire, "r", 5), rec(500, "a", Act, "r", 5),
			procRec(rec(0, "x", AcquireSecondary, "r", 1), "x.1"), procRec(rec(400, "x", ActSecondary, "r", 1), "x.1"),
			procRec(rec(200, "x", AcquireSecondary, "r", 1), "x.2"), procRec(rec(300, "x", ActSecondary, "r", 1), "x.2"),
		}, "holders: 3 members acted on the role at 0.200s, more than 2 replicas: a (a, primary, token 5) acquired at 0.000s, acted 1 times from 0.500s to 0.500s; " +
			"x.1 (x, secondary #1) acquired at 0.000s, acted 1 times from 0.400s to 0.400s; x.2 (x, secondary #1)", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := CheckHolders(0, tt.recs, tt.k)
			if len(rep.Violations) == 0 {
				t.Fatalf("no violation, want %q", tt.want)
			}
			v := rep.Violations[0]
			if v.Kind != "holders" || v.Role != "r" || !strings.Contains(v.Detail, tt.want) {
				t.Fatalf("violation %+v, want %q", v, tt.want)
			}
			if v.Mono != tt.at*1e6 {
				t.Fatalf("violation at %d, want %d ms", v.Mono, tt.at)
			}
		})
	}
	// One violation per episode: a fourth member during the first episode
	// adds none; a new episode after it ends adds one.
	recs := []Record{
		rec(0, "a", Acquire, "r", 5), rec(10, "a", Act, "r", 5), rec(2000, "a", Act, "r", 5),
		rec(0, "b", AcquireSecondary, "r", 1), rec(10, "b", ActSecondary, "r", 1), rec(2000, "b", ActSecondary, "r", 1),
		rec(100, "c", AcquireSecondary, "r", 1), rec(110, "c", ActSecondary, "r", 1), rec(300, "c", ActSecondary, "r", 1),
		rec(200, "d", AcquireSecondary, "r", 1), rec(210, "d", ActSecondary, "r", 1),
		rec(1000, "e", AcquireSecondary, "r", 1), rec(1010, "e", ActSecondary, "r", 1),
		rec(0, "a", Acquire, "q", 6), rec(10, "a", Act, "q", 6), // another role, alone
	}
	rep := CheckHolders(0, recs, 2)
	if len(rep.Violations) != 2 || rep.Violations[0].Mono != 100e6 || rep.Violations[1].Mono != 1000e6 {
		t.Fatalf("violations %v, want two, at 0.100s and 1.000s", rep.Violations)
	}
	if rep.SecondaryAcquisitions != 4 || rep.SecondaryActions != 6 || rep.Windows != 6 {
		t.Fatalf("report %+v", rep)
	}
}

// TestCheckHoldersValidHistory: a valid history of a role with two
// replicas passes — a secondary moves, a crashed primary's secondary is
// promoted, a secondary stopped past its lease logs its release late
// without acting, a secondary's acquisition is written late and never
// acted on, a primary's acquisition is written late beside a newer one,
// and the primary's checks pass too.
func TestCheckHoldersValidHistory(t *testing.T) {
	recs := []Record{
		// a is the primary from the start; b its secondary.
		rec(0, "a", Acquire, "r", 5), rec(50, "a", Act, "r", 5), rec(1000, "a", Act, "r", 5),
		rec(0, "b", AcquireSecondary, "r", 1), rec(50, "b", ActSecondary, "r", 1), rec(300, "b", ActSecondary, "r", 1),
		rec(320, "b", ReleaseSecondary, "r", 1),
		// The secondary moves to c after b released it.
		rec(330, "c", AcquireSecondary, "r", 1), rec(380, "c", ActSecondary, "r", 1), rec(2000, "c", ActSecondary, "r", 1),
		// d's acquisition record queued behind fsyncs: stamped after d's
		// holding had ended (moved back at once), never acted on.
		rec(700, "d", AcquireSecondary, "r", 4), rec(701, "d", ReleaseSecondary, "r", 4),
		// a crashes after 1.000s. c is promoted: its secondary ends, and
		// its primary starts with a higher token. c acted as a secondary up
		// to the instant its primary started: one member, two windows that
		// touch.
		rec(3500, "c", ActSecondary, "r", 1), rec(3500, "c", ReleaseSecondary, "r", 1),
		rec(3500, "c", Acquire, "r", 9), rec(3550, "c", Act, "r", 9), rec(5000, "c", Act, "r", 9),
		// A new secondary, e.
		rec(3600, "e", AcquireSecondary, "r", 1), rec(3650, "e", ActSecondary, "r", 1), rec(5000, "e", ActSecondary, "r", 1),
		// f was a secondary, stopped at 0.400s past its lease: it logs its
		// release when it resumes, without acting.
		rec(390, "f", AcquireSecondary, "q", 1), rec(400, "f", ActSecondary, "q", 1),
		rec(0, "g", Acquire, "q", 3), rec(50, "g", Act, "q", 3), rec(5000, "g", Act, "q", 3),
		rec(2500, "h", AcquireSecondary, "q", 1), rec(2550, "h", ActSecondary, "q", 1), rec(5000, "h", ActSecondary, "q", 1),
		rec(4000, "f", ReleaseSecondary, "q", 1),
		// A primary's acquisition recorded late (token 4 below c's 9), not
		// acted on.
		rec(4100, "i", Acquire, "r", 4), rec(4101, "i", Release, "r", 4),
	}
	if rep := CheckHolders(0, slices.Clone(recs), 2); len(rep.Violations) > 0 {
		t.Fatalf("violations: %v", rep.Violations)
	} else if rep.SecondaryAcquisitions != 6 || rep.Windows != 8 {
		t.Fatalf("report %+v", rep)
	}
	if rep := Check(slices.Clone(recs)); len(rep.Violations) > 0 {
		t.Fatalf("primary violations: %v", rep.Violations)
	}
	// With one replica fewer, the same history has a secondary too many.
	if rep := CheckHolders(0, slices.Clone(recs), 1); len(rep.Violations) == 0 {
		t.Fatal("no violation with one replica")
	}
}

// TestSecondaryLiveness: every role must have its secondaries at the
// deadline, on distinct live processes other than its primary's.
func TestSecondaryLiveness(t *testing.T) {
	p := func(r Record, proc string) Record { r.Proc = proc; return r }
	recs := []Record{
		// r1: primary a, secondary b throughout.
		rec(0, "a", Acquire, "r1", 5), rec(0, "b", AcquireSecondary, "r1", 1),
		// r2: its secondary released during the storm, c gets it 2 s
		// after the heal.
		rec(0, "a", Acquire, "r2", 6), rec(0, "b", AcquireSecondary, "r2", 2), rec(500, "b", ReleaseSecondary, "r2", 2),
		rec(3000, "c", AcquireSecondary, "r2", 1),
		// r3: only the primary's own process has a secondary record (not
		// released yet: it counts for nothing).
		rec(0, "a", Acquire, "r3", 7), rec(0, "a", AcquireSecondary, "r3", 3),
		// r4: its secondary's process was killed.
		rec(0, "a", Acquire, "r4", 8), p(rec(0, "d", AcquireSecondary, "r4", 1), "d.1"),
		// r5: a secondary only after the deadline.
		rec(0, "a", Acquire, "r5", 9), rec(9500, "c", AcquireSecondary, "r5", 2),
		// r6: released at the deadline's instant... no: just before it.
		rec(0, "a", Acquire, "r6", 10), rec(0, "b", AcquireSecondary, "r6", 4), rec(8999, "b", ReleaseSecondary, "r6", 4),
		// r7: two secondaries on one process count once.
		rec(0, "a", Acquire, "r7", 11), rec(0, "b", AcquireSecondary, "r7", 5), rec(10, "b", AcquireSecondary, "r7", 6),
	}
	alive := func(proc string, mono int64) bool { return proc != "d.1" }
	healed, deadline := int64(1000e6), int64(9000e6)
	roles := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	rep := SecondaryLiveness(0, recs, roles, alive, healed, deadline, 1)
	got := map[string]Violation{}
	for _, v := range rep.Violations {
		got[v.Role] = v
	}
	want := map[string]string{
		"r3": "secondaries: 0 of 1 at 9.000s, 8s after the heal at 1.000s (primary a; secondaries []); the last secondary holdings: a #3 acquired at 0.000s, not released; not again",
		"r4": "secondaries: 0 of 1",
		"r5": "had them at 9.500s (8.5s after the heal)",
		"r6": "the last secondary holdings: b #4 acquired at 0.000s, released at 8.999s",
	}
	for role, detail := range want {
		if v, ok := got[role]; !ok || v.Kind != "secondaries" || !strings.Contains(v.Detail, detail) {
			t.Errorf("%s: %+v, want %q", role, v, detail)
		}
	}
	if len(got) != len(want) {
		t.Errorf("violations %v, want %d", rep.Violations, len(want))
	}
	if rep.Recovered["r1"] != 0 || rep.Recovered["r2"] != 2*time.Second {
		t.Errorf("recovered %v", rep.Recovered)
	}
	if h := rep.Holders["r1"]; !slices.Equal(h, []string{"a", "b"}) {
		t.Errorf("holders of r1 %q", h)
	}
	// Two secondaries wanted: r7's two holdings on b are one.
	rep = SecondaryLiveness(0, recs, []string{"r7"}, alive, healed, deadline, 2)
	if len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0].Detail, "secondaries: 1 of 2") {
		t.Errorf("r7: %v", rep.Violations)
	}
	// None wanted (a rink of one member): always satisfied.
	if rep := SecondaryLiveness(0, recs, []string{"r4"}, alive, healed, deadline, 0); len(rep.Violations) != 0 {
		t.Errorf("none wanted: %v", rep.Violations)
	}
}

// TestStormDeckWithoutZones: without zones (and without -restore) the storm
// deals the deck it dealt before "zone-loss" existed, in the same seeded
// order; with zones, "zone-loss" is in it.
func TestStormDeckWithoutZones(t *testing.T) {
	before := []string{ // StormOps before issue 26
		"join", "join-reused", "join-leave", "leave-leader", "leave-member", "kill9",
		"partition", "sigstop", "etcd-kill", "cut-all",
		"map-reput", "map-rewrite", "map-delete", "floor-delete", "member-key-delete",
		"stray-member-empty", "stray-member-space", "stray-member-slash", "stray-garbage", "stray-election",
		"snapshot-save", "snapshot-restore",
		"member-key-delete-cut", "same-name-replace", "stray-member-leaseless", "stranger-member", "acks-delete",
	}
	for _, restore := range []bool{false, true} {
		for seed := uint64(0); seed < 50; seed++ {
			r := newRun(Config{Seed: seed, Restore: restore})
			old := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return k == "snapshot-restore" && !restore })
			rng := newRand(seed)
			for range 3 {
				want := slices.Clone(old)
				rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
				if got := r.newDeck(StormOps); !slices.Equal(got, want) {
					t.Fatalf("seed %d: deck %q, want %q", seed, got, want)
				}
			}
		}
	}
	r := newRun(Config{Seed: 1, Zones: 3})
	if deck := r.newDeck(StormOps); !slices.Contains(deck, "zone-loss") || len(deck) != len(StormOps)-1-len(keyOps)-len(sidecarOps) {
		t.Fatalf("deck with zones: %q", deck)
	}
}

// TestStormDeckKeys: the deletions of live members' keys are the last of
// StormOps and dealt only with Config.Keys (without, the deck is the one
// dealt before they existed: TestStormDeckWithoutZones), even when named
// in Config.Ops.
func TestStormDeckKeys(t *testing.T) {
	if n := len(StormOps) - len(sidecarOps); !slices.Equal(StormOps[n-len(keyOps):n], keyOps) || !slices.Equal(StormOps[n:], sidecarOps) {
		t.Fatalf("keyOps %q, then sidecarOps %q, are not the last of StormOps %q", keyOps, sidecarOps, StormOps)
	}
	for seed := uint64(0); seed < 20; seed++ {
		if deck := newRun(Config{Seed: seed}).newDeck(keyOps); len(deck) != 0 {
			t.Fatalf("seed %d: dealt %q without Keys", seed, deck)
		}
		deck := newRun(Config{Seed: seed, Keys: true}).newDeck(StormOps)
		if len(deck) != len(StormOps)-2-len(sidecarOps) || !slices.ContainsFunc(deck, keyOp) {
			t.Fatalf("seed %d: deck with Keys: %q", seed, deck)
		}
		for _, k := range keyOps {
			if !slices.Contains(deck, k) {
				t.Fatalf("seed %d: %s not in the deck with Keys: %q", seed, k, deck)
			}
		}
		if deck := newRun(Config{Seed: seed, Sidecar: true}).newDeck(StormOps); !slices.Contains(deck, "app-deaf") || slices.ContainsFunc(deck, keyOp) {
			t.Fatalf("seed %d: deck with Sidecar: %q", seed, deck)
		}
	}
}

// TestStormZoneFor: a new name goes to the zone with the fewest live
// members; a name keeps its zone for good.
func TestStormZoneFor(t *testing.T) {
	r := newRun(Config{Zones: 3})
	r.st = &stormState{zoneOf: map[string]int{}}
	add := func(name string) *proc {
		p := &proc{name: name, zone: r.zoneFor(name)}
		r.members = append(r.members, p)
		return p
	}
	var zs []int
	for _, n := range []string{"w0", "w1", "w2", "w3", "w4"} {
		zs = append(zs, add(n).zone)
	}
	if !slices.Equal(zs, []int{0, 1, 2, 0, 1}) {
		t.Fatalf("zones %v", zs)
	}
	// Zone 0 lost: its members gone; a new name goes to zone 0, an old
	// name to its own zone.
	r.members = slices.DeleteFunc(r.members, func(p *proc) bool { return p.zone == 0 })
	if z := r.zoneFor("w5"); z != 0 {
		t.Fatalf("w5 in zone %d, want 0", z)
	}
	if z := r.zoneFor("w4"); z != 1 {
		t.Fatalf("w4 in zone %d, want 1 (its own)", z)
	}
	// A member told to leave is not live.
	r.members[0].leaving = true // w1, zone 1
	if z := r.zoneFor("w6"); z != 0 {
		t.Fatalf("w6 in zone %d, want 0 (zone 1 has one live, zone 0 none)", z)
	}
	if r := newRun(Config{}); r.zoneFor("w0") != -1 {
		t.Fatal("a zone without zones")
	}
}

func procRec(r Record, proc string) Record { r.Proc = proc; return r }
