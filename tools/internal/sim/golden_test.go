package sim

import (
	"bufio"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/simhook"
)

var updateTraces = flag.Bool("sim.update", false, "rewrite testdata/traces.txt from the histories played now (TestTracesGolden)")

// tracesFile holds one line per history that TestTracesGolden replays.
const tracesFile = "testdata/traces.txt"

// goldenCase is one history TestTracesGolden plays.
type goldenCase struct {
	name string
	seed uint64
	cfg  Config
}

// goldenCases lists the histories whose traces must not change while code
// moves (issue 43): the default seeds, a rink with replicas and zones and
// every fault kind, seeds with key faults, each planted bug at the first
// seed that finds it (found by -sim.update; the file records it), and
// seeds with key faults and clocks that drift (Config.Drift), and seeds
// with key faults and functions that outlast their holdings (Config.Drain)
// or load (Config.Load) or warm-up (Config.Warmup).
func goldenCases(plantSeeds map[string]uint64) []goldenCase {
	var cs []goldenCase
	def := DefaultConfig()
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 722} {
		cs = append(cs, goldenCase{"default", seed, def})
	}
	rep := DefaultConfig()
	rep.Members, rep.Replicas, rep.Zones, rep.Kinds = 6, 3, 3, FaultKinds
	for _, seed := range []uint64{1, 2, 3} {
		cs = append(cs, goldenCase{"replicas", seed, rep})
	}
	keyed := DefaultConfig()
	keyed.KeyFaults = true
	for _, seed := range []uint64{1, 2, 3, 2004} {
		cs = append(cs, goldenCase{"keys", seed, keyed})
	}
	for _, plant := range simhook.Plants {
		cfg := plantConfig(plant)
		cs = append(cs, goldenCase{"plant:" + plant, plantSeeds[plant], cfg})
	}
	drift := keyed
	drift.Drift = DriftBound
	for _, seed := range []uint64{1, 2} {
		cs = append(cs, goldenCase{"drift", seed, drift})
	}
	for _, seed := range []uint64{1, 2} {
		cs = append(cs, goldenCase{"drain", seed, drainConfig()})
	}
	for _, seed := range []uint64{1, 2} {
		cs = append(cs, goldenCase{"load", seed, loadConfig()})
	}
	for _, seed := range []uint64{1, 2} {
		cs = append(cs, goldenCase{"warmup", seed, warmupConfig()})
	}
	return cs
}

// plantConfig is the history config TestPlantedBugsAreFound looks for
// plant in.
func plantConfig(plant string) Config {
	cfg := DefaultConfig()
	cfg.Plant = plant
	if plant == "skip-replica-barrier" {
		cfg.Members, cfg.Replicas, cfg.Zones = 6, 2, 3
	}
	if plant == "forget-recorded" || plant == "gone-on-deletion" {
		cfg.KeyFaults = true
	}
	if plant == "skip-drain" {
		cfg.Drain = 500 * time.Millisecond // (it can fail only with a drain)
	}
	if plant == "skip-fence-drain" {
		// (It can fail only with a drain, and where a fence comes before
		// the lease's deadline: an operator's deletions of member keys.)
		cfg.Drain, cfg.KeyFaults = 500*time.Millisecond, true
	}
	return cfg
}

// goldenLine plays c and says what it did in one line: its trace's hash,
// its events, its member-steps and its violation.
func goldenLine(c goldenCase) string {
	c.cfg.Trace = true
	res := Run(c.seed, c.cfg)
	v := "none"
	if res.Violation != "" {
		v = fmt.Sprintf("%q", res.Violation)
	}
	return fmt.Sprintf("%s seed=%d events=%d steps=%d trace=%x violation=%s",
		c.name, c.seed, res.Events, res.MemberSteps, sha256.Sum256([]byte(res.Trace)), v)
}

// TestTracesGolden: the histories of goldenCases play exactly as recorded
// in testdata/traces.txt, byte for byte in their traces. A change that
// only moves code (issue 43's migration) must leave it green; one that
// means to change histories regenerates the file with -sim.update and
// says in its commit which histories changed and why.
func TestTracesGolden(t *testing.T) {
	if *updateTraces {
		writeGolden(t)
		return
	}
	want, seeds := readGolden(t)
	cs := goldenCases(seeds)
	if len(want) != len(cs) {
		t.Fatalf("%s has %d lines, goldenCases %d (regenerate with -sim.update)", tracesFile, len(want), len(cs))
	}
	for i, c := range cs {
		if got := goldenLine(c); got != want[i] {
			t.Errorf("history changed (replay: go run ./tools/cmd/rink-sim -trace ..., or regenerate with go test ./tools/internal/sim -run TestTracesGolden -sim.update)\nwant %s\ngot  %s", want[i], got)
		}
	}
}

// readGolden reads tracesFile's lines, and the seed each plant's line
// names.
func readGolden(t *testing.T) ([]string, map[string]uint64) {
	f, err := os.Open(tracesFile)
	if err != nil {
		t.Fatalf("%v (create it with -sim.update)", err)
	}
	defer f.Close()
	var lines []string
	seeds := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines = append(lines, line)
		var name string
		var seed uint64
		if _, err := fmt.Sscanf(line, "%s seed=%d", &name, &seed); err != nil {
			t.Fatalf("%s: %q: %v", tracesFile, line, err)
		}
		if p, ok := strings.CutPrefix(name, "plant:"); ok {
			seeds[p] = seed
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines, seeds
}

// writeGolden finds each plant's first seed (of 2,000) and writes
// tracesFile.
func writeGolden(t *testing.T) {
	seeds := map[string]uint64{}
	for _, plant := range simhook.Plants {
		cfg := plantConfig(plant)
		for seed := uint64(1); seed <= 2000; seed++ {
			if Run(seed, cfg).Violation != "" {
				seeds[plant] = seed
				break
			}
		}
		if seeds[plant] == 0 {
			t.Fatalf("%s: no violation in 2,000 seeds", plant)
		}
	}
	var b strings.Builder
	b.WriteString("# The histories TestTracesGolden replays: name, seed, events, member-steps,\n")
	b.WriteString("# the sha256 of the trace, and the violation found. Regenerate with\n")
	b.WriteString("# go test ./tools/internal/sim -run TestTracesGolden -sim.update\n")
	for _, c := range goldenCases(seeds) {
		b.WriteString(goldenLine(c))
		b.WriteByte('\n')
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tracesFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
