package chaos

import (
	"testing"
)

func TestMovement(t *testing.T) {
	rec := func(ms int64, m string, k Kind, role string, tok int64) Record {
		return Record{Mono: ms * 1e6, Member: m, Kind: k, Role: role, Token: tok}
	}
	recs := []Record{
		rec(0, "a", Acquire, "r1", 1), rec(0, "a", Acquire, "r2", 2), rec(0, "b", Acquire, "r3", 3),
		rec(100, "c", Acquire, "r1", 10), rec(100, "c", Acquire, "r2", 10), // after a's departure at 50
		rec(300, "d", Acquire, "r3", 20), // after the next fault
	}
	faults := []Fault{{Kind: "rolling", Target: "a -> c", Mono: 50e6}, {Kind: "latency", Target: "b", Mono: 200e6}}
	d, m := movement(recs, faults)
	if d["rolling"] != 2 || m["rolling"] != 2 {
		t.Fatalf("departed %v moved %v", d, m)
	}
}
