package sim

import (
	"strings"
	"testing"
	"time"
)

// TestUnleasedElectionKey plays histories in which an operator puts a
// live member's election key again without its lease (election-unleased,
// played only when named), half the time with the leader cut off first:
// the key is a stray, which the candidate just above it deletes as it
// campaigns, or the leader sweeps. No violation, and no stray election
// key is left at the end (it would keep every newer candidate from being
// elected).
func TestUnleasedElectionKey(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"election-unleased", "crash", "join", "partition"}
	put := 0
	for seed := uint64(1); seed <= seedsToPlay(t, cfg, 30); seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s)", seed, res.Violation, replayCommand(cfg, seed))
		}
		if res.StrayElections != 0 {
			t.Fatalf("seed %d: %d stray election keys left at the end (replay: %s)", seed, res.StrayElections, replayCommand(cfg, seed))
		}
		put += res.Ops["election-unleased"]
	}
	if put == 0 {
		t.Fatal("no election key put again without its lease")
	}
	t.Logf("%d election keys put again without their leases", put)
}

// TestPausedJoin plays histories in which a member restarts and its new
// process pauses, for between half a TTL and two, as its lease is
// granted (pause-joining, played only when named): a join answered after
// the deadline its lease allows gives the lease up and joins again. No
// violation: the paused joiner acts on nothing with a lease it cannot
// trust, and joins in the end.
func TestPausedJoin(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"pause-joining", "crash", "partition"}
	cfg.Trace = true
	paused, slow := 0, 0
	for seed := uint64(1); seed <= seedsToPlay(t, cfg, 20); seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s)", seed, res.Violation, replayCommand(cfg, seed))
		}
		paused += strings.Count(res.Trace, "as its lease is granted")
		slow += strings.Count(res.Trace, "joining took longer than the lease allows")
	}
	if slow == 0 {
		t.Fatalf("%d joins paused, none past its lease's deadline", paused)
	}
	t.Logf("%d joins paused, %d past their lease's deadline", paused, slow)
}

// TestWatchBrokenAfterAMinute plays histories of 80 s of faults in which
// watch streams break now and then (break-watch, the one kind, so that
// some watch lasts): a watch that had lasted a minute before it broke was
// healthy, and the member follows again after the shortest wait
// (core.Follower), which histories of 20 s never show. No violation.
func TestWatchBrokenAfterAMinute(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Faults = 80 * time.Second
	cfg.Kinds = []string{"break-watch"}
	for seed := uint64(1); seed <= seedsToPlay(t, cfg, 3); seed++ {
		if res := Run(seed, cfg); res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s -faults %v)", seed, res.Violation, replayCommand(cfg, seed), cfg.Faults)
		}
	}
}

// TestGarbageMap plays histories in which an operator puts a value that is
// no usable map into the map key (see garbageMaps), and the map back a
// while later (map-garbage, played only when named): members leave the
// rink or hold nothing until it is back, the leader's view cannot read
// it, and nothing goes wrong. No violation.
func TestGarbageMap(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Kinds = []string{"map-garbage", "crash", "join", "partition"}
	put := 0
	playModels(t, []modelCase{{"map-garbage", cfg, 20}}, func(res Result) { put += res.Ops["map-garbage"] })
	if put == 0 {
		t.Fatal("no garbage put into the map key")
	}
	t.Logf("%d garbage values put into the map key", put)
}
