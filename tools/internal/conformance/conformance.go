// Package conformance is one black-box suite of rink's behaviours, written
// once against a small driver interface (Driver, Member) and run against
// every way an app can use rink: the Go library in-process, and rinkd, the
// sidecar, through its HTTP/JSON API (issue 45).
//
// Holdings are judged at the app's side: a History records when the app
// learns of each grant (acquire) and when it stops acting on it (release),
// with the grant's fencing token, and Check fails on two holders of a role
// at one instant or on a token that does not strictly increase.
//
// The package holds the history checker and App, a small HTTP client of
// rinkd written by hand (as an app in any language would be); the drivers
// and behaviours are its tests:
//
//   - library: each member a rink.Rink in the test process, its app a Watch
//     handler that acts on a role while the role's context lasts;
//   - rinkd-http: each member a rinkd.Server in the test process, its app
//     an App that speaks HTTP/JSON to it.
//
// Every member reaches the embedded etcd through a proxy of its own: a
// crash blackholes it and abandons the member, an isolation that heals
// pauses it. Each behaviour (TestSingletonHandover, TestCrashFailover,
// TestSilentPartition, TestRollingReplacement, TestScaleOut,
// TestOwnerAgreement, TestBadInput, TestShutdownSemantics,
// TestReplicasPromotion, TestAppCrashSidecarAlive,
// TestAppRestartSidecarAlive, TestPartitionHeals, TestShortPartition,
// TestChurn) runs once per driver, in a rink of its own, and ends with
// History.Check. A behaviour a client has no analogue for is skipped with
// the reason (ErrUnsupported).
//
//	nice -n 10 go test -race ./internal/conformance/          # in tools
//	CONFORMANCE_LOG=warn ...        # the members' logs
//	CONFORMANCE_GOROUTINES=/tmp/g   # a goroutine dump when a wait times out
//	-churn.seed N                   # replay TestChurn's schedule
package conformance

import (
	"context"
	"errors"
	"time"
)

// Errors a Member's calls return, wrapping the driver's own: each driver
// maps only what its API says — the library's exported errors (errors.Is),
// rinkd's HTTP status codes — to one of these, so that a behaviour can
// expect the same outcome of every client.
var (
	// ErrInvalid: bad input. The library's ErrInvalidRole,
	// ErrInvalidOption or ErrInvalidName; rinkd's HTTP 400.
	ErrInvalid = errors.New("conformance: invalid input")
	// ErrGone: the member's session is over (or was never open). The
	// library's ErrShutdown; rinkd's HTTP 404.
	ErrGone = errors.New("conformance: no such session")
	// ErrConflict: the member (or its session) exists already. The
	// library's ErrMemberExists; rinkd's HTTP 409.
	ErrConflict = errors.New("conformance: already exists")
	// ErrUnsupported: the client has no such call; the error says why.
	ErrUnsupported = errors.New("conformance: not applicable to this client")
)

// Config describes a member to join.
type Config struct {
	// Rink and Member are the rink's and the member's names.
	Rink, Member string
	// Roles are awaited from the start.
	Roles []string
	// TTL is the session TTL (0: rink.MinSessionTTL).
	TTL time.Duration
	// Replicas per slot (0: 1).
	Replicas int
	// RebalanceDelay is how long a newcomer waits for a departure.
	RebalanceDelay time.Duration
	// History receives the app's acquisitions and releases. Required.
	History *History
}

// Rank is a member's rank as its client reports it.
type Rank struct {
	Index, Size int
	Waiting     bool
	Settled     bool
	Leader      string
}

// Driver joins members through one client of rink.
type Driver interface {
	// Name names the client ("library", "rinkd-http").
	Name() string
	// Join starts a member and its app, which awaits cfg.Roles. The
	// member is cleaned up when tb ends, whatever happened to it.
	Join(ctx context.Context, tb TB, cfg Config) (Member, error)
}

// TB is the part of testing.TB the drivers need.
type TB interface {
	Helper()
	Cleanup(func())
	Logf(format string, args ...any)
}

// Member is one member and the app that uses it.
type Member interface {
	// Name is the member's name in the rink.
	Name() string
	// Await has the app await more roles. It returns once they are
	// awaited, or the error that refused them.
	Await(roles ...string) error
	// Holding lists the roles the app acts on right now.
	Holding() []string
	// Secondaries lists the roles the member keeps a warm copy of, as its
	// client tells the app (with replicas).
	Secondaries() []string
	// Owners looks a role's owners up through this member's client:
	// primary first. ok is false when the client knows no owner (or
	// answers no lookups any more).
	Owners(role string) (owners []string, ok bool, err error)
	// Rank is the member's rank as its client reports it.
	Rank() (Rank, error)
	// Ready is the client's readiness of the member.
	Ready() (bool, error)
	// Ended reports that the member's session is over, as the app saw it.
	Ended() bool
	// Leave leaves gracefully: the way a pod is stopped.
	Leave(ctx context.Context) error
	// Crash cuts the member off etcd and abandons it (its app too, where
	// the app cannot outlive the member): a killed process, or one
	// partitioned away.
	Crash()
	// Partition cuts the member off etcd and leaves it running, and the
	// app hears nothing more from it (for rinkd: the sidecar goes silent,
	// its connections neither answer nor close): the app must stop on
	// its own, by the time its holdings are valid for.
	Partition()
	// Isolate cuts the member off etcd, its app still talking to its
	// client; Heal ends that.
	Isolate()
	Heal()
	// CrashApp kills the app alone, the member (sidecar) staying alive.
	CrashApp() error
	// RestartApp starts the app anew after CrashApp, beside the same
	// member (sidecar), awaiting the roles it awaited from the start.
	RestartApp(ctx context.Context) error
	// JoinAgain tries a second session (or member of the same name) while
	// this one lives.
	JoinAgain(ctx context.Context) error
	// Release tells the member the app let go of a holding.
	Release(role string, token int64) error
	// ReportLoad reports work done for a role.
	ReportLoad(role string, units float64) error
}
