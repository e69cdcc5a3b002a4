// Command rink-mutate measures whether the simulator can fail: it applies
// each mutant of a catalogue of small, realistic bugs in the library
// (tools/internal/mutate/catalogue.txt), builds tools/cmd/rink-sim with
// it, plays it for at most a budget, and reports which the simulator
// killed (found a violation for) and which survived.
//
//	go run ./tools/cmd/rink-mutate [-budget 60s] [-only id,id] [-parallel 1] [-list] [-json] [-all]
//
// Run it from the go.work root (or give -root). The working tree is never
// changed: each mutated file reaches go build through -overlay. A mutant
// is run with the simulator flags its entry names (-replicas 2 -zones 3
// for replica sets, -keys for an operator's key deletions); the simulator
// stops at the first violation, whose seed replays it:
//
//	go build -overlay ... ./tools/cmd/rink-sim, then rink-sim <flags> -seed <seed>
//
// Results: killed (a violation, or the simulator crashed or hung),
// survived, masked (survived alone, and was killed once the entry named by
// masked_by, the second check that hid it, was undone too, that entry
// surviving alone as well: each layer of defence holds alone), equivalent (argued so in the catalogue; run only
// with -all), build-failed and no-apply (catalogue errors: the exit
// status is 1). It prints a table, then one JSON line: mutants, killed,
// masked, survived (ids), equivalent, errors, mutation_score (killed and
// masked over the mutants not equivalent, errors included) and
// mutation_score_strict (killed alone over the same).
//
// The catalogue's entries are checked against the tree by
// go test ./tools/internal/mutate (each old snippet occurs exactly once,
// and the mutated file parses; -build compiles each too).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rink-go/rink/tools/internal/mutate"
)

func main() {
	budget := flag.Duration("budget", 60*time.Second, "how long the simulator plays each mutant for (wall time)")
	only := flag.String("only", "", "run only these mutants, comma-separated ids")
	parallel := flag.Int("parallel", 1, "mutants built and played at a time")
	list := flag.Bool("list", false, "list the catalogue and run nothing")
	asJSON := flag.Bool("json", false, "print one JSON object per mutant instead of the table (the last line is the summary either way)")
	all := flag.Bool("all", false, "run the mutants argued equivalent too")
	root := flag.String("root", "", "the go.work root (default: go env GOWORK's directory)")
	flag.Parse()

	cat, err := mutate.Load()
	if err != nil {
		fail(2, err)
	}
	byID := map[string]mutate.Mutant{}
	for _, m := range cat {
		byID[m.ID] = m
	}
	chosen := cat
	if *only != "" {
		chosen = nil
		for _, id := range strings.Split(*only, ",") {
			m, ok := byID[strings.TrimSpace(id)]
			if !ok {
				fail(2, fmt.Errorf("no mutant %q in the catalogue (see -list)", id))
			}
			chosen = append(chosen, m)
		}
	}
	if *list {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tMECHANISM\tFILE\tFLAGS\tDESCRIPTION")
		for _, m := range chosen {
			desc := m.Desc
			if len(m.MaskedBy) > 0 {
				desc += " [masked by " + strings.Join(m.MaskedBy, ",") + "]"
			}
			if m.Equivalent != "" {
				desc += " [equivalent]"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Mechanism, m.File, strings.Join(m.Flags, " "), desc)
		}
		w.Flush()
		return
	}
	if *root == "" {
		*root = goworkRoot()
	}
	work, err := os.MkdirTemp("", "rink-mutate-")
	if err != nil {
		fail(2, err)
	}
	defer os.RemoveAll(work)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r := &mutate.Runner{Root: *root, Work: work, Budget: *budget}

	results := make([]mutate.Result, len(chosen))
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, max(1, *parallel))
	for i, m := range chosen {
		if m.Equivalent != "" && !*all {
			results[i] = mutate.Result{ID: m.ID, Mechanism: m.Mechanism, Outcome: mutate.Equivalent, Detail: m.Equivalent}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			res := r.Run(ctx, m, byID)
			mu.Lock()
			defer mu.Unlock()
			results[i] = res
			fmt.Fprintf(os.Stderr, "rink-mutate: %s: %s%s\n", res.ID, res.Outcome, brief(res))
		}()
	}
	wg.Wait()

	if *asJSON {
		for _, res := range results {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
		}
	} else {
		table(results)
	}
	sum := summarize(chosen, results, *budget)
	b, _ := json.Marshal(sum)
	fmt.Println(string(b))
	if sum.Errors > 0 {
		os.Exit(1)
	}
}

// summary is the last line's figures.
type summary struct {
	Mutants     int      `json:"mutants"`
	Killed      int      `json:"killed"`
	Masked      int      `json:"masked"`
	Equivalent  int      `json:"equivalent"`
	Errors      int      `json:"errors"`
	Survived    []string `json:"survived"`
	ErrorIDs    []string `json:"error_ids,omitempty"`
	Score       float64  `json:"mutation_score"`
	StrictScore float64  `json:"mutation_score_strict"`
	BudgetSecs  float64  `json:"budget_seconds"`
}

func summarize(chosen []mutate.Mutant, results []mutate.Result, budget time.Duration) summary {
	s := summary{Mutants: len(chosen), Survived: []string{}, BudgetSecs: budget.Seconds()}
	for i, res := range results {
		switch res.Outcome {
		case mutate.Killed:
			s.Killed++
		case mutate.Masked:
			s.Masked++
		case mutate.Survived:
			s.Survived = append(s.Survived, res.ID)
		case mutate.Equivalent:
			s.Equivalent++
		case mutate.BuildFailed, mutate.NoApply:
			s.Errors++
			s.ErrorIDs = append(s.ErrorIDs, res.ID)
		case "":
			s.Errors++ // (interrupted)
			s.ErrorIDs = append(s.ErrorIDs, chosen[i].ID)
		}
	}
	if n := s.Mutants - s.Equivalent; n > 0 {
		s.Score = float64(s.Killed+s.Masked) / float64(n)
		s.StrictScore = float64(s.Killed) / float64(n)
	}
	return s
}

func table(results []mutate.Result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tMECHANISM\tRESULT\tTIME TO KILL\tSEED\tNOTE")
	row := func(res mutate.Result) {
		kill, seed := "-", "-"
		if res.KillSecs > 0 {
			kill = fmt.Sprintf("%.2fs", res.KillSecs)
		}
		if res.Seed != 0 {
			seed = fmt.Sprint(res.Seed)
		}
		note := res.Violation
		if res.How != "" && res.How != "violation" || note == "" {
			note = strings.TrimSpace(res.How + " " + res.Detail)
		}
		if len(note) > 100 {
			note = note[:97] + "..."
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", res.ID, res.Mechanism, res.Outcome, kill, seed, note)
	}
	for _, res := range results {
		row(res)
		if res.Pair != nil {
			p := *res.Pair
			p.ID = "  " + p.ID
			row(p)
		}
	}
	w.Flush()
}

func brief(res mutate.Result) string {
	switch {
	case res.Outcome == mutate.Killed:
		return fmt.Sprintf(" (%s, seed %d, %.2fs)", res.How, res.Seed, res.KillSecs)
	case res.Pair != nil:
		return fmt.Sprintf(" (with %s: %s)", res.Pair.ID, res.Pair.Outcome)
	case res.Detail != "":
		return ": " + firstLine(res.Detail)
	}
	return ""
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// goworkRoot returns the directory of the go.work file go uses here.
func goworkRoot() string {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		fail(2, fmt.Errorf("go env GOWORK: %w", err))
	}
	p := strings.TrimSpace(string(out))
	if p == "" || p == "off" {
		fail(2, fmt.Errorf("no go.work here: run from the repository's root, or give -root"))
	}
	return filepath.Dir(p)
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "rink-mutate:", err)
	os.Exit(code)
}
