package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
