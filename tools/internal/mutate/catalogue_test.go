package mutate

import (
	"context"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var build = flag.Bool("build", false, "also compile the library with each mutant (slow: a build per mutant)")

// repoRoot is the go.work root: the library, with tools/ beside it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at %s: %v", root, err)
	}
	return root
}

// TestCatalogue checks every mutant against the tree: it is well formed,
// its old snippet occurs exactly once in its file, the mutated file still
// parses, and (with -build) the library compiles with it. A refactoring
// that moves the code a mutant names fails here: move the mutant too.
func TestCatalogue(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cat) < 40 {
		t.Errorf("the catalogue has %d mutants, want at least 40", len(cat))
	}
	mechs := map[string]bool{}
	r := &Runner{Root: repoRoot(t), Work: t.TempDir()}
	for _, m := range cat {
		mechs[m.Mechanism] = true
		t.Run(m.ID, func(t *testing.T) {
			files, err := r.Mutate(m)
			if err != nil {
				t.Fatalf("%v%s", err, movedTo(r.Root, m))
			}
			if _, err := parser.ParseFile(token.NewFileSet(), m.File, files[m.File], parser.SkipObjectResolution); err != nil {
				t.Fatalf("the mutated %s does not parse: %v", m.File, err)
			}
			if !*build {
				return
			}
			ov, err := r.Overlay(t.TempDir(), files)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := r.Build(ctx, ov, "", "./"+filepath.Dir(m.File)); err != nil {
				t.Fatalf("does not build: %v", err)
			}
		})
	}
	for _, want := range []string{"barrier", "fence", "ghosts", "leases", "floor", "acks", "records", "replicas",
		"warm-promotion", "load", "drain", "warm-up", "mapjson", "floorjson", "keys", "driver", "watch", "session", "keeper", "stray", "restore"} {
		if !mechs[want] {
			t.Errorf("no mutant hits %s", want)
		}
	}
}

// TestIssue43Mutants checks that the bugs issue 43 names are in the
// catalogue: the fence margin, the production ghost rule, warm promotion,
// each masked layer (with what masks it), and the record across a gap.
func TestIssue43Mutants(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Mutant{}
	for _, m := range cat {
		by[m.ID] = m
	}
	for _, id := range []string{"fence-margin-zero", "ghosts-ttl0-gone", "replicas-promote-newest",
		"ghosts-deleted-key-gone", "view-narrow-ignores-floor-ghosts", "records-seq-gap"} {
		if _, ok := by[id]; !ok {
			t.Errorf("mutant %s is missing", id)
		}
	}
	for _, id := range []string{"ghosts-deleted-key-gone", "view-narrow-ignores-floor-ghosts"} {
		if len(by[id].MaskedBy) == 0 {
			t.Errorf("mutant %s names no masking check", id)
		}
	}
}

// TestParse checks the catalogue's form, and that a mutant that does not
// apply says so.
func TestParse(t *testing.T) {
	ms, err := Parse("preamble\n== a\nmechanism: fence\nfile: x.go\ndesc: d\nflags: -keys -replicas 2\n--- old\nfoo() {\n\tbar()\n\n--- new\nbaz() {\n\tqux()\n== b\nmechanism: acks\nfile: y.go\ndesc: e\nmasked_by: a\nequivalent: why\n--- old\nx\n--- new\ny\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Old != "foo() {\n\tbar()" || ms[0].New != "baz() {\n\tqux()" || strings.Join(ms[0].Flags, " ") != "-keys -replicas 2" ||
		strings.Join(ms[1].MaskedBy, ",") != "a" || ms[1].Equivalent != "why" {
		t.Fatalf("parsed %+v", ms)
	}
	if _, err := ms[0].Apply("\tfoo() {\n\t\tbar()\n}\nfoo() {\n\tbar()\n"); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Errorf("applied twice-matching snippet: %v", err)
	}
	if out, err := ms[0].Apply("x\n\tfoo() {\n\t\tbar()\n\tfoo() {\n\tbar()\n"); err != nil || out != "x\n\tbaz() {\n\t\tqux()\n\tfoo() {\n\tbar()\n" {
		t.Errorf("Apply = %q, %v", out, err)
	}
	for _, bad := range []string{
		"== a\nmechanism: nope\nfile: x\ndesc: d\n--- old\nx\n--- new\ny\n",
		"== a\nmechanism: fence\nfile: x\ndesc: d\n--- old\nx\n--- new\nx\n",
		"== a\nmechanism: fence\nfile: x\ndesc: d\nmasked_by: zz\n--- old\nx\n--- new\ny\n",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
}

// TestRunKills plays one mutant for a moment, to show the pipeline end to
// end: overlay, build, simulator, and the violation read back. It builds
// the simulator once (tens of seconds), so -short skips it.
func TestRunKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the simulator")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var m Mutant
	for _, c := range cat {
		if c.ID == "barrier-bound-off-by-one" {
			m = c
		}
	}
	r := &Runner{Root: repoRoot(t), Work: t.TempDir(), Budget: 20 * time.Second}
	res := r.Run(context.Background(), m, nil)
	if res.Outcome != Killed || res.Seed == 0 {
		t.Fatalf("result %+v, want killed with a seed", res)
	}
}

// movedTo names the library's files in which m's snippet now occurs once
// (code moves between packages: see issue 43), for a mutant that no
// longer applies to its own file.
func movedTo(root string, m Mutant) string {
	var in []string
	for _, dir := range []string{".", "internal/*"} {
		fs, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range fs {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			if b, err := os.ReadFile(f); err == nil {
				if _, err := m.Apply(string(b)); err == nil {
					rel, _ := filepath.Rel(root, f)
					in = append(in, rel)
				}
			}
		}
	}
	if len(in) == 0 {
		return " (and no file of the library holds it once: update old)"
	}
	return fmt.Sprintf(" (it applies to %s: update file)", strings.Join(in, ", "))
}
