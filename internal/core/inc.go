package core

import "github.com/rink-go/rink/internal/wire"

// Inc is one incarnation of a member, as the core knows it: the lease it
// joined under and its member key's identity. A member has a new one each
// time it joins (a resume keeps the key, and takes a new lease).
//
// Invariant: set before the incarnation is handed to the member's core,
// and never changed after.
type Inc struct {
	Lease     int64
	CreateRev int64 // the member key's create revision: the member's identity and join order (kept by a resume)
	BoundRev  int64 // revision at which the member key was bound to Lease: its creation, or a resume's rebinding
	// JoinLoad is the load summary written with the member key when it
	// was created (nil: none, as after a resume): the reporter's first.
	JoinLoad *wire.LoadReport
	// Hint is the newest candidacy before ours, as the join that created
	// the member key read it (zero: none, as after a resume; see
	// CandidacyHint).
	Hint CandidacyHint
	// Done is closed when the incarnation ends (its context's Done; nil:
	// it never ends, as in tests).
	Done <-chan struct{}
	// Owner is what the driver keeps beside the incarnation (its context
	// and fence state); the core never reads it.
	Owner any
}

// Ended reports whether the incarnation has ended: its lease is not
// trusted any more, or the member stops.
func (i *Inc) Ended() bool {
	select {
	case <-i.Done:
		return true
	default:
		return false
	}
}

// CandidacyHint names the newest election key the join saw before its own
// candidacy (see the campaign): a candidate looks there first.
type CandidacyHint struct {
	Key string
	Rev int64
}
