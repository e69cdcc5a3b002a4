package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func rec(ms int64, member string, kind Kind, role string, token int64) Record {
	return Record{Mono: ms * 1e6, Member: member, Kind: kind, Role: role, Token: token}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		recs []Record
		want string // substring of the first violation; "" for none
	}{
		{"clean handover", []Record{
			rec(0, "a", Acquire, "r", 5), rec(10, "a", Act, "r", 5), rec(20, "a", Release, "r", 5),
			rec(22, "b", Acquire, "r", 9), rec(30, "b", Act, "r", 9),
		}, ""},
		{"crash, then successor", []Record{
			rec(0, "a", Acquire, "r", 5), rec(10, "a", Act, "r", 5),
			rec(2000, "b", Acquire, "r", 9),
		}, ""},
		{"stopped member logs its release late, without acting", []Record{
			rec(0, "a", Acquire, "r", 5), rec(10, "a", Act, "r", 5),
			rec(2000, "b", Acquire, "r", 9), rec(2100, "b", Act, "r", 9),
			rec(5000, "a", Release, "r", 5),
		}, ""},
		{"stopped member acts after resuming", []Record{
			rec(0, "a", Acquire, "r", 5),
			rec(2000, "b", Acquire, "r", 9),
			rec(5000, "a", Act, "r", 5),
		}, "overlap: a acted with token 5 after b acquired token 9"},
		{"two members with one token", []Record{
			rec(0, "a", Acquire, "r", 5), rec(1, "a", Release, "r", 5),
			rec(2, "b", Acquire, "r", 5),
		}, "tokens: a and b both acquired with token 5"},
		{"an acquisition recorded late, never acted on", []Record{
			rec(0, "b", Acquire, "r", 9), rec(3, "b", Act, "r", 9),
			rec(5, "a", Acquire, "r", 5), rec(5, "a", Release, "r", 5),
		}, ""},
		{"an acquisition recorded late, then acted on", []Record{
			rec(0, "b", Acquire, "r", 9),
			rec(5, "a", Acquire, "r", 5), rec(6, "a", Act, "r", 5),
		}, "overlap: a acted with token 5 after b acquired token 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(tt.recs)
			switch {
			case tt.want == "" && len(rep.Violations) > 0:
				t.Fatalf("unexpected violations: %v", rep.Violations)
			case tt.want != "" && (len(rep.Violations) == 0 || !strings.Contains(rep.Violations[0].Detail, tt.want)):
				t.Fatalf("violations %v, want %q", rep.Violations, tt.want)
			}
		})
	}
	rep := Check([]Record{rec(0, "a", Acquire, "r", 5), rec(20, "a", Release, "r", 5), rec(25, "b", Acquire, "r", 9)})
	if g := rep.Unheld["r"]; len(g) != 1 || g[0].Milliseconds() != 5 {
		t.Fatalf("unheld gaps %v, want [5ms]", g)
	}
}

// TestCheckSameNameProcesses: two processes under one member name (a
// replacement started while its predecessor runs cut off) are two members
// to the checker, told apart by Record.Proc.
func TestCheckSameNameProcesses(t *testing.T) {
	p := func(r Record, proc string) Record { r.Proc = proc; return r }
	tests := []struct {
		name string
		recs []Record
		want string // substring of the first violation; "" for none
	}{
		{"the replacement takes over after the old one's last action", []Record{
			p(rec(0, "x", Acquire, "r", 5), "x.1"), p(rec(10, "x", Act, "r", 5), "x.1"),
			p(rec(3000, "x", Acquire, "r", 9), "x.2"), p(rec(3050, "x", Act, "r", 9), "x.2"),
			p(rec(4000, "x", Release, "r", 5), "x.1"), // the old one's late release
			p(rec(4100, "x", Act, "r", 9), "x.2"),
		}, ""},
		{"the old one acts after the replacement acquired", []Record{
			p(rec(0, "x", Acquire, "r", 5), "x.1"),
			p(rec(3000, "x", Acquire, "r", 9), "x.2"),
			p(rec(3010, "x", Act, "r", 5), "x.1"),
		}, "overlap: x acted with token 5 after x acquired token 9 (act by x.1 at 3.010s; newer holding by x.2"},
		{"both acquire one token", []Record{
			p(rec(0, "x", Acquire, "r", 9), "x.1"), p(rec(10, "x", Act, "r", 9), "x.1"),
			p(rec(20, "x", Acquire, "r", 9), "x.2"),
		}, "tokens: x and x both acquired with token 9 (x.1 at 0.000s, x.2 at 0.020s)"},
		{"the old one acts with the replacement's token", []Record{
			p(rec(0, "x", Acquire, "r", 9), "x.2"),
			p(rec(10, "x", Act, "r", 9), "x.1"),
		}, "overlap: x acted with token 9 after x acquired token 9 (act by x.1"},
		{"the old one's release does not end the replacement's holding", []Record{
			p(rec(0, "x", Acquire, "r", 9), "x.2"),
			p(rec(10, "x", Release, "r", 9), "x.1"),
			p(rec(20, "y", Act, "r", 4), "y.3"),
		}, "overlap: y acted with token 4 after x acquired token 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(tt.recs)
			switch {
			case tt.want == "" && len(rep.Violations) > 0:
				t.Fatalf("unexpected violations: %v", rep.Violations)
			case tt.want != "" && (len(rep.Violations) == 0 || !strings.Contains(rep.Violations[0].Detail, tt.want)):
				t.Fatalf("violations %v, want %q", rep.Violations, tt.want)
			}
		})
	}
	// Liveness: the replacement's holding is not ended by its predecessor's
	// release, nor lost when the predecessor exits.
	recs := []Record{
		p(rec(0, "x", Acquire, "r", 5), "x.1"),
		p(rec(3000, "x", Acquire, "r", 9), "x.2"),
		p(rec(4000, "x", Release, "r", 9), "x.1"),
	}
	alive := func(proc string, mono int64) bool { return proc != "x.1" || mono < 4500e6 }
	if live := Liveness(0, recs, []string{"r"}, alive, 5000e6, 6000e6); len(live.Violations) != 0 {
		t.Fatalf("liveness: %v", live.Violations)
	}
}

// TestStormOps: every kind is listed once, the stray keys' kinds among them.
func TestStormOps(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range StormOps {
		if seen[k] {
			t.Errorf("%s listed twice", k)
		}
		seen[k] = true
	}
	for k := range strayKeys {
		if !seen[k] {
			t.Errorf("stray kind %s is not in StormOps", k)
		}
	}
	for _, k := range []string{"member-key-delete-cut", "same-name-replace", "stray-member-leaseless", "stranger-member", "acks-delete", "zone-loss", "election-delete", "member-keys-delete", "tail-delete"} {
		if !seen[k] {
			t.Errorf("%s is not in StormOps", k)
		}
	}
}

// TestWriteHeld: an action is recorded only while its context lives, and
// stamped before the check even when the log's lock was held meanwhile.
func TestWriteHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	l, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if ok, err := l.WriteHeld(ctx, "a", "r", 7); !ok || err != nil {
		t.Fatalf("held: %v, %v", ok, err)
	}
	// The lock is held (as by an acquisition's fsync) while the context
	// ends: the action waiting for it is not recorded.
	l.mu.Lock()
	done := make(chan bool)
	go func() {
		ok, _ := l.WriteHeld(ctx, "a", "r", 7)
		done <- ok
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	l.mu.Unlock()
	if <-done {
		t.Fatal("an action was recorded after its context ended")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	recs, err := Parse(f)
	if err != nil || len(recs) != 1 || recs[0].Kind != Act || recs[0].Token != 7 {
		t.Fatalf("parsed %+v, %v", recs, err)
	}
}

func TestLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	l, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write("a", Acquire, "partition:1", 7); err != nil {
		t.Fatal(err)
	}
	if err := l.Write("a", Release, "partition:1", 7); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn last line, as after kill -9 between two flushes: it even has
	// five fields, its token cut short.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("123 a act partition:1 2")
	f.Close()
	f, _ = os.Open(path)
	defer f.Close()
	recs, err := Parse(f)
	if err != nil || len(recs) != 2 || recs[0].Kind != Acquire || recs[1].Mono < recs[0].Mono || recs[0].Token != 7 {
		t.Fatalf("parsed %+v, %v", recs, err)
	}
	if _, err := Create(filepath.Join(t.TempDir(), "missing", "dir", "x.log")); err == nil {
		t.Fatal("a log in a missing directory was created")
	}
}
