package chaos

import (
	"fmt"
	"sort"
	"time"
)

// Violation is a breach of rink's promise found in the records.
type Violation struct {
	Role   string
	Detail string
}

func (v Violation) String() string { return v.Role + ": " + v.Detail }

// Report is what Check finds.
type Report struct {
	Acquisitions int
	Actions      int
	Violations   []Violation
	// Unheld lists, per role, the gaps between one holding's last sign of
	// life (its release, or its last action if it never logged a release)
	// and the next acquisition.
	Unheld map[string][]time.Duration
}

// Check reads the merged records of all members and reports:
//
//   - overlap: a member acted on a role (acquired it, or acted while
//     holding it) after another member had acquired the role with a higher
//     token, and before that member's holding ended — two members acting
//     on one role at once. A release logged late (a process that was
//     stopped logs it when it resumes) is not an action and is not counted.
//   - tokens: successive acquisitions of a role, in time order, whose
//     tokens do not strictly increase.
//   - stale action: a member acting on a role with a token lower than the
//     newest token already acquired for that role by anyone.
func Check(records []Record) Report {
	sort.SliceStable(records, func(i, j int) bool { return records[i].Mono < records[j].Mono })
	rep := Report{Unheld: map[string][]time.Duration{}}
	type holding struct {
		member string
		token  int64
		last   int64 // last action
		ended  bool
	}
	cur := map[string]*holding{} // role -> newest holding
	newest := map[string]int64{} // role -> newest token acquired
	for _, r := range records {
		switch r.Kind {
		case Acquire:
			rep.Acquisitions++
			if r.Token <= newest[r.Role] {
				rep.Violations = append(rep.Violations, Violation{r.Role, fmt.Sprintf(
					"tokens: %s acquired with token %d after token %d", r.Member, r.Token, newest[r.Role])})
			}
			if h := cur[r.Role]; h != nil {
				// If the previous holder logged no release (killed, or
				// stopped), its holding counts until its last action; it is
				// an overlap only if it acts again from now on (see Act).
				rep.Unheld[r.Role] = append(rep.Unheld[r.Role], time.Duration(r.Mono-h.last))
			}
			newest[r.Role] = max(newest[r.Role], r.Token)
			cur[r.Role] = &holding{member: r.Member, token: r.Token, last: r.Mono}
		case Act:
			rep.Actions++
			if r.Token < newest[r.Role] {
				rep.Violations = append(rep.Violations, Violation{r.Role, fmt.Sprintf(
					"overlap: %s acted with token %d after token %d was acquired", r.Member, r.Token, newest[r.Role])})
				continue
			}
			if h := cur[r.Role]; h != nil && h.member == r.Member && h.token == r.Token {
				h.last = r.Mono
			}
		case Release:
			if h := cur[r.Role]; h != nil && h.member == r.Member && h.token == r.Token && !h.ended {
				h.ended, h.last = true, r.Mono
			}
		}
	}
	return rep
}
