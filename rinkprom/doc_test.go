package rinkprom_test

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/rinkprom"
)

// The metric tables are checked against the code, so that they cannot go
// stale again (issue 44 found two metrics missing from operations.md): every
// metric rinkprom registers is listed, with its type, in the package doc and
// in docs/operations.md, and no document names a metric that does not exist.

// registered returns the name and type ("gauge", "counter", "histogram")
// of every metric a Metrics exports. The names come from Describe (all of
// them, series or not); the types from a scrape after events that give
// every metric a series.
func registered(t *testing.T) map[string]string {
	t.Helper()
	m := rinkprom.New()
	ch := make(chan *prometheus.Desc, 64)
	m.Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]string{}
	for d := range ch {
		sm := fq.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("no name in %s", d)
		}
		names[sm[1]] = ""
	}
	if len(names) == 0 {
		t.Fatal("Describe sent no metric")
	}
	for _, k := range []rink.EventKind{rink.EventMapApplied, rink.EventLoadBalanced, rink.EventDrainTimedOut} {
		m.Observe(rink.Event{Kind: k, Rink: "r", Member: "a"})
	}
	for name, typ := range scrape(t, m) {
		if _, ok := names[name]; ok {
			names[name] = typ
		}
	}
	for name, typ := range names {
		if typ == "" {
			t.Fatalf("%s has no series to tell its type", name)
		}
	}
	return names
}

// scrape returns the type of each metric family m exports now.
func scrape(t *testing.T, m *rinkprom.Metrics) map[string]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return types
}

// TestEverySeriesFromTheFirstEvent: as the docs say, every series of a
// member exists from its first event on, so that rates and alerts see
// zeros rather than gaps — but rink_load_imbalance, which has no value
// until the member, leading, has run a round of balancing by load (0
// would read as a better balance than any: the mean is 1).
func TestEverySeriesFromTheFirstEvent(t *testing.T) {
	m := rinkprom.New()
	m.Observe(rink.Event{Kind: rink.EventMapApplied, Rink: "r", Member: "a"})
	got := scrape(t, m)
	for name := range registered(t) {
		if _, ok := got[name]; !ok && name != "rink_load_imbalance" {
			t.Errorf("%s has no series after the member's first event", name)
		}
	}
	if _, ok := got["rink_load_imbalance"]; ok {
		t.Error("rink_load_imbalance has a series before any round of balancing by load")
	}
}

// docRow matches a row of a metric table in Markdown: | `name` | type | meaning |.
var docRow = regexp.MustCompile("^\\| `(rink_[a-z_]+)` \\| (gauge|counter|histogram) \\|")

// TestOperationsTableListsEveryMetric: docs/operations.md's metric table
// lists every metric with its type, and nothing else.
func TestOperationsTableListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if sm := docRow.FindStringSubmatch(line); sm != nil {
			if _, dup := doc[sm[1]]; dup {
				t.Errorf("operations.md lists %s twice", sm[1])
			}
			doc[sm[1]] = sm[2]
		}
	}
	compare(t, "docs/operations.md", doc, registered(t))
}

// packageDocItem matches an item of the package doc's metric list:
// "rink_name (type): meaning".
var packageDocItem = regexp.MustCompile(`^(rink_[a-z_]+) \((gauge|counter|histogram)\): \S`)

// TestPackageDocListsEveryMetric: the package doc lists every metric with
// its type, as a list that go doc renders one item a line (it printed the
// Markdown table it had before as one paragraph), and nothing else.
func TestPackageDocListsEveryMetric(t *testing.T) {
	text := packageDoc(t)
	doc := map[string]string{}
	var parser comment.Parser
	for _, block := range parser.Parse(text).Content {
		switch b := block.(type) {
		case *comment.List:
			for _, item := range b.Items {
				var s strings.Builder
				for _, ib := range item.Content {
					if p, ok := ib.(*comment.Paragraph); ok {
						s.WriteString(plain(p.Text))
					}
				}
				sm := packageDocItem.FindStringSubmatch(s.String())
				if sm == nil {
					t.Errorf("package doc: a list item is not \"rink_name (type): meaning\": %q", s.String())
					continue
				}
				if _, dup := doc[sm[1]]; dup {
					t.Errorf("package doc lists %s twice", sm[1])
				}
				doc[sm[1]] = sm[2]
			}
		case *comment.Paragraph:
			if strings.Contains(plain(b.Text), "| rink_") {
				t.Errorf("package doc: a metric table that go doc prints as a paragraph: %.60q…", plain(b.Text))
			}
		}
	}
	compare(t, "the package doc", doc, registered(t))
}

// TestDocsNameOnlyRealMetrics: no document names a metric that rinkprom
// does not export (a histogram's _bucket, _sum and _count series count as
// the histogram's).
func TestDocsNameOnlyRealMetrics(t *testing.T) {
	reg := registered(t)
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "doc.go"), "rinkprom.go")
	word := regexp.MustCompile(`\brink_[a-z_]+\b`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range word.FindAllString(string(b), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok && reg[s] == "histogram" {
					base = s
				}
			}
			if _, ok := reg[base]; !ok {
				t.Errorf("%s names %s, which rinkprom does not export", f, name)
			}
		}
	}
}

func compare(t *testing.T, where string, doc, reg map[string]string) {
	t.Helper()
	var names []string
	for n := range reg {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch typ, ok := doc[n]; {
		case !ok:
			t.Errorf("%s does not list %s", where, n)
		case typ != reg[n]:
			t.Errorf("%s lists %s as a %s; it is a %s", where, n, typ, reg[n])
		}
	}
	for n := range doc {
		if _, ok := reg[n]; !ok {
			t.Errorf("%s lists %s, which rinkprom does not export", where, n)
		}
	}
}

// packageDoc returns the package's doc comment, as go doc reads it.
func packageDoc(t *testing.T) string {
	t.Helper()
	fset := token.NewFileSet()
	var text string
	for _, name := range []string{"rinkprom.go", "doc.go"} {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.PackageClauseOnly)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			text += (&ast.CommentGroup{List: f.Doc.List}).Text()
		}
	}
	if text == "" {
		t.Fatal("no package doc")
	}
	return text
}

func plain(ts []comment.Text) string {
	var s strings.Builder
	for _, t := range ts {
		switch x := t.(type) {
		case comment.Plain:
			s.WriteString(string(x))
		case comment.Italic:
			s.WriteString(string(x))
		case *comment.Link:
			s.WriteString(plain(x.Text))
		case *comment.DocLink:
			s.WriteString(plain(x.Text))
		}
	}
	return s.String()
}
