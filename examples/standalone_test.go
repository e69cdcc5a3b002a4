package examples

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memberPackages are the parts of the examples that their READMEs tell
// users to copy into a service of their own.
var memberPackages = []string{
	"demo/holder",
	"singleton/cron",
	"symbols/trader",
	"partitions/worker",
	"peerindex/peer",
	"hotkeys/shard",
	"cache/shardcache",
	"replicated/counters",
	"quickstart",
}

// allowed reports whether the copyable code may import path: the standard
// library, rink itself, the etcd client and zap — nothing of this module
// but its root package (examples/... and internal/... would not be there).
func allowed(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case !strings.Contains(first, "."): // the standard library
		return true
	case path == "github.com/rink-go/rink":
		return true
	case strings.HasPrefix(path, "go.etcd.io/etcd/client/"), path == "go.uber.org/zap", strings.HasPrefix(path, "go.uber.org/zap/"):
		return true
	}
	return false
}

// TestMemberCodeBuildsAlone copies each member package (its Go files and
// its example_test.go, the form its README shows, but none of its other
// tests) into a new module that requires only github.com/rink-go/rink —
// replaced by this checkout — and runs 'go build ./...' and 'go vet ./...'
// there. The go command takes every other module from the module cache or
// the module proxy, at the versions rink's go.sum lists; it cannot work
// offline with an empty module cache, and the test then fails saying so.
func TestMemberCodeBuildsAlone(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the member code in a module of its own: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).Find(rootMod)
	if goLine == nil {
		t.Fatal("no go directive in go.mod")
	}
	dir := t.TempDir()
	mod := "module example.com/service\n\n" + string(goLine) + "\n\n" +
		"require github.com/rink-go/rink v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/rink-go/rink => " + strconv.Quote(root) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, pkg := range memberPackages {
		files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", pkg, err)
		}
		to := filepath.Join(dir, filepath.Base(pkg))
		if err := os.Mkdir(to, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			name := filepath.Base(f)
			if strings.HasSuffix(name, "_test.go") && name != "example_test.go" {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !allowed(path) {
					t.Errorf("%s imports %s: the code to copy may import only rink, the etcd client, zap and the standard library", f, path)
				}
			}
			if err := os.WriteFile(filepath.Join(to, name), src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in a module of its own that requires only github.com/rink-go/rink: %v\n%s\n"+
				"(the copied member code must build without this module's internal packages; the go command needs the modules go.sum lists, from the module cache or GOPROXY)",
				strings.Join(args, " "), err, out)
		}
	}
}
