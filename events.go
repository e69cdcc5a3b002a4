package rink

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event.
const (
	// EventAcquired: this member started holding a slot (and so every role
	// that hashes to it). Slot, Token, From, Wait and Roles are set.
	// There is one per slot, whether any role is awaited in it or not: a
	// member of a rink of 1,024 slots that is alone acquires 1,024, and
	// Roles tells the few that hold the roles it awaits.
	EventAcquired EventKind = iota
	// EventReleased: this member stopped holding a slot. Slot, Cause and
	// Roles are set. One per slot, as EventAcquired.
	EventReleased
	// EventFenced: every holding of this member ended at once (its session
	// was lost, or it left the rink). Cause is set.
	EventFenced
	// EventRejoined: this member joined again with a new session.
	EventRejoined
	// EventMapApplied: this member applied a new map. Version and Wait (the
	// time it took to apply) are set.
	EventMapApplied
	// EventRankChanged: this member's rank changed. Rank is set.
	EventRankChanged
	// EventLoadReported: this member wrote its load summary (see AddLoad).
	// Load and Roles are set.
	EventLoadReported
	// EventLoadBalanced: this member, the rink's leader, ran a round of
	// balancing by load (see WithImbalanceTolerance). Imbalance is the
	// imbalance it estimates after the round, and Moved the slots the
	// round moves (0 when the rink was within the tolerance, or no move
	// helped); the map that moves them is proclaimed next.
	EventLoadBalanced
	// EventDrained: this member gave a slot away once every function that
	// Run or Watch ran on it had returned (see WithDrainTimeout). Slot and
	// Wait (how long the drain took) are set.
	EventDrained
	// EventDrainTimedOut: this member gave a slot away when the drain
	// timeout passed, with functions still running on it. Slot and Wait
	// are set.
	EventDrainTimedOut
	// EventIncoming: the rink's leader announced that a slot will move to
	// this member (see WithWarmup). Slot and From (its current owner) are
	// set.
	EventIncoming
	// EventSettled: the rink came to rest, as this member sees it (see
	// Rank.Settled). Version (the map's) and Rank are set.
	EventSettled
	// EventSecondaryAcquired: this member started holding a slot as a
	// secondary (see WithReplicas). Slot and Wait are set.
	EventSecondaryAcquired
	// EventSecondaryReleased: this member stopped holding a slot as a
	// secondary: it left the slot's replicas (cause ErrRoleMoved), holds
	// its primary now (ErrPromoted), was fenced or shut down. Slot and
	// Cause are set.
	EventSecondaryReleased
)

// eventKindNames are the names String gives the kinds of Event.
var eventKindNames = [...]string{
	EventAcquired:          "acquired",
	EventReleased:          "released",
	EventFenced:            "fenced",
	EventRejoined:          "rejoined",
	EventMapApplied:        "map-applied",
	EventRankChanged:       "rank-changed",
	EventLoadReported:      "load-reported",
	EventLoadBalanced:      "load-balanced",
	EventDrained:           "drained",
	EventDrainTimedOut:     "drain-timed-out",
	EventIncoming:          "incoming",
	EventSettled:           "settled",
	EventSecondaryAcquired: "secondary-acquired",
	EventSecondaryReleased: "secondary-released",
}

// String returns the kind's name in lowercase words, for logs and labels:
// "acquired", "released", "fenced", "rejoined", "map-applied",
// "rank-changed", "load-reported", "load-balanced", "drained",
// "drain-timed-out", "incoming", "settled", "secondary-acquired" or
// "secondary-released". A value that is not one of the kinds prints as
// "EventKind(N)".
func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event reports a change in this member's state, for metrics and other
// telemetry (see WithEvents). String prints it as one line for a log.
//
// Events are about slots, not roles: a member holds a role exactly while
// it holds the slot the role hashes to, and it acquires and releases
// every slot the map gives it, one event each, whether any role is
// awaited in it or not. To act on roles, use AwaitRole, Run or Watch
// (Handler.Assigned and Revoked name the role); to know who holds one,
// Owner. Read events for telemetry: counts, waits, causes. A log of
// acquisitions that matter to the service keeps those whose Roles is not
// 0.
type Event struct {
	// Kind says what happened, and so which of the fields below are set.
	Kind EventKind
	// Time is when it happened, on this member's clock.
	Time time.Time
	// Rink is the rink's name.
	Rink string
	// Member is this member's name.
	Member string
	// Slot is the slot acquired or released, -1 for other kinds.
	Slot int
	// Token is the fencing token of an acquisition.
	Token int64
	// From is the member that owned an acquired slot before this member
	// (empty when it had no owner, as in a new rink).
	From string
	// Wait is, for an acquisition, how long this member waited between the
	// map that gave it the slot and holding it (for the previous holder to
	// let go); for a map, how long applying it took; for a drain, how long
	// it waited.
	Wait time.Duration
	// Version is the version of an applied map.
	Version int64
	// Cause is why holdings ended.
	Cause error
	// Rank is the new rank.
	Rank Rank
	// Load is, for a load summary, this member's total load rate: units
	// per second (see AddLoad) over the slots it holds.
	Load float64
	// Roles is, for a load summary, how many distinct roles this member
	// awaits in the slots it holds. For an event of a slot (Slot ≥ 0) it
	// is how many distinct roles that hash to the slot this member had
	// awaited (AwaitRole, AwaitRoleContext, Run, Watch, RoleSet.Add) when
	// the event happened; a role awaited later is not counted in the
	// slot's earlier events, and a role once awaited stays counted.
	Roles int
	// Imbalance is, for a round of balancing by load, the most loaded
	// member's load per capacity over the mean, as the leader estimates it
	// after the round (1 is perfect balance).
	Imbalance float64
	// Moved is, for a round of balancing by load, how many slots it moves.
	Moved int
}

func (r *Rink) emit(e Event) {
	if r.opts.events != nil {
		e.Rink, e.Member = r.name, r.opts.member
		if e.Slot >= 0 {
			e.Roles = r.load.rolesIn(e.Slot)
		}
		if e.Time.IsZero() {
			e.Time = r.now()
		}
		r.opts.events(e)
	}
}

// String returns the event in one line of words, for logs: the rink and
// member, what happened and the fields its kind sets, such as
// "orders/api-0: acquired slot 602 from api-1 (token 1234, waited 20ms,
// 1 awaited role)". Time is left out: a log line has its own.
func (e Event) String() string {
	var b strings.Builder
	if e.Rink != "" || e.Member != "" {
		b.WriteString(e.Rink + "/" + e.Member + ": ")
	}
	awaited := "no awaited role"
	if e.Roles == 1 {
		awaited = "1 awaited role"
	} else if e.Roles > 1 {
		awaited = fmt.Sprintf("%d awaited roles", e.Roles)
	}
	switch e.Kind {
	case EventAcquired:
		fmt.Fprintf(&b, "acquired slot %d", e.Slot)
		if e.From != "" {
			b.WriteString(" from " + e.From)
		}
		fmt.Fprintf(&b, " (token %d, waited %v, %s)", e.Token, e.Wait, awaited)
	case EventReleased:
		fmt.Fprintf(&b, "released slot %d (%s): %v", e.Slot, awaited, e.Cause)
	case EventFenced:
		fmt.Fprintf(&b, "fenced: %v", e.Cause)
	case EventRejoined:
		b.WriteString("rejoined")
	case EventMapApplied:
		fmt.Fprintf(&b, "applied map v%d in %v", e.Version, e.Wait)
	case EventRankChanged:
		rk := e.Rank
		switch {
		case rk.Index >= 0:
			fmt.Fprintf(&b, "rank changed: index %d of %d", rk.Index, rk.Size)
		case rk.Waiting:
			fmt.Fprintf(&b, "rank changed: waiting, %d ranked", rk.Size)
		default:
			fmt.Fprintf(&b, "rank changed: not ranked, %d ranked", rk.Size)
		}
		fmt.Fprintf(&b, ", map v%d", rk.Version)
		if rk.Leader != "" {
			b.WriteString(", leader " + rk.Leader)
		} else {
			b.WriteString(", no leader known")
		}
		if rk.Settled {
			b.WriteString(", settled")
		}
	case EventLoadReported:
		fmt.Fprintf(&b, "reported load %v/s over %s", e.Load, strings.TrimPrefix(awaited, "no "))
	case EventLoadBalanced:
		fmt.Fprintf(&b, "balanced by load: imbalance %v, %d slots moved", e.Imbalance, e.Moved)
	case EventDrained:
		fmt.Fprintf(&b, "drained slot %d in %v", e.Slot, e.Wait)
	case EventDrainTimedOut:
		fmt.Fprintf(&b, "drain of slot %d timed out after %v", e.Slot, e.Wait)
	case EventIncoming:
		fmt.Fprintf(&b, "slot %d announced to move here from %s", e.Slot, e.From)
	case EventSettled:
		fmt.Fprintf(&b, "the rink is at rest at map v%d", e.Version)
	case EventSecondaryAcquired:
		fmt.Fprintf(&b, "acquired slot %d as a secondary (waited %v, %s)", e.Slot, e.Wait, awaited)
	case EventSecondaryReleased:
		fmt.Fprintf(&b, "released slot %d as a secondary: %v", e.Slot, e.Cause)
	default:
		b.WriteString(e.Kind.String())
	}
	return b.String()
}
