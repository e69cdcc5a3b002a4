package rink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Errors returned by rink. Callers branch on them with errors.Is.
var (
	// ErrNilClient is returned by New when the etcd client is nil.
	ErrNilClient = errors.New("rink: nil etcd client")
	// ErrInvalidName is returned by New for an unusable rink or member name.
	ErrInvalidName = errors.New("rink: invalid name")
	// ErrInvalidOption is returned by New when an option is out of range, and
	// by NewObserver for an option an Observer does not use.
	ErrInvalidOption = errors.New("rink: invalid option")
	// ErrInvalidRole is returned for an empty role name.
	ErrInvalidRole = errors.New("rink: invalid role")
	// ErrMemberExists is returned by New when a live member already uses
	// the member name and its lease did not end within the join timeout.
	ErrMemberExists = errors.New("rink: member name in use by a live member")
	// ErrIncompatible means the rink's proclaimed map cannot be used by this
	// member: another slot count, or a map that does not decode. New
	// returns it; a running member stops holding roles and leaves until a
	// usable map appears. (A map in a protocol this member does not speak
	// is waited out instead: the member holds nothing but stays.)
	ErrIncompatible = errors.New("rink: incompatible rank map")
	// ErrShutdown is returned once the rink has been shut down, and is the
	// cause of role contexts cancelled by Shutdown.
	ErrShutdown = errors.New("rink: shut down")
	// ErrFenced is the cause of role contexts cancelled because this member
	// could not confirm its lease in time (or the lease ended). The member
	// rejoins by itself.
	ErrFenced = errors.New("rink: session lost, roles fenced")
	// ErrRoleMoved is the cause of a role context cancelled because a new
	// map gave the role's slot to another member.
	ErrRoleMoved = errors.New("rink: role moved to another member")
	// ErrClientClosed means the etcd client was closed under a running rink.
	ErrClientClosed = errors.New("rink: etcd client closed")
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
	MaxSlots = 65536
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

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event.
const (
	// EventAcquired: this member started holding a slot (and so every role
	// that hashes to it). Slot, Token, From and Wait are set.
	EventAcquired EventKind = iota
	// EventReleased: this member stopped holding a slot. Slot and Cause
	// are set.
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
)

// eventKindNames are the names String gives the kinds of Event.
var eventKindNames = [...]string{
	EventAcquired:    "acquired",
	EventReleased:    "released",
	EventFenced:      "fenced",
	EventRejoined:    "rejoined",
	EventMapApplied:  "map-applied",
	EventRankChanged: "rank-changed",
}

// String returns the kind's name in lowercase words, for logs and labels:
// "acquired", "released", "fenced", "rejoined", "map-applied" or
// "rank-changed". A value that is not one of the kinds prints as
// "EventKind(N)".
func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event reports a change in this member's state, for metrics and other
// telemetry (see WithEvents).
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
	// let go); for a map, how long applying it took.
	Wait time.Duration
	// Version is the version of an applied map.
	Version int64
	// Cause is why holdings ended.
	Cause error
	// Rank is the new rank.
	Rank Rank
}

// WithEvents calls fn for every Event of this member, synchronously, at
// the instant the change happens. What fn must respect:
//
//   - It may be called concurrently: fences come from the goroutine that
//     renews the lease while the main goroutine works (and one fn may serve
//     several Rinks). It must be safe for concurrent use.
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

func (r *Rink) emit(e Event) {
	if r.opts.events != nil {
		e.Rink, e.Member = r.name, r.opts.member
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		r.opts.events(e)
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
		ttl:   DefaultSessionTTL,
		delay: DefaultRebalanceDelay,
		slots: DefaultSlots,
		log:   zap.NewNop(),
	}
	for _, opt := range opts {
		if opt == nil {
			o.fail("nil option")
			continue
		}
		opt(&o)
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

// ValidRinkName returns nil if name can be used as a rink's name, or an
// error wrapping ErrInvalidName that says why not.
func ValidRinkName(name string) error {
	if why := validName(name, true); why != "" {
		return fmt.Errorf("%w: rink name %q: %s", ErrInvalidName, name, why)
	}
	return nil
}

// ValidMemberName returns nil if name can be used as a member's name, or an
// error wrapping ErrInvalidName that says why not. Members ignore member
// keys whose names fail it (an operator's stray key).
func ValidMemberName(name string) error {
	if why := validName(name, false); why != "" {
		return fmt.Errorf("%w: member name %q: %s", ErrInvalidName, name, why)
	}
	return nil
}

// validName reports why a rink or member name is unusable, or "".
func validName(name string, slashes bool) string {
	switch {
	case name == "":
		return "empty"
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return "leading or trailing '/'"
	case !slashes && strings.Contains(name, "/"):
		return "contains '/'"
	}
	for _, c := range name {
		if unicode.IsSpace(c) || unicode.IsControl(c) || c == unicode.ReplacementChar {
			return fmt.Sprintf("contains %q", c)
		}
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return "contains '//'"
		case "members", "election", "map", "acks", "floor":
			// rink/X/members/... would be rink X's own member keys.
			return fmt.Sprintf("contains the reserved segment %q", seg)
		}
	}
	return ""
}

func defaultMemberName() string {
	host, err := os.Hostname()
	if err != nil || validName(host, false) != "" {
		host = "member"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// keys lays out a rink's keys in etcd.
type keys struct{ prefix string }

func newKeys(name string) keys              { return keys{prefix: "rink/" + name + "/"} }
func (k keys) member(name string) string    { return k.prefix + "members/" + name }
func (k keys) members() string              { return k.prefix + "members/" }
func (k keys) rankMap() string              { return k.prefix + "map" }
func (k keys) election() string             { return k.prefix + "election/" }
func (k keys) memberName(key string) string { return strings.TrimPrefix(key, k.members()) }
func (k keys) isMember(key string) bool     { return strings.HasPrefix(key, k.members()) }
func (k keys) isElection(key string) bool   { return strings.HasPrefix(key, k.election()) }
func (k keys) isMap(key string) bool        { return key == k.rankMap() }
func (k keys) ack(name string) string       { return k.prefix + "acks/" + name }
func (k keys) acks() string                 { return k.prefix + "acks/" }
func (k keys) ackName(key string) string    { return strings.TrimPrefix(key, k.acks()) }
func (k keys) isAck(key string) bool        { return strings.HasPrefix(key, k.acks()) }
func (k keys) floor() string                { return k.prefix + "floor" }
func (k keys) isFloor(key string) bool      { return key == k.floor() }

// followed returns the key range a member follows: all of the rink's keys
// but the ack keys, which sort first and which only the leader reads.
func (k keys) followed() (key, end string) {
	return clientv3.GetPrefixRangeEnd(k.acks()), clientv3.GetPrefixRangeEnd(k.prefix)
}

// Rink is this process's membership of a sticky ranked ring. Create one with
// New; it is safe for concurrent use. Stop it with Shutdown.
type Rink struct {
	cli  *clientv3.Client
	name string
	opts options
	log  *zap.Logger
	keys keys

	// ctx ends when the rink stops; every goroutine and incarnation derives
	// from it. wg counts every goroutine the rink starts.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Published state, read by the API without locks. Only the run
	// goroutine writes it.
	slots  []atomic.Pointer[slotState]
	owners atomic.Pointer[rankMap]
	rank   atomic.Pointer[rankState]
	listed atomic.Bool // the leader has listed this member at least once (see Ready)

	stopping    chan struct{} // closed when shutdown begins
	stopOnce    sync.Once
	stopCtx     context.Context // the first Shutdown's context; set before stopping is closed
	done        chan struct{}   // closed when everything has stopped
	shutdownErr error           // set before done is closed
	stopCause   error           // why the rink stopped (see Err); set before done is closed

	// Channels into the run goroutine.
	watchCh      chan watchBatch
	joinedCh     chan *incarnation
	electedCh    chan elected
	proclaimedCh chan proclaimResult
	// ackCh carries the newest acknowledgement to the ack writer.
	ackCh chan ackReq

	st state // owned by the run goroutine

	// rejoinHook, when set (tests of the run goroutine's state alone),
	// replaces starting the rejoin goroutine.
	rejoinHook func(old *incarnation, join bool)
}

// New joins the rink called name on etcd and returns once this member's
// key exists. It does not wait to be ranked. It fails with ErrIncompatible
// when the rink's map was made with other settings, ErrMemberExists when the
// member name is held by a live member, and a context.DeadlineExceeded error
// when etcd does not answer within the join timeout. It is NewContext with
// context.Background(): the join timeout alone bounds it.
func New(cli *clientv3.Client, name string, opts ...Option) (*Rink, error) {
	return NewContext(context.Background(), cli, name, opts...)
}

// NewContext is New bounded by ctx as well as by the join timeout: if ctx
// ends before this member has joined, NewContext gives up at once, starts
// nothing, and returns an error that wraps ctx's error
// (errors.Is(err, context.Canceled) after a cancellation), whatever step of
// the join was cut short. Pass it the context a SIGTERM cancels (see
// signal.NotifyContext), so that a process told to stop while it waits out a
// predecessor's lease — up to the join timeout, 15 s by default — stops at
// once. ctx must not be nil.
//
// ctx bounds the join only: once NewContext has returned the Rink, ending
// ctx does nothing to it; stop it with Shutdown. Values of ctx reach the
// etcd requests of the join.
func NewContext(ctx context.Context, cli *clientv3.Client, name string, opts ...Option) (*Rink, error) {
	o, err := checkArgs(cli, name, opts)
	if err != nil {
		return nil, err
	}
	if o.member == "" {
		o.member = defaultMemberName()
	}
	if why := validName(o.member, false); why != "" {
		return nil, fmt.Errorf("%w: member name %q: %s", ErrInvalidName, o.member, why)
	}

	r := &Rink{
		cli:          cli,
		name:         name,
		opts:         o,
		log:          o.log.With(zap.String("rink", name), zap.String("member", o.member)),
		keys:         newKeys(name),
		slots:        make([]atomic.Pointer[slotState], o.slots),
		stopping:     make(chan struct{}),
		done:         make(chan struct{}),
		watchCh:      make(chan watchBatch),
		joinedCh:     make(chan *incarnation),
		electedCh:    make(chan elected),
		proclaimedCh: make(chan proclaimResult),
		ackCh:        make(chan ackReq, 1),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.publishRank()

	// Only the join derives from ctx: the rink's own goroutines, started
	// below from r.ctx, outlive it.
	jctx, cancel := context.WithTimeout(ctx, o.joinTimeout)
	defer cancel()
	inc, err := r.first(jctx)
	if err != nil {
		r.cancel()
		r.wg.Wait()
		if ctx.Err() != nil && !errors.Is(err, ErrIncompatible) && !errors.Is(err, ErrInvalidName) {
			// The caller gave up: say so, rather than blame the step that
			// was cut short (ErrMemberExists would claim the join timeout
			// ran out). A refusal found before stands.
			if cause := context.Cause(ctx); cause != ctx.Err() {
				return nil, fmt.Errorf("rink: joining rink %q: %w (%w)", name, ctx.Err(), cause)
			}
			return nil, fmt.Errorf("rink: joining rink %q: %w", name, ctx.Err())
		}
		return nil, err
	}
	r.log.Info("joined", zap.Int64("lease", int64(inc.lease)))
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.watch()
	}()
	go func() {
		defer r.wg.Done()
		r.writeAcks()
	}()
	go r.run(inc)
	return r, nil
}

// first checks that the rink's current map suits this member and that the
// rink nests in no other (see nesting), then joins.
func (r *Rink) first(ctx context.Context) (*incarnation, error) {
	ops := []clientv3.Op{clientv3.OpGet(r.keys.rankMap())}
	ops = append(ops, nestingOps(r.name)...)
	resp, err := r.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("rink: reading the rank map: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if _, err := decodeMap(kvs[0].Value, r.opts.slots); err != nil && !waitsOut(err) {
			return nil, err // (a map in a protocol we do not speak is waited out)
		}
	}
	if other := nesting(r.name, resp.Responses[1:]); other != "" {
		return nil, fmt.Errorf("%w: rink %q and rink %q nest (one's keys lie under the other's prefix, so its members would follow every key of the other); give them names that are not prefixes of each other", ErrInvalidName, r.name, other)
	}
	return r.join(ctx)
}

// Shutdown leaves the rink: it cancels every role context, hands the
// coordination of the rink on (if this member is the rink's Leader, it
// first proclaims a map without itself, so its roles move at once), deletes
// the member key and revokes the lease, then waits for every goroutine the
// rink started. It is idempotent.
//
// It returns nil once the member has left cleanly, the error of the etcd
// request that failed while leaving, or ErrClientClosed if the rink had
// already stopped because its etcd client was closed. If ctx ends first,
// Shutdown returns ctx's error; the rink still stops, and Done is closed
// when it has. Err tells, once Done is closed, why the rink stopped.
func (r *Rink) Shutdown(ctx context.Context) error {
	r.stop(ctx)
	select {
	case <-r.done:
		return r.shutdownErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop asks the run goroutine to shut down, bounded by ctx. From now on
// AwaitRole returns at once.
func (r *Rink) stop(ctx context.Context) {
	r.stopOnce.Do(func() {
		r.stopCtx = ctx
		close(r.stopping)
	})
}

// Done is closed when the rink has stopped, after Shutdown or when its etcd
// client was closed. Err tells which.
func (r *Rink) Done() <-chan struct{} { return r.done }

// Err returns nil while the rink runs (a Shutdown in progress included)
// and, once Done is closed, why it stopped: ErrShutdown after Shutdown, or
// ErrClientClosed when its etcd client was closed under it. Like a
// context's Err, it never changes once it is not nil. Whether the member
// left cleanly is what Shutdown returns: Err is ErrShutdown even after a
// Shutdown that returned nil.
//
//	<-r.Done()
//	if errors.Is(r.Err(), rink.ErrClientClosed) {
//		// the process closed the client too early, or is going down
//	}
func (r *Rink) Err() error {
	select {
	case <-r.done:
		return r.stopCause
	default:
		return nil
	}
}

// Name returns the rink's name.
func (r *Rink) Name() string { return r.name }

// Member returns this member's name.
func (r *Rink) Member() string { return r.opts.member }
