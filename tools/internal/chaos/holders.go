package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// The checks of a rink of several replicas per slot (rink.WithReplicas):
// at no instant do more than k members act on a role, as its primary or
// as a secondary (CheckHolders); after a heal every role has its
// secondaries again (SecondaryLiveness). The primary's own checks (Check,
// Liveness) are unchanged beside them.

// HoldersReport is what CheckHolders finds.
type HoldersReport struct {
	Replicas int // k
	// SecondaryAcquisitions and SecondaryActions count the records of
	// secondary holdings.
	SecondaryAcquisitions, SecondaryActions int
	// Windows counts the holdings, primary or secondary, that acted at
	// least once (the others show no action to check).
	Windows int
	// Violations lists each time more than k members acted on a role at
	// once (kind "holders"), once per such episode.
	Violations []Violation
}

// window is one holding's span of proven holding: from its acquisition
// record to its last action.
type window struct {
	member, proc string
	role         string
	secondary    bool
	id           int64 // the token, or a secondary holding's number
	hasAcq       bool  // its acquisition record was read,
	acquired     int64 // at this time
	acts         int
	first, last  int64 // its first and last action
}

func (w *window) start() int64 {
	if w.hasAcq && w.acquired <= w.first {
		return w.acquired
	}
	return w.first
}

func (w *window) String() string {
	what := fmt.Sprintf("primary, token %d", w.id)
	if w.secondary {
		what = fmt.Sprintf("secondary #%d", w.id)
	}
	return fmt.Sprintf("%s (%s, %s)", w.proc, w.member, what)
}

// CheckHolders reads the merged records of all members of a rink of k
// replicas per slot and reports every instant at which more than k
// members acted on one role. A member acts on a role, as its primary or
// as a secondary, throughout each of its holdings' windows: from the
// holding's acquisition record to its last action record. Members are
// processes (Record.Proc), as in Check: a process holding a role both as
// a secondary and, promoted, as its primary is one member.
//
// A window is always inside the holding it stands for, whatever the
// delays between an event and its record, so an instant covered by more
// than k windows is an instant at which more than k members held the
// role:
//
//   - its start, the acquisition record, is stamped when the record is
//     written, after the holding began (AwaitRole or Run returned, or
//     Handler.Secondary was called): a record that queued behind other
//     records' fsyncs, or a process stopped in between, only starts the
//     window later;
//   - its end, the last action, is stamped right before a check of the
//     holding's context that found it alive (see Log.WriteHeld): an
//     action recorded late was still taken inside the holding, and an
//     action whose check failed is not recorded;
//   - a holding that never acted has no window: its acquisition record
//     alone may have been stamped after the holding had ended (written
//     late), and proves nothing;
//   - a process killed or stopped loses or delays records, which only
//     shortens or removes its windows; a release record does not count
//     (a stopped process logs it when it resumes).
//
// The records of one holding are told apart by process, role and token
// (primaries: an acquisition starts a new holding) or by the holding's
// number (secondaries).
func CheckHolders(origin int64, records []Record, k int) HoldersReport {
	at := func(mono int64) string { return secs(origin, mono) }
	sort.SliceStable(records, func(i, j int) bool { return records[i].Mono < records[j].Mono })
	rep := HoldersReport{Replicas: k}
	type key struct {
		proc, role string
		secondary  bool
		id         int64
	}
	open := map[key]*window{}
	var windows []*window
	byRole := map[string][]*window{}
	done := func(w *window) {
		if w.acts > 0 {
			windows = append(windows, w)
		}
	}
	for _, r := range records {
		var secondary, acquire bool
		switch r.Kind {
		case Acquire:
			acquire = true
		case Act:
		case AcquireSecondary:
			secondary, acquire = true, true
			rep.SecondaryAcquisitions++
		case ActSecondary:
			secondary = true
			rep.SecondaryActions++
		default:
			continue
		}
		kk := key{r.proc(), r.Role, secondary, r.Token}
		w := open[kk]
		if acquire {
			if w != nil {
				done(w) // the same token acquired again: another holding
			}
			open[kk] = &window{member: r.Member, proc: r.proc(), role: r.Role, secondary: secondary, id: r.Token, hasAcq: true, acquired: r.Mono}
			continue
		}
		if w == nil {
			// An action whose acquisition was not read: its window starts
			// at the action.
			w = &window{member: r.Member, proc: r.proc(), role: r.Role, secondary: secondary, id: r.Token}
			open[kk] = w
		}
		if w.acts == 0 {
			w.first = r.Mono
		}
		w.acts++
		w.last = r.Mono
	}
	for _, w := range open {
		done(w)
	}
	rep.Windows = len(windows)
	for _, w := range windows {
		byRole[w.role] = append(byRole[w.role], w)
	}
	for _, role := range slices.Sorted(maps.Keys(byRole)) {
		rep.Violations = append(rep.Violations, overHolders(role, byRole[role], k, at)...)
	}
	sort.SliceStable(rep.Violations, func(i, j int) bool { return rep.Violations[i].Mono < rep.Violations[j].Mono })
	return rep
}

// overHolders sweeps one role's windows in time and reports each episode
// in which more than k distinct members held windows at once: at its first
// instant, with the windows open then. Windows are closed intervals: one
// that starts at the instant another ends overlaps it (both holdings were
// alive then).
func overHolders(role string, windows []*window, k int, at func(int64) string) []Violation {
	type event struct {
		t     int64
		start bool
		w     *window
	}
	var evs []event
	for _, w := range windows {
		evs = append(evs, event{w.start(), true, w}, event{w.last, false, w})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].start && !evs[j].start
	})
	count := map[string]int{} // open windows per process
	openW := map[*window]bool{}
	var out []Violation
	over := false
	for _, e := range evs {
		if !e.start {
			delete(openW, e.w)
			if count[e.w.proc]--; count[e.w.proc] == 0 {
				delete(count, e.w.proc)
			}
			if len(count) <= k {
				over = false
			}
			continue
		}
		openW[e.w] = true
		count[e.w.proc]++
		if len(count) <= k || over {
			continue
		}
		over = true
		var ws []*window
		for w := range openW {
			ws = append(ws, w)
		}
		sort.Slice(ws, func(i, j int) bool {
			if ws[i].start() != ws[j].start() {
				return ws[i].start() < ws[j].start()
			}
			return ws[i].proc < ws[j].proc
		})
		var parts []string
		for _, w := range ws {
			acq := "no acquisition read"
			if w.hasAcq {
				acq = "acquired at " + at(w.acquired)
			}
			parts = append(parts, fmt.Sprintf("%s %s, acted %d times from %s to %s", w, acq, w.acts, at(w.first), at(w.last)))
		}
		out = append(out, Violation{Kind: "holders", Role: role, Mono: e.t, Detail: fmt.Sprintf(
			"holders: %d members acted on the role at %s, more than %d replicas: %s",
			len(count), at(e.t), k, strings.Join(parts, "; "))})
	}
	return out
}

// SecondaryReport is what SecondaryLiveness finds: its Violations and
// Recovered as Liveness's, for the role's secondaries, and the holders of
// each role at the deadline (its primary's process first, if any, then
// its secondaries', sorted).
type SecondaryReport struct {
	LivenessReport
	Holders map[string][]string
}

// secHolding is one secondary holding as Liveness reads it.
type secHolding struct {
	member, proc    string
	n               int64
	acquired, ended int64 // ended 0: no release read
}

// SecondaryLiveness checks, from the members' own records, that every
// role has want secondaries at deadline, after every fault was healed at
// healed: want distinct processes, other than the one holding its primary
// (as Liveness reads it), each with a secondary holding acquired by then,
// not released by then, and alive then. Recovered tells, for each role
// that has them at the deadline, how long after the heal it first had
// them. Times in details are rendered in seconds since origin.
func SecondaryLiveness(origin int64, records []Record, roles []string, alive func(proc string, mono int64) bool, healed, deadline int64, want int) SecondaryReport {
	at := func(mono int64) string { return secs(origin, mono) }
	prim := map[string][]Record{}
	secHs := map[string][]*secHolding{}
	type skey struct {
		proc, role string
		n          int64
	}
	byKey := map[skey]*secHolding{}
	for _, r := range records {
		switch r.Kind {
		case Acquire, Release:
			prim[r.Role] = append(prim[r.Role], r)
		case AcquireSecondary:
			h := &secHolding{member: r.Member, proc: r.proc(), n: r.Token, acquired: r.Mono}
			byKey[skey{r.proc(), r.Role, r.Token}] = h
			secHs[r.Role] = append(secHs[r.Role], h)
		case ReleaseSecondary:
			if h := byKey[skey{r.proc(), r.Role, r.Token}]; h != nil && h.ended == 0 {
				h.ended = r.Mono
			}
		}
	}
	rep := SecondaryReport{LivenessReport: LivenessReport{Recovered: map[string]time.Duration{}}, Holders: map[string][]string{}}
	for _, role := range roles {
		ps := prim[role]
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].Mono < ps[j].Mono })
		// primary returns the process holding the role's primary at t, as
		// Liveness reads it ("" if none).
		primary := func(t int64) string {
			var h *holding
			for _, r := range ps {
				if r.Mono > t {
					break
				}
				switch {
				case r.Kind == Acquire && (h == nil || r.Token > h.token):
					h = &holding{proc: r.proc(), token: r.Token}
				case r.Kind == Release && h != nil && !h.ended && h.proc == r.proc() && h.token == r.Token:
					h.ended = true
				}
			}
			if h == nil || h.ended || !alive(h.proc, t) {
				return ""
			}
			return h.proc
		}
		// holders returns the processes other than the primary's holding
		// the role as a secondary at t.
		holders := func(t int64, p string) []string {
			var out []string
			for _, h := range secHs[role] {
				if h.acquired <= t && (h.ended == 0 || h.ended > t) && h.proc != p && alive(h.proc, t) {
					out = append(out, h.proc)
				}
			}
			slices.Sort(out)
			return slices.Compact(out)
		}
		// The instants to look at: the heal, then every record of the role
		// up to the deadline.
		times := []int64{healed}
		for _, r := range ps {
			if r.Mono > healed && r.Mono <= deadline {
				times = append(times, r.Mono)
			}
		}
		for _, h := range secHs[role] {
			for _, t := range []int64{h.acquired, h.ended} {
				if t > healed && t <= deadline {
					times = append(times, t)
				}
			}
		}
		slices.Sort(times)
		first := int64(-1)
		for _, t := range times {
			if len(holders(t, primary(t))) >= want {
				first = t
				break
			}
		}
		p := primary(deadline)
		hs := holders(deadline, p)
		rep.Holders[role] = hs
		if p != "" {
			rep.Holders[role] = append([]string{p}, hs...)
		}
		if len(hs) >= want {
			rep.Recovered[role] = time.Duration(first - healed)
			continue
		}
		// Not enough at the deadline: say who held it, and when (if
		// ever) it had them.
		v := Violation{Kind: "secondaries", Role: role, Mono: healed}
		var last []string
		for _, h := range secHs[role] {
			if h.acquired <= deadline {
				end := "not released"
				if h.ended != 0 {
					end = "released at " + at(h.ended)
				}
				last = append(last, fmt.Sprintf("%s #%d acquired at %s, %s", h.proc, h.n, at(h.acquired), end))
			}
		}
		if len(last) > 3 {
			last = last[len(last)-3:]
		}
		again := "not again by the end of the records"
		var later []int64
		for _, h := range secHs[role] {
			if h.acquired > deadline {
				later = append(later, h.acquired)
			}
		}
		slices.Sort(later)
		for _, t := range later {
			if len(holders(t, primary(t))) >= want {
				again = fmt.Sprintf("had them at %s (%v after the heal)", at(t), time.Duration(t-healed).Round(time.Millisecond))
				break
			}
		}
		if p == "" {
			p = "none"
		}
		v.Detail = fmt.Sprintf("secondaries: %d of %d at %s, %v after the heal at %s (primary %s; secondaries %q); the last secondary holdings: %s; %s",
			len(hs), want, at(deadline), time.Duration(deadline-healed).Round(time.Millisecond), at(healed), p, hs, strings.Join(last, "; "), again)
		rep.Violations = append(rep.Violations, v)
	}
	return rep
}
