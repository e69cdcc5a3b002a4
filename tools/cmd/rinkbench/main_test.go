package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestAllScenarios runs every scenario once, briefly, and checks the JSON
// output: every scenario reports, and no run saw two holders of a role.
func TestAllScenarios(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out, errOut bytes.Buffer
	if err := run(&out, &errOut, config{scenario: "all", runs: 1, handovers: 3, hold: time.Second, json: true, noFsync: true, scaleMembers: 20, scaleRoles: 1000, loadRoles: 1000, shiftEvery: 3 * time.Second, shifts: 2}); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r jsonResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seen[r.Scenario] = true
		if r.Scenario != "floor" { // the floor runs no members
			if o, ok := r.Figures["overlaps"]; !ok || o.Max != 0 {
				t.Errorf("%s: overlaps %+v", r.Scenario, o)
			}
		}
		for _, f := range wantFigures[r.Scenario] {
			if s, ok := r.Figures[f]; !ok || s.Min <= 0 {
				t.Errorf("%s: figure %s missing or not positive: %+v", r.Scenario, f, s)
			}
		}
	}
	for _, s := range scenarios {
		if !seen[s.name] {
			t.Errorf("no result for %s", s.name)
		}
	}
}

// wantFigures lists figures, by scenario, that other tools read: each must
// be reported, and above zero.
var wantFigures = map[string][]string{
	"floor":           {"write_watch_p50_ms", "write_watch_p99_ms", "depart_txn_p50_ms", "depart_txn_to_floor"},
	"handover":        {"handover_p50_ms", "handover_p99_ms", "write_watch_p50_ms", "write_watch_p99_ms", "p50_to_floor", "depart_txn_p50_ms", "p50_to_depart_txn"},
	"handover-leader": {"handover_p50_ms", "handover_p99_ms", "write_watch_p50_ms", "write_watch_p99_ms", "p50_to_floor", "depart_txn_p50_ms", "p50_to_depart_txn"},
	"rolling":         {"role_acquisitions", "gap_worst_ms", "join_to_leave_max_ms"},
	"warm":            {"hit_rate_rollout_warm", "hit_rate_rollout_cold", "hit_rate_scaleout_warm", "hit_rate_scaleout_cold", "handover_gap_p50_ms_warm", "drain_wait_p50_ms"},
	"load":            {"imbalance_by_count", "imbalance_after", "imbalance_bound"},
	"load-capacity":   {"imbalance_by_count", "imbalance_after", "imbalance_bound"},
	"load-shift":      {"imbalance_p95", "slots_moved_per_round_max"},
	"drain":           {"slow_drain_ms", "drained_slot_gap_p50_ms", "other_slot_gap_p50_ms", "other_slot_gap_p50_ms_nodrain"},
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []config{
		{scenario: "nope", runs: 1, handovers: 1, hold: time.Second, scaleMembers: 2, scaleRoles: 1},
		{scenario: "all", runs: 0, handovers: 1, hold: time.Second, scaleMembers: 2, scaleRoles: 1},
		{scenario: "scale", runs: 1, handovers: 1, hold: time.Second, scaleMembers: 1, scaleRoles: 1},
		{scenario: "scale", runs: 1, handovers: 1, hold: time.Second, scaleMembers: 2, scaleRoles: 0},
	} {
		if err := run(&bytes.Buffer{}, &bytes.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
