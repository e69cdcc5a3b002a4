package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestCheckersFindEachViolation feeds the checkers a synthetic history of a
// storm with one of each kind of violation, and healthy roles beside them.
func TestCheckersFindEachViolation(t *testing.T) {
	p := func(r Record, proc string) Record { r.Proc = proc; return r }
	recs := []Record{
		// overlap: b acquires r1 with token 9 while a holds it with 5 and
		// has not released it; a acts again.
		rec(0, "a", Acquire, "r1", 5), rec(50, "a", Act, "r1", 5),
		rec(100, "b", Acquire, "r1", 9), rec(150, "a", Act, "r1", 5), rec(160, "b", Act, "r1", 9),
		// token-back: a holds r2 with 9 and releases it; b then holds it
		// with 4 and acts. (c holds it after the heal, so it is live.)
		rec(0, "a", Acquire, "r2", 9), rec(50, "a", Release, "r2", 9),
		rec(60, "b", Acquire, "r2", 4), rec(70, "b", Act, "r2", 4), rec(80, "b", Release, "r2", 4),
		rec(1500, "c", Acquire, "r2", 20),
		// r3: released during the storm, never held again.
		rec(0, "a", Acquire, "r3", 3), rec(200, "a", Release, "r3", 3),
		// r4: held by a process that was killed (a.1), nobody since.
		p(rec(0, "a", Acquire, "r4", 7), "a.1"),
		// r5: released during the storm, held again 2 s after the heal.
		rec(0, "a", Acquire, "r5", 2), rec(500, "a", Release, "r5", 2), rec(3000, "c", Acquire, "r5", 21),
		// r6: held again only after the deadline.
		rec(0, "a", Acquire, "r6", 4), rec(500, "a", Release, "r6", 4), rec(9500, "c", Acquire, "r6", 22),
		// r7: held throughout, by b.
		rec(0, "b", Acquire, "r7", 6), rec(8000, "b", Act, "r7", 6),
		// r8: held at the heal, released for good before the deadline.
		rec(0, "b", Acquire, "r8", 6), rec(4000, "b", Release, "r8", 6),
	}
	rep := Check(recs)
	kinds := map[string]Violation{}
	for _, v := range rep.Violations {
		kinds[v.Kind] = v
	}
	if len(rep.Violations) != 2 {
		t.Errorf("safety violations %v, want an overlap on r1 and a token going back on r2", rep.Violations)
	}
	if v := kinds["overlap"]; v.Role != "r1" || v.Mono != 150e6 || !strings.Contains(v.Detail, "a acted with token 5 after b acquired token 9") ||
		!strings.Contains(v.Detail, "at 0.100s") || !strings.Contains(v.Detail, "not released") {
		t.Errorf("overlap: %+v", v)
	}
	if v := kinds["token-back"]; v.Role != "r2" || !strings.Contains(v.Detail, "b acted with token 4 after a acquired token 9") ||
		!strings.Contains(v.Detail, "released at 0.050s") {
		t.Errorf("token-back: %+v", v)
	}

	alive := func(proc string, mono int64) bool { return proc != "a.1" }
	healed, deadline := int64(1000e6), int64(9000e6)
	roles := []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}
	live := Liveness(0, recs, roles, alive, healed, deadline)
	want := map[string]string{
		"r3": "last holding: a (a) with token 3, acquired at 0.000s, released at 0.200s; not held again by the end",
		"r4": "its process a.1 was gone",
		"r6": "held again at 9.500s (8.5s after the heal) by c with token 22",
		"r8": "held at 1.000s after the heal, lost again",
	}
	got := map[string]Violation{}
	for _, v := range live.Violations {
		got[v.Role] = v
	}
	for role, detail := range want {
		if v, ok := got[role]; !ok || v.Kind != "liveness" || !strings.Contains(v.Detail, detail) {
			t.Errorf("liveness of %s: %+v, want %q", role, v, detail)
		}
	}
	if len(got) != len(want) {
		t.Errorf("liveness violations %v, want %d", live.Violations, len(want))
	}
	if got["r3"].Mono != 200e6 {
		t.Errorf("r3's violation shows at %d, want its release", got["r3"].Mono)
	}
	if live.Recovered["r5"] != 2*time.Second || live.Recovered["r7"] != 0 || live.Recovered["r2"] != 500*time.Millisecond {
		t.Errorf("recovered %v", live.Recovered)
	}
	if role, d := live.Worst(); role != "r5" || d != 2*time.Second {
		t.Errorf("worst %s %v", role, d)
	}
}

// TestLivenessIgnoresLateAcquisitions: an acquisition recorded after a
// newer one is not the role's holding, and its release does not end the
// newer one.
func TestLivenessIgnoresLateAcquisitions(t *testing.T) {
	recs := []Record{
		rec(0, "b", Acquire, "r", 9),
		rec(10, "a", Acquire, "r", 5), rec(11, "a", Release, "r", 5),
	}
	live := Liveness(0, recs, []string{"r"}, func(string, int64) bool { return true }, 20e6, 30e6)
	if len(live.Violations) != 0 {
		t.Fatal(live.Violations)
	}
	// And a role nobody ever acquired.
	live = Liveness(0, nil, []string{"r"}, func(string, int64) bool { return true }, 20e6, 30e6)
	if len(live.Violations) != 1 || !strings.Contains(live.Violations[0].Detail, "no holding was ever recorded") {
		t.Fatal(live.Violations)
	}
}

// TestLivenessReacquired: a process that released a holding and
// acquired it again, with the same token (a sidecar's app whose grant
// lapsed, granted the same holding anew), holds the role again; another
// process acquiring an ended holding's token does not.
func TestLivenessReacquired(t *testing.T) {
	recs := []Record{
		rec(0, "a", Acquire, "r", 5), rec(10, "a", Release, "r", 5), rec(15, "a", Acquire, "r", 5),
		rec(0, "a", Acquire, "s", 5), rec(10, "a", Release, "s", 5), rec(15, "b", Acquire, "s", 5),
	}
	all := func(string, int64) bool { return true }
	live := Liveness(0, recs, []string{"r", "s"}, all, 20e6, 30e6)
	if len(live.Violations) != 1 || live.Violations[0].Role != "s" {
		t.Fatalf("violations %v, want s's alone", live.Violations)
	}
	rep := Check(recs)
	if len(rep.Unheld["r"]) != 1 || rep.Unheld["r"][0] != 5*time.Millisecond || rep.Late != 0 {
		t.Errorf("r unheld %v, late %d: want one gap of 5ms, none late", rep.Unheld["r"], rep.Late)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Kind != "tokens" || rep.Violations[0].Role != "s" {
		t.Errorf("violations %v, want tokens on s", rep.Violations)
	}
}

func TestStormSummaryText(t *testing.T) {
	s := StormSummary{
		Ops: []Fault{{Kind: "map-reput", Target: "version 3", Mono: 1e9}, {Kind: "kill9", Target: "w1.2", Mono: 2e9}, {Kind: "heal", Mono: 5e9}},
		Checkpoints: []Checkpoint{{Healed: 5e9, Deadline: 13e9,
			Liveness: LivenessReport{Violations: []Violation{{Kind: "liveness", Role: "leader", Detail: "liveness: not held", Mono: 1500e6}},
				Recovered: map[string]time.Duration{}}}},
		Bound: 8 * time.Second,
	}
	text := s.Text()
	for _, want := range []string{"map-reput                  1", "liveness 1 (heal at 5.000s): FAILED: 1 roles", "VIOLATION liveness leader: liveness: not held",
		"operations before 1.500s:\n       1.000s  map-reput              version 3\n", "the last operations before heal 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
}
