package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// EventKind is what an app did.
type EventKind int

const (
	// Acquire: the app learned of a grant and may act on the role.
	Acquire EventKind = iota + 1
	// Release: the app stopped acting on the holding.
	Release
)

func (k EventKind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one step of an app's history.
type Event struct {
	Kind   EventKind
	Role   string
	Member string
	Token  int64
	At     time.Time
	Why    string
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s %s token=%d", e.At.Format("15:04:05.000000"), e.Kind, e.Role, e.Token)
	s += " by " + e.Member
	if e.Why != "" {
		s += " (" + e.Why + ")"
	}
	return s
}

// History records the acquisitions and releases of every app of a test,
// each stamped when recorded (under one lock, so the order of the events
// is the order of their times).
type History struct {
	mu     sync.Mutex
	events []Event
}

// Acquire records that member's app learned of a grant of role with token.
func (h *History) Acquire(role, member string, token int64) {
	h.add(Event{Kind: Acquire, Role: role, Member: member, Token: token})
}

// Release records that member's app stopped acting on its holding of role
// with token; why says what made it stop.
func (h *History) Release(role, member string, token int64, why string) {
	h.add(Event{Kind: Release, Role: role, Member: member, Token: token, Why: why})
}

func (h *History) add(e Event) {
	h.mu.Lock()
	e.At = time.Now()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns a copy of the events so far, oldest first.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// Holders returns the members whose apps act on role now.
func (h *History) Holders(role string) []string {
	var out []string
	for _, hd := range h.open(role) {
		out = append(out, hd.Member)
	}
	return out
}

// Holder returns the event of the holding of role open now, if exactly
// one is.
func (h *History) Holder(role string) (Event, bool) {
	o := h.open(role)
	if len(o) != 1 {
		return Event{}, false
	}
	return o[0], true
}

func (h *History) open(role string) []Event {
	var open []Event
	for _, e := range h.Events() {
		if e.Role != role {
			continue
		}
		switch e.Kind {
		case Acquire:
			open = append(open, e)
		case Release:
			open = slices.DeleteFunc(open, func(o Event) bool { return o.Member == e.Member && o.Token == e.Token })
		}
	}
	return open
}

// Check returns an error naming every violation in the history: an
// acquisition while another app holds the role, a token not above every
// earlier one of the role, a release of nothing held.
func (h *History) Check() error {
	return CheckEvents(h.Events())
}

// CheckEvents checks a history given as events in the order of their times.
func CheckEvents(events []Event) error {
	type state struct {
		open []Event
		last int64
		by   string // the member that acquired with last
		seen bool
	}
	roles := map[string]*state{}
	var errs []error
	for i, e := range events {
		if i > 0 && e.At.Before(events[i-1].At) {
			errs = append(errs, fmt.Errorf("event %d out of order: %v after %v", i, e, events[i-1]))
		}
		st := roles[e.Role]
		if st == nil {
			st = &state{}
			roles[e.Role] = st
		}
		switch e.Kind {
		case Acquire:
			for _, o := range st.open {
				errs = append(errs, fmt.Errorf("two holders of %q: %v while %v", e.Role, e, o))
			}
			// The same token again is a resumption of the same holding by
			// the same member (its app paused when the grant's validity
			// lapsed, and a renewal revived it), with nobody between: any
			// other holder's token would be greater.
			resumed := e.Token == st.last && e.Member == st.by
			if st.seen && e.Token <= st.last && !resumed {
				errs = append(errs, fmt.Errorf("token of %q did not increase: %v after token %d", e.Role, e, st.last))
			}
			if !st.seen || e.Token > st.last {
				st.last, st.by = e.Token, e.Member
			}
			st.seen = true
			st.open = append(st.open, e)
		case Release:
			n := len(st.open)
			st.open = slices.DeleteFunc(st.open, func(o Event) bool { return o.Member == e.Member && o.Token == e.Token })
			if len(st.open) == n {
				errs = append(errs, fmt.Errorf("release of a holding not held: %v", e))
			}
		default:
			errs = append(errs, fmt.Errorf("unknown event %v", e))
		}
	}
	return errors.Join(errs...)
}

// Unheld returns how long, between from and to, role had no holder.
func (h *History) Unheld(role string, from, to time.Time) time.Duration {
	var unheld time.Duration
	holders := 0
	t := from
	for _, e := range h.Events() {
		if e.Role != role {
			continue
		}
		at := e.At
		if at.After(to) {
			break
		}
		if at.After(t) {
			if holders == 0 {
				unheld += at.Sub(t)
			}
			t = at
		}
		switch e.Kind {
		case Acquire:
			holders++
		case Release:
			holders--
		}
	}
	if holders == 0 && to.After(t) {
		unheld += to.Sub(t)
	}
	return unheld
}

// FirstAcquire returns the first acquisition of role after t by a member
// other than not.
func (h *History) FirstAcquire(role, not string, t time.Time) (Event, bool) {
	for _, e := range h.Events() {
		if e.Kind == Acquire && e.Role == role && e.Member != not && !e.At.Before(t) {
			return e, true
		}
	}
	return Event{}, false
}
