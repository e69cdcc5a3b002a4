// Package mutate applies source mutants of the rink library, kept as data
// in catalogue.txt, builds the simulator (tools/cmd/rink-sim) with each,
// and runs it for a bounded time: a mutant the simulator reports a
// violation for is killed, one it plays without is a survivor. The
// mutation score, killed over the mutants not argued equivalent, measures
// whether the simulator can fail where the library is wrong (issue 43).
//
// A mutant replaces one exact snippet (old, which must occur exactly once
// in its file) with another (new). Nothing is copied: the mutated file is
// handed to go build through -overlay, so the working tree never changes.
// See tools/cmd/rink-mutate for the command.
package mutate

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

// Mechanisms are the parts of the library a mutant may name as the one it
// hits.
var Mechanisms = []string{
	"barrier", "fence", "ghosts", "leases", "floor", "acks", "records", "apply",
	"planner", "ranks", "replicas", "warm-promotion", "load", "drain", "warm-up",
	"mapjson", "floorjson", "keys", "history", "restore", "stray", "depart",
	"driver", "watch", "session", "keeper", "view", "campaign", "lifecycle",
}

// Mutant is one source edit of the library.
type Mutant struct {
	ID        string   // short and unique: names the mutant in -only and reports
	Mechanism string   // one of Mechanisms
	File      string   // the file edited, relative to the go.work root
	Desc      string   // the realistic bug it plants, in one line
	Flags     []string // rink-sim's flags to run it with (besides -duration and -json)
	MaskedBy  []string // the ids of mutants that undo the checks masking this one (nil: none)
	// Equivalent is the argument why no simulator, nor any test, can
	// tell the mutant from the library ("": it is not equivalent).
	Equivalent string
	Old, New   string // the exact snippet replaced, and what replaces it
	Line       int    // the catalogue line the entry starts at
}

// Catalogue is the catalogue's text (see Parse for its form).
//
//go:embed catalogue.txt
var Catalogue string

// Load parses the embedded catalogue.
func Load() ([]Mutant, error) { return Parse(Catalogue) }

// Parse reads a catalogue. Lines before the first entry, and lines
// starting with '#' between fields, are comments. An entry is
//
//	== <id>
//	mechanism: <mechanism>
//	file: <path from the go.work root>
//	desc: <one line>
//	flags: <rink-sim flags>            (optional)
//	masked_by: <id>[,<id>...]           (optional: the mutants that undo the checks that mask it)
//	equivalent: <argument>              (optional)
//	--- old
//	<the exact lines replaced, verbatim>
//	--- new
//	<the lines that replace them, verbatim>
//
// old and new run to the next "--- " or "== " line, and end without the
// last newline; blank lines at their end are dropped.
func Parse(text string) ([]Mutant, error) {
	var (
		out  []Mutant
		cur  *Mutant
		body *[]string
		old  []string
		neu  []string
	)
	flush := func() error {
		if cur == nil {
			return nil
		}
		cur.Old = strings.Join(trimBlank(old), "\n")
		cur.New = strings.Join(trimBlank(neu), "\n")
		if err := cur.check(); err != nil {
			return err
		}
		out = append(out, *cur)
		cur, body, old, neu = nil, nil, nil, nil
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			if err := flush(); err != nil {
				return nil, err
			}
			cur = &Mutant{ID: strings.TrimSpace(line[3:]), Line: i + 1}
		case cur == nil:
			// (the catalogue's preamble)
		case line == "--- old":
			body = &old
		case line == "--- new":
			body = &neu
		case body != nil:
			*body = append(*body, line)
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		default:
			key, val, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("catalogue line %d: want key: value, got %q", i+1, line)
			}
			val = strings.TrimSpace(val)
			switch key {
			case "mechanism":
				cur.Mechanism = val
			case "file":
				cur.File = val
			case "desc":
				cur.Desc = val
			case "flags":
				cur.Flags = strings.Fields(val)
			case "masked_by":
				for _, id := range strings.Split(val, ",") {
					cur.MaskedBy = append(cur.MaskedBy, strings.TrimSpace(id))
				}
			case "equivalent":
				cur.Equivalent = val
			default:
				return nil, fmt.Errorf("catalogue line %d: unknown field %q", i+1, key)
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range out {
		if seen[m.ID] {
			return nil, fmt.Errorf("catalogue: mutant %s twice", m.ID)
		}
		seen[m.ID] = true
	}
	for _, m := range out {
		for _, id := range m.MaskedBy {
			if !seen[id] || id == m.ID {
				return nil, fmt.Errorf("catalogue: mutant %s masked by %s, which is not another mutant of the catalogue", m.ID, id)
			}
		}
	}
	return out, nil
}

func (m *Mutant) check() error {
	switch {
	case m.ID == "" || strings.ContainsAny(m.ID, ", +"):
		return fmt.Errorf("catalogue line %d: bad id %q", m.Line, m.ID)
	case !slices.Contains(Mechanisms, m.Mechanism):
		return fmt.Errorf("mutant %s: unknown mechanism %q", m.ID, m.Mechanism)
	case m.File == "" || m.Desc == "":
		return fmt.Errorf("mutant %s: file and desc are required", m.ID)
	case m.Old == "":
		return fmt.Errorf("mutant %s: no old snippet", m.ID)
	case m.Old == m.New:
		return fmt.Errorf("mutant %s: new is old", m.ID)
	}
	return nil
}

func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Apply returns src with m's old snippet replaced by its new one, or an
// error saying it does not apply: old occurs not exactly once. The first
// line of old may start anywhere in a line; the lines after it are
// indented relative to that line's indentation (the catalogue writes
// them as if it had none), in old as in new.
func (m *Mutant) Apply(src string) (string, error) {
	first, _, _ := strings.Cut(m.Old, "\n")
	n, at, indent := 0, -1, ""
	for _, ind := range indents(src, first) {
		old := reindent(m.Old, ind)
		if c := strings.Count(src, old); c > 0 {
			n += c
			at, indent = strings.Index(src, old), ind
		}
	}
	if n != 1 {
		return "", fmt.Errorf("mutant %s does not apply to %s: its old snippet occurs %d times, not once", m.ID, m.File, n)
	}
	old := reindent(m.Old, indent)
	return src[:at] + reindent(m.New, indent) + src[at+len(old):], nil
}

// indents returns the distinct indentations of the lines in which first
// occurs.
func indents(src, first string) []string {
	var out []string
	for i := 0; first != ""; {
		j := strings.Index(src[i:], first)
		if j < 0 {
			break
		}
		start := strings.LastIndexByte(src[:i+j], '\n') + 1
		line := src[start:]
		ind := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		if !slices.Contains(out, ind) {
			out = append(out, ind)
		}
		i += j + 1
	}
	return out
}

// reindent indents the lines of s after the first by ind.
func reindent(s, ind string) string {
	return strings.ReplaceAll(s, "\n", "\n"+ind)
}
