package mutate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Outcomes of a mutant.
const (
	Killed      = "killed"       // the simulator reported a violation (or crashed, or hung)
	Survived    = "survived"     // the simulator played the whole budget without one
	Masked      = "masked"       // survived alone, killed with the check that masks it undone too (see Mutant.MaskedBy)
	Equivalent  = "equivalent"   // argued equivalent in the catalogue, and not run
	BuildFailed = "build-failed" // the mutated library does not compile: a catalogue error
	NoApply     = "no-apply"     // old does not occur exactly once: a catalogue error
)

// Result is what running one mutant (or a masked pair) found.
type Result struct {
	ID        string  `json:"id"`
	Mechanism string  `json:"mechanism"`
	Outcome   string  `json:"outcome"`
	How       string  `json:"how,omitempty"`          // for a kill: violation, crash or hang
	Seed      uint64  `json:"seed,omitempty"`         // the seed that found the violation
	KillSecs  float64 `json:"kill_seconds,omitempty"` // wall time from the simulator's start to the kill
	Violation string  `json:"violation,omitempty"`
	Detail    string  `json:"detail,omitempty"` // why a build failed, or a mutant does not apply
	Pair      *Result `json:"pair,omitempty"`   // a survivor's run with its masking check undone too
}

// Runner builds and runs mutants.
type Runner struct {
	Root   string        // the go.work root: the library, with tools/ beside it
	Work   string        // a directory for overlays and binaries
	Budget time.Duration // how long the simulator plays each mutant for
}

// Mutate returns the mutated files of ms applied together, by path from
// Root, or the error of one that does not apply.
func (r *Runner) Mutate(ms ...Mutant) (map[string]string, error) {
	files := map[string]string{}
	for _, m := range ms {
		src, ok := files[m.File]
		if !ok {
			b, err := os.ReadFile(filepath.Join(r.Root, m.File))
			if err != nil {
				return nil, fmt.Errorf("mutant %s does not apply: %w", m.ID, err)
			}
			src = string(b)
		}
		out, err := m.Apply(src)
		if err != nil {
			return nil, err
		}
		files[m.File] = out
	}
	return files, nil
}

// Overlay writes files (mutated sources by path from Root) under dir and
// returns the path of an overlay file for go build -overlay.
func (r *Runner) Overlay(dir string, files map[string]string) (string, error) {
	replace := map[string]string{}
	for name, src := range files {
		p := filepath.Join(dir, "src", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			return "", err
		}
		abs, err := filepath.Abs(filepath.Join(r.Root, name))
		if err != nil {
			return "", err
		}
		replace[abs] = p
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	return ov, os.WriteFile(ov, b, 0o644)
}

// Build compiles pkg (a package pattern from Root, e.g.
// ./tools/cmd/rink-sim) with the files replaced as overlay says, into
// out ("": compile only, and keep no binary).
func (r *Runner) Build(ctx context.Context, overlay, out, pkg string) error {
	args := []string{"build", "-overlay", overlay}
	if out != "" {
		args = append(args, "-o", out)
	} else {
		args = append(args, "-o", os.DevNull)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = r.Root
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(buf.String()))
	}
	return nil
}

// Run builds the simulator with mutant m and plays it. A mutant that
// survives alone and names the checks masking it (MaskedBy) is played
// again with their mutants applied too; it is masked when that pair is
// killed and each of those mutants survives alone. byID finds them.
func (r *Runner) Run(ctx context.Context, m Mutant, byID map[string]Mutant) Result {
	res := r.play(ctx, m.ID, m.Flags, m)
	res.Mechanism = m.Mechanism
	if res.Outcome != Survived || len(m.MaskedBy) == 0 {
		return res
	}
	ms, ids, flags := []Mutant{m}, []string{m.ID}, append([]string{}, m.Flags...)
	for _, id := range m.MaskedBy {
		other, ok := byID[id]
		if !ok {
			return res
		}
		ms, ids, flags = append(ms, other), append(ids, id), append(flags, other.Flags...)
	}
	pair := r.play(ctx, strings.Join(ids, "+"), dedupFlags(flags), ms...)
	pair.Mechanism = m.Mechanism
	res.Pair = &pair
	if pair.Outcome != Killed {
		return res
	}
	// The pair shows that m's layer matters only if each partner survives
	// alone: a partner the simulator kills by itself would kill the pair
	// whatever m does.
	for _, other := range ms[1:] {
		if alone := r.play(ctx, other.ID, other.Flags, other); alone.Outcome != Survived {
			res.Detail = fmt.Sprintf("not masked: %s is %s alone, so the pair proves nothing of %s", other.ID, alone.Outcome, m.ID)
			return res
		}
	}
	res.Outcome = Masked
	return res
}

// play builds the simulator with ms applied together, and runs it.
func (r *Runner) play(ctx context.Context, id string, flags []string, ms ...Mutant) Result {
	res := Result{ID: id}
	files, err := r.Mutate(ms...)
	if err != nil {
		res.Outcome, res.Detail = NoApply, err.Error()
		return res
	}
	dir, err := os.MkdirTemp(r.Work, "mutant-"+strings.ReplaceAll(id, "+", "-")+"-")
	if err != nil {
		res.Outcome, res.Detail = BuildFailed, err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	ov, err := r.Overlay(dir, files)
	if err == nil {
		err = r.Build(ctx, ov, filepath.Join(dir, "rink-sim"), "./tools/cmd/rink-sim")
	}
	if err != nil {
		res.Outcome, res.Detail = BuildFailed, err.Error()
		return res
	}
	r.sim(ctx, filepath.Join(dir, "rink-sim"), flags, &res)
	return res
}

var violationLine = regexp.MustCompile(`^seed (\d+): VIOLATION at [^:]*: (.*?)(?: \(replay: .*\))?$`)

// sim runs the simulator binary for the budget, and stops it at the first
// violation it reports.
func (r *Runner) sim(ctx context.Context, bin string, flags []string, res *Result) {
	grace := max(15*time.Second, r.Budget/2)
	ctx, cancel := context.WithTimeout(ctx, r.Budget+grace)
	defer cancel()
	args := append(append([]string{}, flags...), "-duration", r.Budget.String())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = r.Root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		res.Outcome, res.Detail = BuildFailed, err.Error()
		return
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		res.Outcome, res.Detail = BuildFailed, err.Error()
		return
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	found := false
	for sc.Scan() {
		if v := violationLine.FindStringSubmatch(sc.Text()); v != nil && !found {
			found = true
			res.Outcome, res.How = Killed, "violation"
			res.Seed, _ = strconv.ParseUint(v[1], 10, 64)
			res.KillSecs = time.Since(began).Seconds()
			res.Violation = v[2]
			_ = cmd.Process.Kill() // (one violation is enough)
		}
	}
	werr := cmd.Wait()
	switch {
	case found:
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.Outcome, res.How = Killed, "hang"
		res.KillSecs = time.Since(began).Seconds()
		res.Detail = fmt.Sprintf("the simulator ran past its budget by %v: a history never ends", grace)
	case werr != nil:
		res.Outcome, res.How = Killed, "crash"
		res.KillSecs = time.Since(began).Seconds()
		res.Detail = firstLines(stderr.String(), 3)
	default:
		res.Outcome = Survived
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

// dedupFlags drops a flag given again with the same value (two mutants
// of a pair may both ask for -keys).
func dedupFlags(flags []string) []string {
	var out []string
	seen := map[string]bool{}
	for i := 0; i < len(flags); i++ {
		f := flags[i]
		if i+1 < len(flags) && !strings.HasPrefix(flags[i+1], "-") {
			f += " " + flags[i+1]
			i++
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, strings.Fields(f)...)
		}
	}
	return out
}
