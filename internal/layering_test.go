// Package internal_test keeps the layering of rink's protocol packages
// (docs/design.md, "Packages"): the wire (keys, encodings, requests), the
// planner, and the core take inputs and return what to do; none of them
// talks to etcd, reads a clock, starts a goroutine or knows the public API
// or the simulator, and the compiler and this test keep it so.
package internal_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rink-go/rink"

// layer is one pure package and what it may not reach.
type layer struct {
	dir string // below internal/
	// notDeps: import path prefixes that may not be among its
	// dependencies, direct or not.
	notDeps []string
	// notImports: import path prefixes its own files may not import
	// (etcd's API packages import grpc, and so net and sync, which the
	// package's own code still may not use).
	notImports []string
	// noContext: its files may not use package context either.
	noContext bool
}

// everywhere: no layer reaches etcd's client, the public API, the
// simulator's hooks or the tools.
var everywhere = []string{"go.etcd.io/etcd/client/", module + "/internal/simhook", module + "/tools/"}

var layers = []layer{
	{dir: "wire", notDeps: []string{module + "/internal/plan", module + "/internal/core", "go.uber.org/zap"}},
	{dir: "plan", notDeps: []string{module + "/internal/core", "go.uber.org/zap"}},
	{dir: "core", notImports: []string{"net", "os", "sync", "runtime"}, noContext: true},
}

// maxLines is the longest a file of a layer may be.
const maxLines = 500

// TestLayering: the pure packages import nothing their layer forbids,
// start no goroutine, read no clock, draw from no global random source,
// and keep their files short. A package not created yet is skipped.
func TestLayering(t *testing.T) {
	for _, l := range layers {
		t.Run(l.dir, func(t *testing.T) {
			if _, err := os.Stat(l.dir); err != nil {
				t.Skipf("internal/%s: not created yet", l.dir)
			}
			for _, dep := range deps(t, "./"+l.dir) {
				if dep == module || slices.ContainsFunc(slices.Concat(everywhere, l.notDeps), func(p string) bool { return strings.HasPrefix(dep, p) }) {
					t.Errorf("internal/%s depends on %s", l.dir, dep)
				}
			}
			files, err := filepath.Glob(filepath.Join(l.dir, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				src, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range impure(f, src, l) {
					t.Error(p)
				}
			}
		})
	}
}

// deps lists the packages pkg depends on, itself left out.
func deps(t *testing.T, pkg string) []string {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var paths []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if !p.Standard && !strings.HasSuffix(p.ImportPath, strings.TrimPrefix(pkg, ".")) {
			paths = append(paths, p.ImportPath)
		}
	}
	return paths
}

// clockReads are the functions of package time that read the clock or
// wait for it.
var clockReads = []string{"Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Sleep", "Tick"}

// impure reports, one line each, what in file name (source src) its layer
// forbids.
func impure(name string, src []byte, l layer) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return []string{err.Error()}
	}
	var found []string
	if n := fset.File(f.Pos()).LineCount(); n > maxLines {
		found = append(found, fmt.Sprintf("%s: %d lines (at most %d)", name, n, maxLines))
	}
	imported := map[string]string{} // local name → path
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		local := filepath.Base(path)
		if strings.HasSuffix(path, "/v2") {
			local = filepath.Base(strings.TrimSuffix(path, "/v2"))
		}
		if imp.Name != nil {
			local = imp.Name.Name
		}
		imported[local] = path
		for _, no := range l.notImports {
			if path == no || strings.HasPrefix(path, no+"/") {
				found = append(found, fmt.Sprintf("%s: imports %s", fset.Position(imp.Pos()), path))
			}
		}
		if l.noContext && path == "context" {
			found = append(found, fmt.Sprintf("%s: imports context", fset.Position(imp.Pos())))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = append(found, fmt.Sprintf("%s: starts a goroutine", fset.Position(n.Pos())))
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok {
				break
			}
			switch imported[id.Name] {
			case "time":
				if slices.Contains(clockReads, n.Sel.Name) {
					found = append(found, fmt.Sprintf("%s: reads the clock (time.%s)", fset.Position(n.Pos()), n.Sel.Name))
				}
			case "math/rand", "math/rand/v2":
				if ast.IsExported(n.Sel.Name) && !slices.Contains([]string{"Rand", "New", "NewPCG", "NewChaCha8", "Source", "NewSource", "PCG", "ChaCha8", "Zipf", "NewZipf"}, n.Sel.Name) {
					found = append(found, fmt.Sprintf("%s: draws from the global random source (rand.%s)", fset.Position(n.Pos()), n.Sel.Name))
				}
			}
		}
		return true
	})
	return found
}

// TestLayeringCanFail: impure finds each thing it looks for in a file
// written to break every rule once.
func TestLayeringCanFail(t *testing.T) {
	src := "package core\n\nimport (\n\t\"context\"\n\t\"math/rand/v2\"\n\t\"sync\"\n\t\"time\"\n)\n\n" +
		"var mu sync.Mutex\n\n" +
		"func f(ctx context.Context) {\n\tgo func() {}()\n\t_ = time.Now()\n\t_ = rand.IntN(3)\n\t_ = rand.New(rand.NewPCG(1, 2))\n\t_ = time.Second\n}\n" +
		strings.Repeat("\n", maxLines)
	got := impure("bad.go", []byte(src), layers[2])
	for _, want := range []string{"imports context", "imports sync", "starts a goroutine", "time.Now", "rand.IntN", "lines (at most"} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("impure missed %q: %q", want, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("impure found %d things, want 6 (rand.New and time.Second are allowed): %q", len(got), got)
	}
	// And deps sees a dependency two steps away: embedetcd reaches etcd's
	// client through etcd's server.
	if !slices.Contains(deps(t, "./embedetcd"), "go.etcd.io/etcd/client/v3") {
		t.Error("deps ./embedetcd does not list go.etcd.io/etcd/client/v3")
	}
}
