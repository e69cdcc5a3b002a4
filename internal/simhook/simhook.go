// Package simhook lets rink's simulator (tools/internal/sim) drive a
// member's core in virtual time, in one goroutine, against its model of
// etcd. It is internal: nothing outside rink's own tree can import it, and
// nothing in it is part of rink's API.
//
// Package rink sets NewMember when it is initialized; the simulator calls
// it. A member built so starts no goroutine, reads no clock and sends
// nothing by itself: it asks Etcd for every request, Env for the time and
// its wake-ups, and acts on what they hand back, all on the caller's
// goroutine.
package simhook

import (
	"context"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Etcd is a simulated etcd client: every request's answer comes back
// later, on the simulator's goroutine (or never, when the member crashed
// meanwhile: the member ignores it then).
type Etcd interface {
	Txn(r *etcdserverpb.TxnRequest, done func(*etcdserverpb.TxnResponse, error))
	LeaseGrant(r *etcdserverpb.LeaseGrantRequest, done func(*etcdserverpb.LeaseGrantResponse, error))
	LeaseRevoke(r *etcdserverpb.LeaseRevokeRequest, done func(*etcdserverpb.LeaseRevokeResponse, error))
	LeaseKeepAlive(r *etcdserverpb.LeaseKeepAliveRequest, done func(*etcdserverpb.LeaseKeepAliveResponse, error))
	LeaseTimeToLive(r *etcdserverpb.LeaseTimeToLiveRequest, done func(*etcdserverpb.LeaseTimeToLiveResponse, error))
	// Watch opens a watch whose responses reach deliver in order; a
	// response with Canceled set ends it. cancel ends it at once. A watch
	// with no start revision starts from the revision after etcd's when
	// it reaches etcd, and its first response says so (Created set, with
	// etcd's revision then), as etcd's created notification does.
	Watch(r *etcdserverpb.WatchCreateRequest, deliver func(*etcdserverpb.WatchResponse)) (cancel func())
}

// Env is the member's world: its time and its wake-ups.
type Env interface {
	// Now is the member's wall and monotonic time; Clock its fence clock
	// (nanoseconds, counting a suspend).
	Now() time.Time
	Clock() int64
	// After runs fn d from now, on the simulator's goroutine.
	After(d time.Duration, fn func())
	// Rand is the member's source of jitter.
	Rand() *rand.Rand
}

// Config is what a simulated member is made of. Options are rink.Option
// values (this package cannot name the type).
type Config struct {
	Rink, Member string
	Options      []any
	Etcd         Etcd
	Env          Env
	// Trace, if set, gets one line per decision worth reading in a
	// failing history.
	Trace func(format string, args ...any)
	// Plant names a bug to plant in the member's core, to show that the
	// simulator finds it (see Plants; "": none).
	Plant string
	// Warm, if set, is asked to warm up the slots an announcement of
	// version v brings to the member (rink.WithWarmup), as a role set's
	// Handler.Warm is, replacing any earlier request; it calls ready once
	// it has (slots may be empty: the announcement was withdrawn).
	Warm func(v int64, slots []int, ready func())
	// EarlyMoves, if set, hears of the announced moves (slot → heir) the
	// member, leading, makes before the warm-up time has passed: every
	// heir said it is ready.
	EarlyMoves func(moves map[int]string)
	// LoadRound, if set, hears of each load round the member, leading,
	// runs: its number in the member's leadership (from 1), and the slots
	// it moves.
	LoadRound func(round int, moved []int)
	// Roles, with Assigned set, are watched with a role set (rink.Watch)
	// whose Handler calls Assigned, Revoked and Secondary (either may be
	// nil), on the simulator's goroutine: Secondary must return at once,
	// and ctx says when its holding ends.
	Roles     []string
	Assigned  func(ctx context.Context, role string)
	Revoked   func(role string)
	Secondary func(ctx context.Context, role string)
	// Load runs the member's load reporter. Every member runs one in
	// production, and the simulator's members do too: without one, the
	// leader balances by slot count where production's balances by the
	// load reported (the roles awaited, when nobody records work), and
	// the simulator missed a crash's promotions going cold by load (see
	// TestMembersAgainstProduction, which found the difference).
	Load bool
	// Knobs lowers bounds that production sets high, so that what
	// happens past them happens in a short history (as FoundationDB's
	// BUGGIFY knobs do); a zero field keeps production's.
	Knobs Knobs
}

// Knobs are bounds on what a member remembers. Past each, the oldest half
// or the oldest entries go, and what needed them waits or falls back to a
// lower bound: safe, and slower. Production's are far beyond what a
// simulated history of a minute reaches.
type Knobs struct {
	// HistChanges bounds the slot changes a member's handover history
	// keeps (production: 2,048; see rink's maxHistChanges).
	HistChanges int
	// Marks bounds the map puts the leader's view of the
	// acknowledgements remembers (production: 1,024; see core.AckView).
	Marks int
	// Losses bounds the losses of slots the leader's change log
	// remembers (production: 4,096; at least 2; see core.ChangeLog).
	Losses int
}

// Plants lists the bugs a member can be built with (set by package rink).
var Plants []string

// Member is one simulated member.
type Member interface {
	// Start joins the rink (an error: the options are invalid).
	Start() error
	// Crash stops the member at once, as kill -9 does: it acts on
	// nothing from now on, sends nothing, and its lease is left to expire.
	Crash()
	// Leave shuts the member down as Shutdown does: its roles end, and
	// it hands its slots over (see rink's depart) and revokes its lease,
	// or, in a quiet time, ends and leaves its key to expire.
	//
	// It reports false when the member ended at once without handing
	// anything over (it was out of the rink, or in the quiet time after a
	// restore): its key is left to expire, and until then the rink takes
	// it for a member that crashed.
	Leave() bool
	// Holding returns the slots the member acts on now, with their
	// fencing tokens: the holdings whose contexts have not ended.
	Holding() map[int]int64
	// Holds reports whether the member acts on slot s now: it holds it,
	// the holding's context has not ended, and its lease's deadline has
	// not passed (a paused process that resumes past it acts on nothing).
	// It changes nothing in the member.
	Holds(s int) bool
	// HoldingSecondaries returns the slots the member acts on now as a
	// secondary (see rink.WithReplicas), as Holding does for primaries.
	HoldingSecondaries() map[int]bool
	// HoldsSecondary reports whether the member acts on slot s as a
	// secondary now, as Holds does for a primary.
	HoldsSecondary(s int) bool
	// Steps counts the inputs the member's core has handled.
	Steps() int
	// Ranked reports whether the member's last applied map ranks it.
	Ranked() bool
	// Joined reports whether the member has joined the rink once.
	Joined() bool
	// Rank returns the member's rank, as rink.Rink.Rank does: its index
	// (-1: not ranked) and the number of ranked members.
	Rank() (index, size int)
	// Owner returns the member that role belongs to in the member's last
	// applied map, as rink.Rink.Owner does.
	Owner(role string) (string, bool)
	// Owners returns the members that hold role in the member's last
	// applied map, its primary first, as rink.Rink.Owners does.
	Owners(role string) ([]string, bool)
	// View returns the rink's leader as the member's rank names it, the
	// version of the map it applied last, and whether the rink is at rest
	// as it last heard: Leader, Version and Settled of rink.Rink.Rank
	// ("", 0 and false before the member started).
	View() (leader string, version int64, settled bool)
	// Describe tells what the member's core knows, for a failing history.
	Describe() string
	// Enter starts a function on the holding of slot s's primary, as Run
	// does before it calls its function: with rink.WithDrainTimeout, a
	// slot given away waits for it to return. It reports false when the
	// member does not hold s, or its holding has ended.
	Enter(s int) (Work, bool)
	// AddLoad records units of work done for role, as rink.AddLoad does.
	AddLoad(role string, units float64)
	// Unfenced reports whether the member's holding of slot s's primary
	// is past its lease's deadline while its context is not cancelled: a
	// function that waits on the context's Done channel (rather than
	// asking its Err, which checks the deadline) still acts on it.
	Unfenced(s int) bool
	// Trusted returns the lease of the member's current incarnation (0:
	// none), whether the member still trusts it (its fence deadline has
	// not passed on the member's clock), and whether the incarnation is
	// the process's first (its join, not a rejoin after a fence).
	Trusted() (lease int64, ok, first bool)
}

// Work is a function running on a holding (see Member.Enter).
type Work interface {
	// Return ends the function, as its return does in Run.
	Return()
	// Acts reports whether the function can still act: its process runs,
	// and the incarnation whose holding it entered has neither ended nor
	// passed its lease's deadline. (It says nothing of the drain: that
	// is what the simulator checks.)
	Acts() bool
	// FenceHeld reports whether the function still runs on a holding that
	// a fence ended before its incarnation's lease deadline (on the
	// member's clock), while the member has revoked that lease itself.
	// With rink.WithDrainTimeout a member holds its fenced lease back
	// until such functions have returned or the deadline has passed (its
	// fence drains): revoked early, it lets heirs start beside them.
	FenceHeld() bool
}

// NewMember builds a simulated member (set by package rink).
var NewMember func(Config) (Member, error)

// ObserverConfig is what a simulated Observer is made of.
type ObserverConfig struct {
	Rink string
	Etcd Etcd
	Env  Env
	// Published gets each State the observer publishes (a rink.State:
	// this package cannot name the type), on the simulator's goroutine.
	Published func(state any)
}

// Observer is one simulated rink.Observer: the production observer's
// view of the rink (every decision it makes on what its watch hands it),
// fed by a watcher of the model that carries out the production
// watcher's decisions.
type Observer interface {
	// Start begins following the rink, as NewObserver does.
	Start()
	// Crash stops the observer at once: it acts on nothing from now on.
	Crash()
}

// NewObserver builds a simulated observer (set by package rink).
var NewObserver func(ObserverConfig) Observer
