package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// root is the repository's root, from this package's directory.
const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the Markdown section under the heading "## title", up to
// the next heading of that level.
func section(t *testing.T, doc, path, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, title)
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	return body
}

// fenced returns the bodies of the code blocks of a language ("```lang").
func fenced(doc, lang string) []string {
	var blocks []string
	rest := doc
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return blocks
		}
		body, tail, _ := strings.Cut(after, "```")
		blocks = append(blocks, body)
		rest = tail
	}
}

// TestReadmeLayoutNamesRealFiles: every file and directory the README's
// Layout names exists, and the Layout names every file that declares a part
// of the core's state (the parts listed in loop.go's core struct), so that
// it says truthfully where a member's state lives.
func TestReadmeLayoutNamesRealFiles(t *testing.T) {
	layout := section(t, read(t, "README.md"), "README.md", "Layout")
	tick := regexp.MustCompile("`([^`]+)`")
	path := regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]*)*$`)
	named := map[string]bool{}
	for _, m := range tick.FindAllStringSubmatch(layout, -1) {
		p := m[1]
		if !path.MatchString(p) || !strings.Contains(p, "/") && filepath.Ext(p) == "" {
			continue // an identifier, not a path
		}
		named[p] = true
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("README's Layout names %s: %v", p, err)
		}
	}
	if len(named) < 10 {
		t.Fatalf("README's Layout names %d paths; the check expects the library's files", len(named))
	}

	core := regexp.MustCompile(`(?s)type mechanisms struct \{(.*?)\n\}`).FindStringSubmatch(read(t, "loop.go"))
	if core == nil {
		t.Fatal("no mechanisms struct in loop.go")
	}
	parts := regexp.MustCompile(`\(see ([a-z0-9_]+\.go)\)`).FindAllStringSubmatch(core[1], -1)
	if len(parts) < 5 {
		t.Fatalf("loop.go's mechanisms struct names %d files; expected one per mechanism", len(parts))
	}
	for _, p := range parts {
		if !named[p[1]] {
			t.Errorf("README's Layout does not name %s, which declares a part of the core's state", p[1])
		}
	}
	for _, decl := range []struct{ file, text string }{
		{"loop.go", "type mechanisms struct"},
		{"step.go", "func (r *Rink) step(in input) bool"},
		{"driver.go", "type effects interface"},
	} {
		if !named[decl.file] {
			t.Errorf("README's Layout does not name %s", decl.file)
		}
		if !strings.Contains(read(t, decl.file), decl.text) {
			t.Errorf("%s no longer holds %q: update README's Layout and this test", decl.file, decl.text)
		}
	}
}

// figures is one min / median / max triple, as the documents print it.
type figures [3]string

// row finds a Markdown table row that starts with prefix and returns the
// three figures after its first skip cells, units stripped.
func row(t *testing.T, doc, path, prefix string, skip int) figures {
	t.Helper()
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < skip+3 {
			t.Fatalf("%s: row %q has %d cells", path, prefix, len(cells))
		}
		var f figures
		for i := range f {
			f[i] = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cells[skip+i]), "ms"))
		}
		return f
	}
	t.Fatalf("%s has no row %q", path, prefix)
	return figures{}
}

// TestHandoverFiguresAgree: README.md and docs/comparison.md quote the
// graceful handover gap and the floor beside it from the same measured run
// as docs/benchmarks.md, and name the command of that run (issue 44: the
// README gave 1.52 ms from an older run while comparison.md gave 0.74 ms).
func TestHandoverFiguresAgree(t *testing.T) {
	bench, readme, comp := read(t, "docs/benchmarks.md"), read(t, "README.md"), read(t, "docs/comparison.md")

	plain := row(t, bench, "docs/benchmarks.md", "| handover, holder a plain member (the role in use) | p50 gap", 2)
	leader := row(t, bench, "docs/benchmarks.md", "| handover, holder the leader | p50 gap", 2)
	floor := row(t, bench, "docs/benchmarks.md", "| floor | `write_watch_p50_ms`", 2)

	measured := section(t, readme, "README.md", "Measured here")
	for _, c := range []struct {
		prefix string
		want   figures
	}{
		{"| graceful handover gap (p50 of 50), holder a plain member,", plain},
		{"| graceful handover gap (p50 of 50), holder the leader,", leader},
		{"| one fsynced etcd put seen by a watch on another client", floor},
	} {
		if got := row(t, measured, "README.md", c.prefix, 1); got != c.want {
			t.Errorf("README.md: %s… | %v; docs/benchmarks.md says %v", c.prefix, got, c.want)
		}
	}

	m := regexp.MustCompile(`p50 ([0-9.]+) ms \(runs of 50: ([0-9.]+)–([0-9.]+) ms\) for a plain holder, ([0-9.]+) ms \(([0-9.]+)–([0-9.]+) ms\) for the leader`).FindStringSubmatch(comp)
	if m == nil {
		t.Fatal("docs/comparison.md: no handover gap in the expected words")
	}
	if got := (figures{m[2], m[1], m[3]}); got != plain {
		t.Errorf("docs/comparison.md: plain holder %v; docs/benchmarks.md says %v", got, plain)
	}
	if got := (figures{m[5], m[4], m[6]}); got != leader {
		t.Errorf("docs/comparison.md: leader %v; docs/benchmarks.md says %v", got, leader)
	}
	f := regexp.MustCompile(`one fsynced etcd put seen by a watch costs ([0-9.]+) ms`).FindStringSubmatch(comp)
	if f == nil || f[1] != floor[1] {
		t.Errorf("docs/comparison.md: the floor beside the handover %v; docs/benchmarks.md says %s", f, floor[1])
	}

	// The command: the one of benchmarks.md's command block that runs the
	// handover scenarios alone with fsync, quoted by both documents.
	var cmd string
	for _, block := range fenced(bench, "sh") {
		for _, line := range strings.Split(block, "\n") {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimSpace(line)
			if strings.Contains(line, "-scenario floor,handover,handover-leader") && !strings.Contains(line, "-nofsync") {
				cmd = line
			}
		}
	}
	if cmd == "" {
		t.Fatal("docs/benchmarks.md: no command that measured the handover figures")
	}
	if !strings.Contains(measured, "`"+cmd+"`") {
		t.Errorf("README.md's Measured here does not quote the handover figures' command `%s`", cmd)
	}
	if !strings.Contains(comp, "`"+cmd+"`") {
		t.Errorf("docs/comparison.md does not quote the handover figures' command `%s`", cmd)
	}
}

// TestReadinessAdviceAgrees: the documents give one readiness rule, Ready
// (ReadyHandler): a probe on Rank() keeps a waiting newcomer unready until
// the rebalance delay ranks it, the very double move it is meant to avoid.
func TestReadinessAdviceAgrees(t *testing.T) {
	onRank := regexp.MustCompile("(?i)(readiness|ready|readinessProbe) (probe )?on `Rank\\(")
	for _, path := range []string{"README.md", "docs/operations.md", "docs/kubernetes.md", "docs/design.md", "doc.go"} {
		doc := read(t, path)
		if loc := onRank.FindString(doc); loc != "" {
			t.Errorf("%s gates readiness on Rank(): %q", path, loc)
		}
	}
	ops := read(t, "docs/operations.md")
	for _, line := range strings.Split(ops, "\n") {
		if strings.HasPrefix(line, "| a role moved twice in one rollout |") && !strings.Contains(line, "`ReadyHandler`") {
			t.Errorf("docs/operations.md's troubleshooting does not name ReadyHandler for readiness: %s", line)
		}
	}
	if !strings.Contains(section(t, read(t, "docs/kubernetes.md"), "docs/kubernetes.md", "The program"), "**Readiness.** `ReadyHandler`") {
		t.Error("docs/kubernetes.md: no readiness paragraph on ReadyHandler")
	}
}

// TestKubernetesManifests: docs/kubernetes.md's YAML parses, its Deployment
// probes the paths its program serves (readiness on ReadyHandler, liveness
// on a handler that does not consult the rink), its preStop sleep and the
// program's Shutdown timeout fit in the grace period with two seconds to
// spare, and its PodDisruptionBudget selects the Deployment's pods.
func TestKubernetesManifests(t *testing.T) {
	doc := read(t, "docs/kubernetes.md")
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	type manifest struct {
		Kind string `yaml:"kind"`
		Spec struct {
			MaxUnavailable *int `yaml:"maxUnavailable"`
			Selector       struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec struct {
					Grace      *int `yaml:"terminationGracePeriodSeconds"`
					Containers []struct {
						Readiness *probe `yaml:"readinessProbe"`
						Liveness  *probe `yaml:"livenessProbe"`
						Lifecycle struct {
							PreStop struct {
								Sleep struct {
									Seconds int `yaml:"seconds"`
								} `yaml:"sleep"`
							} `yaml:"preStop"`
						} `yaml:"lifecycle"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	byKind := map[string]manifest{}
	blocks := fenced(doc, "yaml")
	if len(blocks) == 0 {
		t.Fatal("docs/kubernetes.md has no YAML")
	}
	for i, b := range blocks {
		var v interface{}
		if err := yaml.UnmarshalStrict([]byte(b), &v); err != nil {
			t.Errorf("YAML block %d does not parse: %v\n%s", i+1, err, b)
			continue
		}
		var m manifest
		if err := yaml.Unmarshal([]byte(b), &m); err != nil {
			t.Errorf("YAML block %d: %v", i+1, err)
			continue
		}
		if _, seen := byKind[m.Kind]; m.Kind != "" && !seen {
			byKind[m.Kind] = m // the first of each kind: the Go program's (rinkd's is checked below)
		}
	}

	program := fenced(section(t, doc, "docs/kubernetes.md", "The program"), "go")
	if len(program) != 1 {
		t.Fatalf("docs/kubernetes.md's program: %d Go blocks, want 1", len(program))
	}
	src := program[0]
	ready := regexp.MustCompile(`http\.Handle\("([^"]+)", r\.ReadyHandler\(\)\)`).FindStringSubmatch(src)
	live := regexp.MustCompile(`http\.HandleFunc\("([^"]+)", func\(w http\.ResponseWriter, _ \*http\.Request\) \{([^}]*)\}`).FindStringSubmatch(src)
	listen := regexp.MustCompile(`http\.ListenAndServe\(":(\d+)"`).FindStringSubmatch(src)
	timeout := regexp.MustCompile(`context\.WithTimeout\(context\.Background\(\), (\d+)\*time\.Second\)`).FindStringSubmatch(src)
	if ready == nil || live == nil || listen == nil || timeout == nil {
		t.Fatalf("docs/kubernetes.md's program: readiness %q, liveness %q, listen %q, Shutdown timeout %q", ready, live, listen, timeout)
	}
	if strings.Contains(live[2], "r.") {
		t.Errorf("the liveness handler consults the rink: %q", live[2])
	}
	port, _ := strconv.Atoi(listen[1])
	shutdown, _ := strconv.Atoi(timeout[1])

	d, ok := byKind["Deployment"]
	if !ok || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("docs/kubernetes.md: no Deployment with one container")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Readiness == nil || c.Readiness.HTTPGet.Path != ready[1] || c.Readiness.HTTPGet.Port != port {
		t.Errorf("readinessProbe %+v; the program serves ReadyHandler at :%d%s", c.Readiness, port, ready[1])
	}
	if c.Liveness == nil || c.Liveness.HTTPGet.Path != live[1] || c.Liveness.HTTPGet.Port != port {
		t.Errorf("livenessProbe %+v; the program serves liveness at :%d%s", c.Liveness, port, live[1])
	}
	grace := d.Spec.Template.Spec.Grace
	sleep := c.Lifecycle.PreStop.Sleep.Seconds
	if grace == nil || sleep == 0 {
		t.Fatalf("the Deployment sets no terminationGracePeriodSeconds (%v) or no preStop sleep (%d)", grace, sleep)
	}
	if sleep+shutdown+2 > *grace {
		t.Errorf("preStop sleep %d s + Shutdown timeout %d s + 2 s > terminationGracePeriodSeconds %d", sleep, shutdown, *grace)
	}

	pdb, ok := byKind["PodDisruptionBudget"]
	if !ok || pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != 1 {
		t.Fatalf("docs/kubernetes.md: no PodDisruptionBudget with maxUnavailable: 1")
	}
	if len(pdb.Spec.Selector.MatchLabels) == 0 {
		t.Error("the PodDisruptionBudget selects nothing")
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%s; the Deployment's pods are labelled %v", k, v, d.Spec.Template.Metadata.Labels)
		}
	}
}

// TestKubernetesSidecarManifest checks docs/kubernetes.md's rinkd pod: rinkd
// is a native sidecar (an init container with restartPolicy Always), its
// probes ask the paths rinkd serves on the port its -probe flag names, and
// it is given a member name.
func TestKubernetesSidecarManifest(t *testing.T) {
	doc := read(t, "docs/kubernetes.md")
	blocks := fenced(section(t, doc, "docs/kubernetes.md", "rinkd as a native sidecar"), "yaml")
	if len(blocks) != 1 {
		t.Fatalf("the rinkd section has %d YAML blocks, want 1", len(blocks))
	}
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	var m struct {
		Spec struct {
			Template struct {
				Spec struct {
					Init []struct {
						Name    string   `yaml:"name"`
						Restart string   `yaml:"restartPolicy"`
						Args    []string `yaml:"args"`
						Env     []struct {
							Name string `yaml:"name"`
						} `yaml:"env"`
						Startup   *probe `yaml:"startupProbe"`
						Readiness *probe `yaml:"readinessProbe"`
						Liveness  *probe `yaml:"livenessProbe"`
					} `yaml:"initContainers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal([]byte(blocks[0]), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Spec.Template.Spec.Init) != 1 {
		t.Fatal("no rinkd init container")
	}
	c := m.Spec.Template.Spec.Init[0]
	if c.Restart != "Always" {
		t.Errorf("rinkd's restartPolicy %q: a native sidecar has Always", c.Restart)
	}
	port := 0
	for i, a := range c.Args {
		if a == "-probe" && i+1 < len(c.Args) {
			port, _ = strconv.Atoi(strings.TrimPrefix(c.Args[i+1], ":"))
		}
	}
	if port == 0 {
		t.Fatalf("rinkd's args %q name no -probe :PORT", c.Args)
	}
	for name, p := range map[string]*probe{"startupProbe": c.Startup, "readinessProbe": c.Readiness, "livenessProbe": c.Liveness} {
		want := "/readyz"
		if name == "livenessProbe" {
			want = "/healthz"
		}
		if p == nil || p.HTTPGet.Path != want || p.HTTPGet.Port != port {
			t.Errorf("rinkd's %s %+v: want %s on the -probe port %d", name, p, want, port)
		}
	}
	named := false
	for _, e := range c.Env {
		named = named || e.Name == "POD_NAME" || e.Name == "RINKD_MEMBER"
	}
	if !named && !slices.Contains(c.Args, "-member") {
		t.Error("rinkd is given no member name (-member, $RINKD_MEMBER or $POD_NAME)")
	}
}
