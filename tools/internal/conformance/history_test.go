package conformance

import (
	"strings"
	"testing"
	"time"
)

// at builds an event at base+ms.
func at(base time.Time, ms int, kind EventKind, role, member string, token int64) Event {
	return Event{Kind: kind, Role: role, Member: member, Token: token, At: base.Add(time.Duration(ms) * time.Millisecond)}
}

// TestCheckerCatches shows that the checker fails the histories it must:
// a check that cannot fail proves nothing.
func TestCheckerCatches(t *testing.T) {
	t.Parallel()
	b := time.Now()
	cases := []struct {
		name   string
		events []Event
		want   string // in the error; "" for a good history
	}{
		{"handover", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 5, Release, "r", "a", 10),
			at(b, 5, Acquire, "r", "b", 11), at(b, 9, Release, "r", "b", 11),
			at(b, 9, Acquire, "other", "a", 3), // tokens are per role
		}, ""},
		{"overlap", []Event{
			at(b, 0, Acquire, "r", "a", 10),
			at(b, 4, Acquire, "r", "b", 11), // a still holds
			at(b, 5, Release, "r", "a", 10),
		}, "two holders"},
		{"overlap with a holding never released", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Acquire, "r", "b", 11),
		}, "two holders"},
		{"token regression", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "b", 9),
		}, "did not increase"},
		{"a holding resumed (validity lapsed, then renewed)", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "a", 10), at(b, 3, Release, "r", "a", 10),
			at(b, 4, Acquire, "r", "b", 11),
		}, ""},
		{"a resumed holding overlaps", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "b", 11), at(b, 3, Acquire, "r", "a", 10),
		}, "two holders"},
		{"a holding resumed after another's", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "b", 11), at(b, 3, Release, "r", "b", 11),
			at(b, 4, Acquire, "r", "a", 10),
		}, "did not increase"},
		{"token repeated", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "b", 10),
		}, "did not increase"},
		{"regression below an older token", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
			at(b, 2, Acquire, "r", "b", 12), at(b, 3, Release, "r", "b", 12),
			at(b, 4, Acquire, "r", "a", 11),
		}, "did not increase"},
		{"release of nothing", []Event{
			at(b, 0, Acquire, "r", "a", 10), at(b, 1, Release, "r", "b", 10),
		}, "not held"},
		{"out of order", []Event{
			at(b, 5, Acquire, "r", "a", 10), at(b, 1, Release, "r", "a", 10),
		}, "out of order"},
	}
	for _, c := range cases {
		err := CheckEvents(c.events)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: no error, want one saying %q", c.name, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestHistoryRecords checks History's own bookkeeping: holders, Unheld, and
// that Check sees what Acquire and Release recorded.
func TestHistoryRecords(t *testing.T) {
	t.Parallel()
	var h History
	start := time.Now()
	h.Acquire("r", "a", 1)
	if got := h.Holders("r"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("holders %v", got)
	}
	h.Acquire("r", "b", 2) // an overlap
	h.Release("r", "a", 1, "test")
	h.Release("r", "b", 2, "test")
	if got := h.Holders("r"); len(got) != 0 {
		t.Fatalf("holders %v after the releases", got)
	}
	if err := h.Check(); err == nil || !strings.Contains(err.Error(), "two holders") {
		t.Fatalf("Check: %v, want two holders", err)
	}
	end := time.Now().Add(time.Second)
	if u := h.Unheld("r", start, end); u < time.Second || u > end.Sub(start) {
		t.Fatalf("unheld %v of %v", u, end.Sub(start))
	}
	if u := h.Unheld("never", start, end); u != end.Sub(start) {
		t.Fatalf("a role never held: unheld %v of %v", u, end.Sub(start))
	}
}
