package chaos

import (
	"fmt"
	"sort"
	"time"
)

// Violation is a breach of rink's promise found in the records.
type Violation struct {
	// Kind is "overlap" (two members acting on one role at once),
	// "tokens" (two members acquiring one token), "token-back" (a member
	// acting on a role with a token below that of a holding that had
	// already ended), or "liveness" (a role not held again in time after a
	// storm; see Liveness).
	Kind   string
	Role   string
	Detail string
	// Mono is when the violation shows (CLOCK_MONOTONIC): the offending
	// record, or for liveness the end of the role's last holding.
	Mono int64
}

func (v Violation) String() string { return v.Role + ": " + v.Detail }

// Report is what Check finds.
type Report struct {
	Acquisitions int
	Actions      int
	// Late counts acquisition records that reached the log after a newer
	// holding's: harmless unless the member then acted on them.
	Late       int
	Violations []Violation
	// Unheld lists, per role, the gaps between one holding's last sign of
	// life (its release, or its last action if it never logged a release)
	// and the next acquisition.
	Unheld map[string][]time.Duration
	// UnheldAt lists the same gaps with the time each ended.
	UnheldAt map[string][]Gap
}

// Gap is a time a role had no holder, ending at End (CLOCK_MONOTONIC).
type Gap struct {
	End int64
	Gap time.Duration
}

// Check reads the merged records of all members and reports:
//
//   - overlap: a member acted on a role (acquired it, or acted while
//     holding it) after another member had acquired the role with a higher
//     token, and before that member's holding ended — two members acting
//     on one role at once. A release logged late (a process that was
//     stopped logs it when it resumes) is not an action and is not counted.
//   - tokens: two members acquiring a role with the same token.
//   - token-back: a member acted on a role with a token below the newest
//     one acquired for it, after that newest holding had ended (logged its
//     release): the holdings' tokens went back. (Before the newest holding
//     ends the same action is an overlap.)
//
// Records are written after the fact (an acquisition record can queue
// behind other fsyncs), so holdings are ordered by token, which etcd
// assigns in real order, not by record time: an acquisition recorded after
// a newer one is late, not a violation, unless its member then acts.
//
// A member is a process (Record.Proc), not a name: two processes under one
// name, such as a replacement restarted under its predecessor's name while
// the predecessor still runs cut off from etcd, are two members here.
func Check(records []Record) Report { return CheckSince(0, records) }

// CheckSince is Check, with the times in its reports' details rendered in
// seconds since origin (CLOCK_MONOTONIC), e.g. the start of a run.
func CheckSince(origin int64, records []Record) Report {
	at := func(mono int64) string { return secs(origin, mono) }
	sort.SliceStable(records, func(i, j int) bool { return records[i].Mono < records[j].Mono })
	rep := Report{Unheld: map[string][]time.Duration{}, UnheldAt: map[string][]Gap{}}
	cur := map[string]*holding{} // role -> newest holding
	newest := map[string]int64{} // role -> newest token acquired
	// owner is, per role, the process that acquired its newest token:
	// processes, not member names, since a name is used again (a
	// replacement under the same name runs beside its predecessor).
	owner := map[string]string{}
	for _, r := range records {
		switch r.Kind {
		case Acquire:
			rep.Acquisitions++
			switch {
			case r.Token == newest[r.Role] && owner[r.Role] != r.proc():
				h := cur[r.Role]
				if h == nil {
					h = &holding{member: "?", proc: "?"}
				}
				rep.Violations = append(rep.Violations, Violation{"tokens", r.Role, fmt.Sprintf(
					"tokens: %s and %s both acquired with token %d (%s at %s, %s at %s)", h.member, r.Member, r.Token,
					h.proc, at(h.acquired), r.proc(), at(r.Mono)), r.Mono})
				continue
			case r.Token == newest[r.Role] && cur[r.Role] != nil && reacquired(cur[r.Role], r):
				// The same holding again, after its release (see
				// reacquired): held from here on.
				h := cur[r.Role]
				rep.Unheld[r.Role] = append(rep.Unheld[r.Role], time.Duration(r.Mono-h.last))
				rep.UnheldAt[r.Role] = append(rep.UnheldAt[r.Role], Gap{End: r.Mono, Gap: time.Duration(r.Mono - h.last)})
				h.ended, h.acquired, h.last = false, r.Mono, r.Mono
				continue
			case r.Token <= newest[r.Role]:
				// Written late: the holding was already superseded when its
				// record reached the log (records queue behind each other's
				// fsync). Acting on it would be a violation; see Act.
				rep.Late++
				continue
			}
			if h := cur[r.Role]; h != nil {
				// If the previous holder logged no release (killed, or
				// stopped), its holding counts until its last action; it is
				// an overlap only if it acts again from now on (see Act).
				rep.Unheld[r.Role] = append(rep.Unheld[r.Role], time.Duration(r.Mono-h.last))
				rep.UnheldAt[r.Role] = append(rep.UnheldAt[r.Role], Gap{End: r.Mono, Gap: time.Duration(r.Mono - h.last)})
			}
			newest[r.Role], owner[r.Role] = r.Token, r.proc()
			cur[r.Role] = &holding{member: r.Member, proc: r.proc(), token: r.Token, acquired: r.Mono, last: r.Mono}
		case Act:
			rep.Actions++
			if r.Token < newest[r.Role] || r.Token == newest[r.Role] && owner[r.Role] != r.proc() {
				h := cur[r.Role]
				if h == nil {
					h = &holding{member: "?", proc: "?"}
				}
				kind, what := "overlap", "overlap"
				if h.ended {
					kind, what = "token-back", "token went back"
				}
				rep.Violations = append(rep.Violations, Violation{kind, r.Role, fmt.Sprintf(
					"%s: %s acted with token %d after %s acquired token %d (act by %s at %s; newer holding by %s acquired at %s, %s)",
					what, r.Member, r.Token, h.member, newest[r.Role], r.proc(), at(r.Mono),
					h.proc, at(h.acquired), h.state(at)), r.Mono})
				continue
			}
			if h := cur[r.Role]; h != nil && h.proc == r.proc() && h.token == r.Token {
				h.last = r.Mono
			}
		case Release:
			if h := cur[r.Role]; h != nil && h.proc == r.proc() && h.token == r.Token && !h.ended {
				h.ended, h.last = true, r.Mono
			}
		}
	}
	return rep
}

// holding is one member's holding of a role, as its records show it.
type holding struct {
	member, proc string
	token        int64
	acquired     int64 // its acquisition record
	last         int64 // its last action (or release)
	ended        bool  // it logged its release (at last)
}

func (h *holding) state(at func(int64) string) string {
	if h.ended {
		return "released at " + at(h.last)
	}
	return "not released; last action at " + at(h.last)
}

// secs renders a CLOCK_MONOTONIC time in seconds since origin.
func secs(origin, mono int64) string { return fmt.Sprintf("%.3fs", float64(mono-origin)/1e9) }
