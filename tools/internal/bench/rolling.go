package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/rink-go/rink"
)

// rollStep is what the driver did and saw in one replacement of a rolling
// deploy.
type rollStep struct {
	old, newcomer string
	oldIndex      int  // the old member's index when it was told to leave
	oldLed        bool // the old member led the rink when it was told to leave

	joinAt    time.Time // New called for the newcomer
	joinedAt  time.Time // New returned
	waitingAt time.Time // the newcomer saw itself waiting in the map
	leaveAt   time.Time // Shutdown called on the old member
	leftAt    time.Time // Shutdown returned
	settledAt time.Time // every member applied one map and every slot was held again
}

// Rolling replaces each of 4 members (1,024 roles) by a newcomer that
// joins, waits, and inherits, and reports acquisitions per role, gaps per
// slot move and the total unheld role-time. With plotTo set it also draws
// the roles each member held over time.
//
// It also reports what a diagnosis of a run that moved roles more than once
// needs: how many newcomers were promoted into their predecessor's index
// (the rest were ranked some other way, e.g. appended after the rebalance
// delay), the longest time from a newcomer's join to its predecessor's
// leave, and how many roles moved more than once. A run with more than one
// acquisition per role or a fence writes its timeline, the members' warnings
// and the leaders' log to env.Diag.
func Rolling(env Env, plotTo string) (Sample, error) {
	rec := &recorder{}
	logs := &logCapture{}
	rs := roles(1024)
	const n = 4
	opts := []rink.Option{rink.WithRebalanceDelay(2 * time.Second), rink.WithLogger(logs.logger())}
	name, old, err := cluster(env, rec, "rolling", n, opts...)
	if err != nil {
		return nil, err
	}
	all := append([]*member{}, old...)
	defer func() { stopAll(all) }()
	mark := time.Now()
	var steps []rollStep
	for i, o := range old {
		st := rollStep{old: o.r.Member(), newcomer: fmt.Sprintf("new%d", i), joinAt: time.Now()}
		nm, err := join(env.Endpoints, name, st.newcomer, rec, opts...)
		if err != nil {
			return nil, err
		}
		st.joinedAt = time.Now()
		all = append(all, nm)
		if err := until(10*time.Second, "newcomer waiting", func() bool { return nm.r.Rank().Waiting }); err != nil {
			return nil, err
		}
		st.waitingAt = time.Now()
		rk := o.r.Rank()
		st.oldIndex, st.oldLed = rk.Index, rk.Leader == o.r.Member()
		st.leaveAt = time.Now()
		if err := o.r.Shutdown(context.Background()); err != nil {
			return nil, err
		}
		st.leftAt = time.Now()
		o.cli.Close()
		o.r = nil
		for j, m := range all {
			if m == o {
				all = append(all[:j], all[j+1:]...)
				break
			}
		}
		if err := until(30*time.Second, "settled", settled(rec, all)); err != nil {
			return nil, err
		}
		st.settledAt = time.Now()
		steps = append(steps, st)
	}
	events := rec.snapshot()
	acquired := map[int]int{}
	fences := 0
	for _, e := range events {
		if e.Kind == rink.EventAcquired && e.Time.After(mark) {
			acquired[e.Slot]++
		}
		if e.Kind == rink.EventFenced && e.Time.After(mark) {
			fences++
		}
	}
	acqRoles, twice := 0, 0
	for _, r := range rs {
		acqRoles += acquired[slotOf(r)]
		if acquired[slotOf(r)] > 1 {
			twice++
		}
	}
	if plotTo != "" {
		if err := plotHoldings(plotTo, "rolling deploy: 4 members x 1,024 roles, each replaced by a newcomer", events, rs, mark); err != nil {
			return nil, err
		}
	}
	gaps := moves(events, mark)
	var unheld, joinToLeave time.Duration
	for _, g := range gaps {
		unheld += g
	}
	ranked := rankings(rec.otherEvents(), steps)
	promoted := 0
	for i, st := range steps {
		joinToLeave = max(joinToLeave, st.leaveAt.Sub(st.joinAt))
		if r := ranked[i]; r.ok && r.rank.Index == st.oldIndex && r.rank.Size == n {
			promoted++
		}
	}
	if env.Diag != nil && (acqRoles != len(rs) || fences > 0) {
		diagnoseRolling(env.Diag, rs, mark, steps, ranked, events, logs.snapshot(), acqRoles, fences)
	}
	return Sample{
		"role_acquisitions":    float64(acqRoles),
		"fences":               float64(fences),
		"overlaps":             float64(overlaps(events)),
		"gap_median_ms":        ms(percentile(gaps, 0.5)),
		"gap_worst_ms":         ms(maxDur(gaps)),
		"unheld_slot_s":        unheld.Seconds(),
		"newcomers_promoted":   float64(promoted),
		"roles_moved_twice":    float64(twice),
		"join_to_leave_max_ms": ms(joinToLeave),
	}, nil
}

// ranking is how a newcomer was first ranked.
type ranking struct {
	ok   bool
	at   time.Time
	rank rink.Rank
}

// rankings finds, for each step's newcomer, its first rank with an index.
func rankings(others []rink.Event, steps []rollStep) []ranking {
	out := make([]ranking, len(steps))
	for i, st := range steps {
		for _, e := range others {
			if e.Kind == rink.EventRankChanged && e.Member == st.newcomer && e.Rank.Index >= 0 {
				out[i] = ranking{ok: true, at: e.Time, rank: e.Rank}
				break
			}
		}
	}
	return out
}

// diagnoseRolling writes the timeline of a rolling run that missed its
// target: per step, when the newcomer joined and the old member left, how
// and by whom the newcomer was ranked and how many roles moved; then which
// slots moved more than once and through whom, every fence with the
// member's warnings, and the log lines of leadership (elections, maps
// proclaimed, hand-overs) and every warning.
func diagnoseRolling(w io.Writer, rs []string, mark time.Time, steps []rollStep, ranked []ranking, events []rink.Event, logs []logLine, acqRoles, fences int) {
	at := func(t time.Time) string { return fmt.Sprintf("%+.3fs", t.Sub(mark).Seconds()) }
	perSlot := map[int]int{}
	for _, r := range rs {
		perSlot[slotOf(r)]++
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	fmt.Fprintf(w, "rolling: OUTLIER: %d role acquisitions (want %d), %d fences; times from the start of the deploy\n", acqRoles, len(rs), fences)

	// Who proclaimed which map version (leaders log it at info).
	proclaimer := map[int64]string{}
	for _, l := range logs {
		if v, ok := l.Fields["version"].(int64); ok && (l.Message == "proclaimed map" || l.Message == "handed over leadership") {
			proclaimer[v] = l.Member + " (" + l.Message + ")"
		}
	}
	for i, st := range steps {
		end := time.Now()
		if i+1 < len(steps) {
			end = steps[i+1].joinAt
		}
		acq := 0
		for _, e := range events {
			if e.Kind == rink.EventAcquired && !e.Time.Before(st.joinAt) && e.Time.Before(end) {
				acq += perSlot[e.Slot]
			}
		}
		role := "plain member"
		if st.oldLed {
			role = "leader"
		}
		fmt.Fprintf(w, "  step %d: %s replaces %s (index %d, %s): join %s, New returned +%v, listed waiting +%v, leave +%v (Shutdown took %v), settled +%v; %d role acquisitions\n",
			i+1, st.newcomer, st.old, st.oldIndex, role, at(st.joinAt),
			st.joinedAt.Sub(st.joinAt).Round(time.Microsecond), st.waitingAt.Sub(st.joinAt).Round(time.Microsecond),
			st.leaveAt.Sub(st.joinAt).Round(time.Microsecond), st.leftAt.Sub(st.leaveAt).Round(time.Microsecond),
			st.settledAt.Sub(st.joinAt).Round(time.Microsecond), acq)
		r := ranked[i]
		switch {
		case !r.ok:
			fmt.Fprintf(w, "          %s was never ranked\n", st.newcomer)
		case r.rank.Index == st.oldIndex && r.rank.Size == len(steps):
			fmt.Fprintf(w, "          %s promoted into index %d at %s (join +%v), map v%d by %s\n",
				st.newcomer, r.rank.Index, at(r.at), r.at.Sub(st.joinAt).Round(time.Microsecond), r.rank.Version, proclaimer[r.rank.Version])
		default:
			fmt.Fprintf(w, "          %s NOT promoted: first ranked at index %d of %d at %s (join +%v, %v after it was listed waiting), map v%d by %s\n",
				st.newcomer, r.rank.Index, r.rank.Size, at(r.at), r.at.Sub(st.joinAt).Round(time.Microsecond),
				r.at.Sub(st.waitingAt).Round(time.Microsecond), r.rank.Version, proclaimer[r.rank.Version])
		}
	}

	// Slots acquired more than once after the start: the path of holders,
	// grouped.
	paths := map[string][2]int{} // path -> slots, roles
	holder := map[int][]string{}
	for _, e := range events {
		if e.Kind != rink.EventAcquired {
			continue
		}
		if e.Time.After(mark) {
			if len(holder[e.Slot]) == 0 {
				holder[e.Slot] = []string{e.From}
			}
			holder[e.Slot] = append(holder[e.Slot], e.Member)
		}
	}
	for s, h := range holder {
		if len(h) > 2 {
			p := strings.Join(h, " -> ")
			c := paths[p]
			paths[p] = [2]int{c[0] + 1, c[1] + perSlot[s]}
		}
	}
	var keys []string
	for p := range paths {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		fmt.Fprintf(w, "  moved more than once: %d slots (%d roles): %s\n", paths[p][0], paths[p][1], p)
	}
	initial := map[string]bool{}
	for _, st := range steps {
		initial[st.old] = true
	}
	late, lateSlots := 0, 0
	var lastLate time.Time
	for _, e := range events {
		if e.Kind == rink.EventAcquired && e.Time.After(mark) && initial[e.Member] && initial[e.From] {
			late += perSlot[e.Slot]
			lateSlots++
			lastLate = e.Time
		}
	}
	if late > 0 {
		fmt.Fprintf(w, "  NOT SETTLED at the start: %d slots (%d roles) moved between members of the initial rink after it, the last at %s\n", lateSlots, late, at(lastLate))
	}
	for _, e := range events {
		if e.Kind == rink.EventFenced && e.Time.After(mark) {
			fmt.Fprintf(w, "  FENCE %s %s: %v\n", at(e.Time), e.Member, e.Cause)
		}
	}
	for _, l := range logs { // from the rink's start: how it was built matters too
		switch {
		case l.Level >= zapcore.WarnLevel,
			l.Message == "elected leader", l.Message == "proclaimed map", l.Message == "handed over leadership",
			l.Message == "rank changed", l.Message == "rejoined", l.Message == "left the rink":
			fmt.Fprintf(w, "  log %s %s\n", at(l.Time), l)
		}
	}
}
