package rink

import (
	"context"
	"errors"
	"fmt"
	"github.com/rink-go/rink/internal/core"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/simhook"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// ErrNilFunc is returned by Run and Watch when given a nil function.
	ErrNilFunc = errors.New("rink: nil function")
	// ErrMemberExists is returned by New when a live member already uses
	// the member name and its lease did not end within the join timeout.
	ErrMemberExists = errors.New("rink: member name in use by a live member")
	// ErrIncompatible means the rink's proclaimed map cannot be used by this
	// member: another slot count or number of replicas. New returns it; a
	// running member stops holding roles and leaves until a usable map
	// appears. (A map in a protocol this member does not speak is waited
	// out instead: the member holds nothing but stays. A map value nobody
	// can use — one that does not decode, or breaks a map's invariants, as
	// an edit by hand can leave it — is neither: members keep what they
	// hold, New joins, and the leader writes a whole map over it.)
	ErrIncompatible = wire.ErrIncompatible
	// ErrShutdown is returned once the rink has begun to shut down, and is
	// the cause of role contexts cancelled by Shutdown. Whatever stopped
	// the rink, the errors its methods return and the causes of its role
	// contexts are the error Err gives once Done is closed: ErrShutdown,
	// or ErrClientClosed, which wraps it.
	ErrShutdown = errors.New("rink: shut down")
	// ErrFenced is the cause of role contexts cancelled because this member
	// could not confirm its lease in time (or the lease ended). The member
	// rejoins by itself.
	ErrFenced = errors.New("rink: session lost, roles fenced")
	// ErrRoleMoved is the cause of a role context cancelled because a new
	// map gave the role's slot to another member (or, with WithReplicas,
	// because this member missed maps that may have: it starts the role
	// again once the barrier lets it).
	ErrRoleMoved = errors.New("rink: role moved to another member")
	// ErrClientClosed means the etcd client was closed under a running
	// rink, which then stopped: the methods that return ErrShutdown after
	// Shutdown return ErrClientClosed, and it is the cause of the role
	// contexts it cancelled. It wraps ErrShutdown, so that
	// errors.Is(err, ErrShutdown) tells that the rink has stopped, whatever
	// stopped it.
	ErrClientClosed = fmt.Errorf("%w: etcd client closed", ErrShutdown)
	// ErrReplicaMismatch means the rink's map has another number of
	// replicas per slot than this member was configured with (see
	// WithReplicas). It wraps ErrIncompatible: New returns it, and a
	// running member leaves until a usable map appears.
	ErrReplicaMismatch = wire.ErrReplicaMismatch
	// ErrPromoted is the cause of a secondary's context (see
	// Handler.Secondary) cancelled because this member now holds the
	// slot's primary: Assigned follows, with the primary's context.
	ErrPromoted = errors.New("rink: secondary promoted to primary")
)

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
	slots slotStates
	// secs publishes the secondaries' states (see secondary.go): a slot's
	// is set while this member holds it as a secondary. Empty with one
	// replica per slot.
	secs   slotStates
	owners atomic.Pointer[wire.Map]
	// ownersMu guards the table of the map in owners, which the run
	// goroutine may write in place (see applyInPlace): readers hold it
	// shared while they read the table.
	ownersMu sync.RWMutex
	rank     atomic.Pointer[rankState]
	listed   atomic.Bool // the leader has listed this member at least once (see Ready)

	stopping    chan struct{} // closed when shutdown begins
	stopOnce    sync.Once
	stopCtx     context.Context // the first Shutdown's context; set before stopping is closed
	stopWhy     error           // ErrShutdown or ErrClientClosed: what stopped the rink; set before stopping is closed
	over        atomic.Bool     // the rink has stopped, or Shutdown has returned (see Owner)
	done        chan struct{}   // closed when everything has stopped
	shutdownErr error           // set before done is closed
	stopCause   error           // why the rink stopped (see Err); set before done is closed

	// Channels into the run goroutine.
	handoffCh chan input    // (see input)
	relistCh  chan struct{} // asks the watcher for a new listing (see relist)
	wideView  atomic.Bool   // the watcher follows the wide view (see view.go)
	// ackCh carries the newest acknowledgement to the ack writer.
	ackCh chan core.AckReq

	// load is what AddLoad and AwaitRole record for the load reporter, and
	// loadInc the incarnation whose lease its key is bound to (set by the
	// run goroutine).
	load    *loadAcc
	loadInc atomic.Pointer[incarnation]
	// Role sets (see Watch): the list, and a copy the run goroutine reads.
	setsMu  sync.Mutex
	sets    []*RoleSet
	setsPub atomic.Pointer[[]*RoleSet]

	// inbox carries the rest to the run goroutine (see inbox.go).
	inbox *inbox

	st mechanisms // owned by the run goroutine (see loop.go)
	// nowFn and clockFn, when set (by the simulator), are the core's time
	// (see timers.go).
	nowFn   func() time.Time
	clockFn func() int64
	simFx   effects    // the simulator's effects (see driver.go); nil: netEffects
	simRand *rand.Rand // the simulator's source of the core's jitter (nil: each backoff has its own, seeded from the global one)
	// simSet, in the simulator, schedules a role set's round on its
	// goroutine (see RoleSet.signal); nil: each set runs its own
	// goroutine. simWarm, in the simulator, warms up the slots of a
	// set's roles that an announcement of version v brings, in virtual
	// time, and calls ready once it has (see RoleSet.startWarm).
	simSet  func(round func())
	simWarm func(v int64, slots []int, ready func())
	// simEarly, in the simulator, hears of announced moves this member,
	// leading, makes before the warm-up time has passed (see
	// holdForWarmup); nil: none.
	simEarly func(moves map[int]string)
	// simLeave, in the simulator, carries out a shutdown the core decides
	// on (see shutdown): the departure, as the simulator's Leave does it.
	simLeave func()
	// simRound, in the simulator, hears of each load round this member,
	// leading, runs: its number in the leadership, and the slots it moves.
	simRound func(round int, moved []int)
	plant    string // a bug the simulator planted (see plant.go; "": none)
	// simKnobs, in the simulator, lowers bounds on what the member
	// remembers (see simhook.Knobs); zero: production's.
	simKnobs simhook.Knobs

	// rejoinHook, when set (tests of the run goroutine's state alone),
	// replaces starting the rejoin goroutine.
	rejoinHook func(old *incarnation, join bool)
}

// New joins the rink called name on etcd and returns once this member's
// key exists. It does not wait to be ranked. It fails with ErrIncompatible
// when the rink's map was made with other settings, ErrMemberExists when the
// member name is held by a live member, ErrUnreachable as soon as etcd is
// known to be out of reach (every endpoint refuses the connection for a
// couple of seconds, or fails the TLS handshake), and a
// context.DeadlineExceeded error when etcd does not answer within the join
// timeout (wrapping ErrUnreachable too if no endpoint could be connected
// to). These errors name the endpoints and what failed at each; an etcd
// that denies the client (a wrong password, a role without permission on
// the rink's keys) is reported at once, with the user and the permission
// rink needs (see docs/operations.md). It is NewContext with
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
	if ctx == nil {
		return nil, fmt.Errorf("%w: a nil context", ErrInvalidOption)
	}
	if o.member == "" {
		o.member = defaultMemberName()
	}
	if why := validName(o.member, false); why != "" {
		return nil, fmt.Errorf("%w: member name %q: %s", ErrInvalidName, o.member, why)
	}

	r := newRink(name, o)
	r.cli = cli
	r.publishRank()
	if o.warmup > 0 && o.delay <= o.warmup {
		// A newcomer of a rolling deploy waits to inherit a leaving
		// member's slots; if its delay runs out first, it is ranked on its
		// own and the leaver's roles move twice.
		r.log.Warn("the rebalance delay does not exceed the warm-up: in a rolling deploy a newcomer may be ranked before its predecessor has handed over, and roles move twice",
			zap.Duration("delay", o.delay), zap.Duration("warmup", o.warmup))
	}

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
	r.log.Info("joined", zap.Int64("lease", int64(inc.Lease)))
	r.wg.Add(4)
	go func() {
		defer r.wg.Done()
		r.watch()
	}()
	go func() {
		defer r.wg.Done()
		r.followOwn()
	}()
	go func() {
		defer r.wg.Done()
		r.reportLoad()
	}()
	go func() {
		defer r.wg.Done()
		r.writeAcks()
	}()
	go r.run(inc)
	return r, nil
}

// newRink makes the Rink of member o.member in rink name, with nothing
// started.
func newRink(name string, o options) *Rink {
	r := &Rink{
		name:      name,
		opts:      o,
		log:       o.log.With(zap.String("rink", name), zap.String("member", o.member)),
		keys:      newKeys(name),
		slots:     newSlotStates(o.slots),
		secs:      newSlotStates(o.slots * min(1, o.replicas-1)), // (none with one replica)
		stopping:  make(chan struct{}),
		done:      make(chan struct{}),
		handoffCh: make(chan input),
		relistCh:  make(chan struct{}, 1),
		ackCh:     make(chan core.AckReq, 1),
		inbox:     newInbox(),
		load:      newLoadAcc(o.slots),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// first checks that the rink's current map suits this member and that the
// rink nests in no other (see nesting), then joins.
func (r *Rink) first(ctx context.Context) (*incarnation, error) {
	ops := []clientv3.Op{clientv3.OpGet(r.keys.Map()), clientv3.OpGet(r.keys.Snapshot())}
	ops = append(ops, nestingOps(r.name)...)
	var resp *clientv3.TxnResponse
	need := fmt.Sprintf("read-write on the keys under %q", r.keys.Prefix)
	if strings.Contains(r.name, "/") {
		need += ", and read on " + ancestorKeys(r.name)
	}
	err := contact(ctx, r.cli, need, func(ctx context.Context) (err error) {
		resp, err = r.cli.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rink: joining rink %q: reading the rank map: %w", r.name, err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var snap *mvccpb.KeyValue
		if s := resp.Responses[1].GetResponseRange().Kvs; len(s) > 0 {
			snap = s[0]
		}
		m, err := wire.ReadMap(kvs[0], snap, &wire.Map{}, false, 0, 0, r.geometry())
		if err != nil && !waitsOut(err) && !wire.WrittenOver(err) {
			return nil, err // (a map in a protocol we do not speak is waited out; one we cannot read yet, or nobody can, is read once joined, and written over by a leader)
		}
		// A rink of protocol 3 is followed in the narrow view from the
		// start (see view.go): a member that joins a large rink lists
		// the map, not every member key.
		r.wideView.Store(err != nil || m.Schema < 3)
	} else {
		r.wideView.Store(true)
	}
	if other := nesting(r.name, resp.Responses[2:]); other != "" {
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
//
// From the moment Shutdown begins, AwaitRole, AwaitRoleContext, Run,
// Watch and RoleSet.Add return ErrShutdown (ErrClientClosed if the client
// was closed first: see Err) and Ready is false; once Shutdown has
// returned, or the rink has stopped for any reason, Get, Owner and Owners
// answer false; once Done is closed, Rank has Index -1, Size 0 and no
// Leader, and AddLoad is ignored. A member that leaves with a warm-up (WithWarmup) keeps its
// roles, and Get and Owner keep answering, while it waits for its heirs.
func (r *Rink) Shutdown(ctx context.Context) error {
	r.stop(ctx, ErrShutdown)
	select {
	case <-r.done:
		return r.shutdownErr
	case <-ctx.Done():
		// The rink still stops, but no role outlives this return, even
		// while a departure waits for etcd.
		if inc := r.loadInc.Load(); inc != nil {
			inc.cancel(r.stopErr())
		}
		r.over.Store(true)
		return ctx.Err()
	}
}

// stop asks the run goroutine to shut down, bounded by ctx, because of why
// (ErrShutdown or ErrClientClosed), unless it was asked before. From now
// on AwaitRole returns at once.
func (r *Rink) stop(ctx context.Context, why error) {
	r.stopOnce.Do(func() {
		r.stopCtx, r.stopWhy = ctx, why
		close(r.stopping)
	})
}

// stopErr is what stopped the rink (see stop): the error the API returns
// and the cause of the role contexts the stop cancels. Call it only once
// the stop was asked for (stopping is closed); the simulator's members,
// which leave without it, get ErrShutdown.
func (r *Rink) stopErr() error {
	if r.stopWhy == nil {
		return ErrShutdown
	}
	return r.stopWhy
}

// Done is closed when the rink has stopped, after Shutdown or when its etcd
// client was closed. Err tells which.
func (r *Rink) Done() <-chan struct{} { return r.done }

// Err returns nil while the rink runs (a Shutdown in progress included)
// and, once Done is closed, why it stopped: ErrShutdown after Shutdown, or
// ErrClientClosed (which wraps ErrShutdown) when its etcd client was
// closed under it. Like a context's Err, it never changes once it is not
// nil. It is the error that AwaitRoleContext, Run, Watch and RoleSet.Add
// return once the rink is stopping, and the cause of the role contexts
// that the stop cancelled. Whether the member left cleanly is what
// Shutdown returns: Err is ErrShutdown even after a Shutdown that returned
// nil.
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
