package rink

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Defaults for the options.
const (
	DefaultSessionTTL     = 10 * time.Second
	DefaultRebalanceDelay = 30 * time.Second
	DefaultSlots          = 1024
	// DefaultJoinTimeout is the join timeout with the default session
	// TTL. Without WithJoinTimeout the join timeout is one and a half
	// session TTLs, so that a process restarted under its own name (a crash
	// loop, an OOM kill) waits out its predecessor's lease instead of
	// failing with ErrMemberExists.
	DefaultJoinTimeout = DefaultSessionTTL * 3 / 2
	// MinSessionTTL is the shortest session TTL accepted. Shorter leases
	// leave too little room between renewals, fencing and expiry.
	MinSessionTTL = 2 * time.Second
	// MaxSlots is the largest slot count accepted.
	MaxSlots = wire.MaxSlots
	// MaxCapacity is the largest capacity accepted (see WithCapacity).
	MaxCapacity = wire.MaxCapacity
	// MaxReplicas is the most replicas per slot accepted (see
	// WithReplicas).
	MaxReplicas = wire.MaxReplicas
	// MaxZoneLength is the longest zone name accepted (see WithZone).
	MaxZoneLength = wire.MaxZoneLength
	// DefaultLoadInterval is how often a member may write its load summary
	// (see WithLoadInterval).
	DefaultLoadInterval = 10 * time.Second
	// DefaultLoadWindow is the window of the rates a member reports (see
	// WithLoadWindow).
	DefaultLoadWindow = time.Minute
	// DefaultImbalanceTolerance is how far above the mean load per
	// capacity a member may be before the leader moves slots by load (see
	// WithImbalanceTolerance).
	DefaultImbalanceTolerance = 0.1
)

// Option configures a Rink. Options are validated by New (and NewContext).
// NewObserver takes only WithLogger and WithJoinTimeout, and refuses the
// others.
type Option func(*options)

type options struct {
	member      string
	ttl         time.Duration
	delay       time.Duration
	slots       int
	capacity    float64
	replicas    int    // replicas per slot, the primary included (WithReplicas)
	zone        string // this member's failure domain (WithZone)
	loadEvery   time.Duration
	loadWindow  time.Duration
	drain       time.Duration // how long a given-away slot waits for Run and Watch (WithDrainTimeout)
	warmup      time.Duration // how long planned moves wait for their heirs (WithWarmup)
	byLoad      bool          // the leader balances by load (WithImbalanceTolerance)
	tolerance   float64       // how far above the mean load a member may be
	log         *zap.Logger
	joinTimeout time.Duration
	events      func(Event)
	errs        []error
	// given names the options applied, in order: an Option is a closure,
	// and this is how NewObserver learns which ones it was given (see
	// refuse).
	given []string
}

// use records that the option called name was given.
func (o *options) use(name string) { o.given = append(o.given, name) }

// WithEvents calls fn for every Event of this member, synchronously, at
// the instant the change happens. What fn must respect:
//
//   - It may be called concurrently: fences come from the goroutine that
//     renews the lease, and load summaries from the one that writes them,
//     while the main goroutine works (and one fn may serve several Rinks).
//     It must be safe for concurrent use.
//   - It must not block: it runs on the path that starts roles (a handover
//     of 1,000 slots calls it 1,000 times before the last role starts) and
//     on the path that fences and rejoins.
//   - It must not call Shutdown, AwaitRole or AwaitRoleContext; Rank, Get
//     and Owner are safe. A panic in fn is not recovered.
func WithEvents(fn func(Event)) Option {
	return func(o *options) {
		o.use("WithEvents")
		if fn == nil {
			o.fail("nil events function")
			return
		}
		o.events = fn
	}
}

func (o *options) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

// WithMemberName sets this member's name, unique among the rink's live
// members. The default is the host name plus a random suffix. Reusing a name
// after a restart (a StatefulSet pod) is supported: New waits for the
// previous holder's lease to end, up to the join timeout.
func WithMemberName(name string) Option {
	return func(o *options) {
		o.use("WithMemberName")
		o.member = name
	}
}

// WithSessionTTL sets the lease TTL, a whole number of seconds no shorter
// than MinSessionTTL (default 10 s). A crashed member's roles move after
// about this long; a member that cannot renew its lease fences itself before
// the TTL ends.
func WithSessionTTL(ttl time.Duration) Option {
	return func(o *options) {
		o.use("WithSessionTTL")
		if ttl < MinSessionTTL || ttl%time.Second != 0 {
			o.fail("session TTL %v: want a whole number of seconds, at least %v", ttl, MinSessionTTL)
			return
		}
		o.ttl = ttl
	}
}

// WithRebalanceDelay sets how long a joining member waits for a rank to be
// vacated before the rink's leader rebalances to include it (default 30 s;
// 0 ranks newcomers at once). Only the setting of the rink's leader — the
// member that coordinates the rink, Rank().Leader — matters, so give every
// member the same.
func WithRebalanceDelay(d time.Duration) Option {
	return func(o *options) {
		o.use("WithRebalanceDelay")
		if d < 0 {
			o.fail("rebalance delay %v is negative", d)
			return
		}
		o.delay = d
	}
}

// WithSlots sets the number of slots roles hash to (default 1024, 1 to
// MaxSlots). It is fixed for the life of a rink: every member must agree.
func WithSlots(n int) Option {
	return func(o *options) {
		o.use("WithSlots")
		if n < 1 || n > MaxSlots {
			o.fail("slots %d: want 1 to %d", n, MaxSlots)
			return
		}
		o.slots = n
	}
}

// WithCapacity sets this member's capacity (default 1; above 0, at most
// MaxCapacity):
// the leader gives each ranked member a share of the slots in proportion
// to its capacity, within one slot of S·c/Σc for S slots, and moves as few
// slots as that allows, as it does with equal capacities. Give a replica
// with twice the CPU a capacity of 2. The capacity is written into the
// member key, and fixed for the life of the Rink. Members of 636d84c and
// earlier ignore capacities: while one of them leads, shares are equal.
func WithCapacity(c float64) Option {
	return func(o *options) {
		o.use("WithCapacity")
		if !(c > 0) || c > MaxCapacity {
			o.fail("capacity %v: want a positive number of at most %g", c, float64(MaxCapacity))
			return
		}
		o.capacity = c
	}
}

// WithReplicas sets how many members hold each slot (default 1, at most
// MaxReplicas): its primary, which holds the slot's roles exactly as a
// rink with one replica does (AwaitRole, Get, Token, Owner, Run and
// Watch's Assigned), and k-1 secondaries on other members, which keep a
// warm copy (Handler.Secondary) and of which the one that has held the
// slot longest takes over when the primary crashes or leaves without an
// heir. A slot's replicas sit in distinct zones whenever the members'
// zones allow (see WithZone). At no instant do more than k members hold
// a slot, nor more than one its primary.
//
// It is fixed for the life of a rink: every member must agree, as on the
// slot count. New refuses a rink of another count with
// ErrReplicaMismatch, and a running member that meets one leaves until a
// usable map appears. A rink of one replica keeps the map of earlier
// releases byte for byte; one of more is proclaimed in protocol 4, which
// members of earlier releases do not speak (they stay unranked).
func WithReplicas(k int) Option {
	return func(o *options) {
		o.use("WithReplicas")
		if k < 1 || k > MaxReplicas {
			o.fail("replicas %d: want 1 to %d", k, MaxReplicas)
			return
		}
		o.replicas = k
	}
}

// WithZone sets this member's failure domain (a zone, rack or node pool;
// default none): the leader places each slot's replicas in as many
// distinct zones as the live members' zones allow (see WithReplicas), and
// a lost zone moves only what its members held. Members without a zone
// count as one zone of their own. A zone is up to MaxZoneLength printable
// ASCII characters without spaces; it is written into the member key, and
// fixed for the life of the Rink. In Kubernetes, pass the node's
// topology.kubernetes.io/zone label through the downward API
// (docs/kubernetes.md).
func WithZone(zone string) Option {
	return func(o *options) {
		o.use("WithZone")
		if why := wire.ValidZone(zone); why != "" {
			o.fail("zone %q: %s", zone, why)
			return
		}
		o.zone = zone
	}
}

// WithLoadInterval sets how often this member folds in the load AddLoad
// recorded and may write its load summary (default 10 s; at least 100 ms):
// it writes at most once per interval, and only when the summary changed
// noticeably.
func WithLoadInterval(d time.Duration) Option {
	return func(o *options) {
		o.use("WithLoadInterval")
		if d < 100*time.Millisecond {
			o.fail("load interval %v: want at least 100ms", d)
			return
		}
		o.loadEvery = d
	}
}

// WithLoadWindow sets the window of the load rates this member reports
// (default 1 minute; at least the load interval): the rate of a slot is a
// moving average of the units AddLoad recorded, in which a unit counts
// for less as it ages, e-fold per window.
func WithLoadWindow(d time.Duration) Option {
	return func(o *options) {
		o.use("WithLoadWindow")
		if d <= 0 {
			o.fail("load window %v: want a positive duration", d)
			return
		}
		o.loadWindow = d
	}
}

// WithImbalanceTolerance sets how far above the mean load per capacity a
// member may be before the rink's leader moves slots by load (default
// DefaultImbalanceTolerance, 10 %; otherwise at least 0.01; 0 turns load
// balancing off). When the most loaded member exceeds the mean by more
// than the tolerance, the leader moves loaded slots from the most to the
// least loaded members, at most 5 % of the slots per load interval, until
// every member is within half the tolerance or no move helps; a slot it
// moved stays put for three intervals. The load is what the members report
// (see AddLoad), or, where nobody records load, the roles they await: a
// handful of roles ends one per member. Moves go through the same barrier
// as every other: a role never has two holders.
//
// The leader balances by load only while some slot carries load (a rate,
// or an awaited role); until then, and with a tolerance of 0, it balances
// slot counts (by capacity), so that members that use only ranks and slots
// keep even shares. Give every member the same option, since any member
// may lead.
func WithImbalanceTolerance(t float64) Option {
	return func(o *options) {
		o.use("WithImbalanceTolerance")
		if t != 0 && !(t >= 0.01) || math.IsInf(t, 1) {
			o.fail("imbalance tolerance %v: want 0 (off) or a finite number of at least 0.01", t)
			return
		}
		o.byLoad, o.tolerance = t != 0, t
	}
}

// WithDrainTimeout lets the work that Run and Watch handlers run on a role
// finish before the role's heir starts it, for at most d (default 0: the
// heir starts as soon as the context is cancelled, as with AwaitRole).
// When a new map moves a slot away, or a graceful Shutdown hands it over,
// this member cancels the slot's context at once and then waits until
// every such function on the slot has returned, or d has passed, before
// it lets the heir start (EventDrained, or EventDrainTimedOut and a log
// line; fencing tokens still protect a function that outlives its drain).
// Shutdown waits within its context. A drain holds back every slot given
// away in the same map, not the slots kept or gained. A fence drains only
// until the fenced lease's deadline: its functions' contexts end at once,
// as every holding's does, and the member does not revoke the fenced
// lease before they have returned or the deadline has passed, so that no
// other process of its name starts their slots beside them.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) {
		o.use("WithDrainTimeout")
		if d < 0 {
			o.fail("drain timeout %v: want a duration of at least 0", d)
			return
		}
		o.drain = d
	}
}

// WithWarmup makes planned moves wait, for at most d, until their heirs
// are ready (default 0: moves happen at once). A planned move is one whose
// current owner is alive: a waiting member ranked after the rebalance
// delay, a scale-out, a load move, and a graceful Shutdown. The leader
// first announces the heirs of the moving slots (EventIncoming on each
// heir, and Handler.Warm for the roles it watches) while the current
// owners keep serving, and proclaims the move once every heir has warmed
// up or d has passed. A Shutdown with a warm-up asks the leader to move
// its slots that way, and waits within its context. Crash failover does
// not wait: there is nothing to warm from a dead member. The promise does
// not change: at most one holder, tokens rising. Give every member the
// same option: the leader's decides. Keep the rebalance delay above d (New
// logs a warning otherwise): a rolling deploy's newcomer waits to inherit
// its predecessor's slots, and if its delay runs out before the
// predecessor has handed over, it is ranked on its own and the roles move
// twice.
func WithWarmup(d time.Duration) Option {
	return func(o *options) {
		o.use("WithWarmup")
		if d < 0 {
			o.fail("warm-up %v: want a duration of at least 0", d)
			return
		}
		o.warmup = d
	}
}

// WithLogger sets the logger (default: a no-op logger).
func WithLogger(l *zap.Logger) Option {
	return func(o *options) {
		o.use("WithLogger")
		if l == nil {
			o.fail("nil logger")
			return
		}
		o.log = l
	}
}

// WithJoinTimeout bounds how long New (and each later rejoin attempt) may
// take to join (default: one and a half session TTLs, 15 s with the default
// TTL, so that a predecessor's lease under the same name can run out).
// NewContext's context can end a join sooner. For NewObserver it bounds the
// first read of the rink (default DefaultJoinTimeout).
func WithJoinTimeout(d time.Duration) Option {
	return func(o *options) {
		o.use("WithJoinTimeout")
		if d <= 0 {
			o.fail("join timeout %v: want > 0", d)
			return
		}
		o.joinTimeout = d
	}
}

// checkArgs validates what New and NewObserver are given: a client, a rink
// name, and options.
func checkArgs(cli *clientv3.Client, name string, opts []Option) (options, error) {
	if cli == nil {
		return options{}, ErrNilClient
	}
	if why := validName(name, true); why != "" {
		return options{}, fmt.Errorf("%w: rink name %q: %s", ErrInvalidName, name, why)
	}
	return parseOptions(opts)
}

// parseOptions applies opts over the defaults and reports every invalid
// one.
func parseOptions(opts []Option) (options, error) {
	o := options{
		ttl:        DefaultSessionTTL,
		delay:      DefaultRebalanceDelay,
		slots:      DefaultSlots,
		capacity:   1,
		replicas:   1,
		loadEvery:  DefaultLoadInterval,
		loadWindow: DefaultLoadWindow,
		byLoad:     true,
		tolerance:  DefaultImbalanceTolerance,
		log:        zap.NewNop(),
	}
	for _, opt := range opts {
		if opt == nil {
			o.fail("nil option")
			continue
		}
		opt(&o)
	}
	if o.loadWindow < o.loadEvery {
		o.fail("load window %v shorter than the load interval %v", o.loadWindow, o.loadEvery)
	}
	if o.joinTimeout == 0 {
		o.joinTimeout = o.ttl * 3 / 2
	}
	return o, errors.Join(o.errs...)
}

// refuse returns an error wrapping ErrInvalidOption for each option given
// that is not one of accept, naming it and the options who takes, or nil.
func (o *options) refuse(who string, accept ...string) error {
	var errs []error
	for _, name := range o.given {
		if !slices.Contains(accept, name) {
			errs = append(errs, fmt.Errorf("%w: %s does not apply to %s, which takes only %s",
				ErrInvalidOption, name, who, strings.Join(accept, " and ")))
		}
	}
	return errors.Join(errs...)
}
