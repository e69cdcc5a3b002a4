package chaos

import (
	"fmt"
	"sort"
	"time"
)

// LivenessReport is what Liveness finds.
type LivenessReport struct {
	// Violations lists the roles not held at the deadline.
	Violations []Violation
	// Recovered is, for each role held at the deadline, how long after the
	// heal it was first held (0 when it was held throughout).
	Recovered map[string]time.Duration
}

// Worst returns the longest recovery, and its role.
func (l LivenessReport) Worst() (string, time.Duration) {
	var role string
	var worst time.Duration = -1
	for r, d := range l.Recovered {
		if d > worst || d == worst && r < role {
			role, worst = r, d
		}
	}
	return role, worst
}

// Liveness checks, from the members' own records, that every role is held
// at deadline, after every fault was healed at healed. A role is held at a
// time t when its newest holding by token acquired by then has not logged
// its release by t, and the process that holds it is alive at t (alive
// reports whether the process named by a record's Proc, or its Member when
// Proc is empty, was running at t). It does not trust the rank map or the
// acknowledgements: a role that a member is still waiting for is not held.
//
// For a role not held at the deadline, the violation tells its last holding
// before the deadline, and when, if ever, the records show it held again.
// Times in details are rendered in seconds since origin.
func Liveness(origin int64, records []Record, roles []string, alive func(proc string, mono int64) bool, healed, deadline int64) LivenessReport {
	at := func(mono int64) string { return secs(origin, mono) }
	byRole := map[string][]Record{}
	for _, r := range records {
		if r.Kind == Acquire || r.Kind == Release {
			byRole[r.Role] = append(byRole[r.Role], r)
		}
	}
	rep := LivenessReport{Recovered: map[string]time.Duration{}}
	for _, role := range roles {
		recs := byRole[role]
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Mono < recs[j].Mono })
		var h *holding // the newest holding so far, by token
		i := 0
		advance := func(t int64) { // apply the records up to t
			for ; i < len(recs) && recs[i].Mono <= t; i++ {
				r := recs[i]
				switch {
				case r.Kind == Acquire && (h == nil || r.Token > h.token || reacquired(h, r)):
					h = &holding{member: r.Member, proc: r.proc(), token: r.Token, acquired: r.Mono, last: r.Mono}
				case r.Kind == Release && h != nil && !h.ended && h.proc == r.proc() && h.token == r.Token:
					h.ended, h.last = true, r.Mono
				}
			}
		}
		held := func(t int64) bool { return h != nil && !h.ended && alive(h.proc, t) }
		// First held at or after the heal, up to the deadline.
		advance(healed)
		first := int64(-1)
		if held(healed) {
			first = healed
		}
		for first < 0 && i < len(recs) && recs[i].Mono <= deadline {
			t := recs[i].Mono
			advance(t)
			if held(t) {
				first = t
			}
		}
		advance(deadline)
		if held(deadline) {
			rep.Recovered[role] = time.Duration(first - healed)
			continue
		}
		// Not held at the deadline: say why, and when it was held again.
		v := Violation{Kind: "liveness", Role: role, Mono: healed}
		last := "no holding was ever recorded"
		if h != nil {
			end := "its process " + h.proc + " was gone"
			if h.ended {
				end = "released at " + at(h.last)
				v.Mono = h.last
			}
			last = fmt.Sprintf("last holding: %s (%s) with token %d, acquired at %s, %s", h.member, h.proc, h.token, at(h.acquired), end)
		}
		again := fmt.Sprintf("not held again by the end of the records (%d records after the deadline)", len(recs)-i)
		for i < len(recs) {
			t := recs[i].Mono
			advance(t)
			if held(t) {
				again = fmt.Sprintf("held again at %s (%v after the heal) by %s with token %d", at(t), time.Duration(t-healed).Round(time.Millisecond), h.proc, h.token)
				break
			}
		}
		if first >= 0 {
			again = fmt.Sprintf("held at %s after the heal, lost again; ", at(first)) + again
		}
		v.Detail = fmt.Sprintf("liveness: not held at %s, %v after the heal at %s; %s; %s",
			at(deadline), time.Duration(deadline-healed).Round(time.Millisecond), at(healed), last, again)
		rep.Violations = append(rep.Violations, v)
	}
	return rep
}

// reacquired reports whether r acquires again, in the same process, the
// holding h that had ended: a sidecar's app whose grant lapsed (it did not
// hear rinkd for a while) stops, awaits the role anew and is granted the
// same holding, with the same token, again.
func reacquired(h *holding, r Record) bool {
	return h.ended && r.Token == h.token && h.proc == r.proc()
}
