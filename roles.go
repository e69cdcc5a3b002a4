package rink

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// Roles are not tracked one by one. A role hashes to a slot, and this member
// holds a role exactly while it holds the role's slot; all roles of a slot
// share the slot's context. So a map change costs work in proportion to the
// slots that change owner, whatever the number of roles awaited.

// slotState is the published state of a slot this member holds or that
// somebody awaits. A nil pointer means "not held, nobody waiting yet". The
// run goroutine replaces the state and then closes the old one's changed
// channel; awaiting goroutines only ever install a fresh empty state where
// there was none.
type slotState struct {
	ctx     context.Context // non-nil while held
	at      time.Time       // when the slot was gained, while held
	changed chan struct{}   // closed when this state is replaced
	// used is set once Get or AwaitRole has handed out ctx: somebody acts
	// on the slot's roles, so a shutdown releases the slot last.
	used atomic.Bool
	// runners counts the functions that Run and Watch run on the
	// holding (see drain.go).
	runners atomic.Int32
}

// handOut returns the held context and marks the slot used.
func (st *slotState) handOut() context.Context {
	if !st.used.Load() {
		st.used.Store(true)
	}
	return st.ctx
}

type tokenKey struct{}

// roleContext is the context of a holding. Its Err also checks the lease's
// fence deadline, and fences the member on the spot if the deadline has
// passed: after the process was stopped or stalled past its deadline, the
// goroutine that renews the lease may not have run yet, but a caller that
// checks Err before acting on a role already sees it lost. Done is closed
// by the fence itself, a moment later in that case.
type roleContext struct {
	context.Context
	r   *Rink
	inc *incarnation
}

// Value answers holdingKey with the role context itself (see ValidFor).
func (c *roleContext) Value(key any) any {
	if _, ok := key.(holdingKey); ok {
		return c
	}
	return c.Context.Value(key)
}

type holdingKey struct{}

// ValidFor returns how long the holding whose context roleCtx is (or
// derives from) stays this member's whatever happens to etcd or the network:
// the time left before this member cancels it for want of a confirmed lease
// renewal (see ErrFenced), which comes a fencing margin before the lease can
// expire on the etcd server. Each confirmed renewal extends it. It returns
// false for a context that is not a role context, or whose holding is over.
//
// A process that acts on a role for this member — the app beside rinkd, the
// sidecar — must stop acting by then unless told of a renewal: nobody else
// can hold the role before, unless this member hands it over.
func ValidFor(roleCtx context.Context) (time.Duration, bool) {
	if roleCtx == nil {
		return 0, false
	}
	rc, ok := roleCtx.Value(holdingKey{}).(*roleContext)
	if !ok || roleCtx.Err() != nil {
		return 0, false
	}
	left := rc.inc.left()
	if left <= 0 {
		return 0, false
	}
	return left, true
}

func (c *roleContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.inc.expired() {
		c.r.fence(c.inc, ErrFenced)
		return c.Context.Err()
	}
	return nil
}

// Token returns the fencing token carried by a role context. Tokens strictly
// increase across successive holdings of a role, whichever members hold it,
// so a store that remembers the highest token it has seen for a role can
// reject the writes of a stale holder. Tokens are etcd revisions.
func Token(roleCtx context.Context) (int64, bool) {
	if roleCtx == nil {
		return 0, false
	}
	t, ok := roleCtx.Value(tokenKey{}).(int64)
	return t, ok
}

// Get returns the role's context if this member holds the role right now.
// It never blocks. Once the rink has stopped (or Shutdown has returned) it
// answers false: the stop cancelled every role context.
func (r *Rink) Get(role string) (context.Context, bool) {
	if role == "" {
		return nil, false
	}
	st := r.slots.load(wire.SlotOf(role, r.opts.slots))
	if st == nil || st.ctx == nil || st.ctx.Err() != nil {
		return nil, false
	}
	return st.handOut(), true
}

// AwaitRole blocks until this member holds role and returns the role's
// context, which is cancelled the moment the role is lost: when a new map
// moves it (cause ErrRoleMoved), when this member cannot confirm its lease
// (ErrFenced), on Shutdown (ErrShutdown) or when the rink stops because its
// etcd client was closed (ErrClientClosed, which wraps ErrShutdown);
// context.Cause tells which.
// Check ctx.Err() before each action on the role: it is exact even right
// after the process was stopped or stalled past its lease. That holds for
// the role context itself: a context derived from it (context.WithTimeout,
// an errgroup) learns of such a fence only when the role context's Done
// closes, a moment later, so check the role context, not the derived one.
//
// After Shutdown it returns at once a context already cancelled with cause
// ErrShutdown (ErrClientClosed if the client was closed: see Err), so a loop that runs work per holding stops like this (a role
// named "leader" is a role like any other, unrelated to Rank().Leader, the
// member that coordinates the rink):
//
//	for {
//		ctx := r.AwaitRole("leader")
//		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
//			return
//		}
//		lead(ctx) // returns when ctx is cancelled
//	}
//
// An empty role name is a programming error: the context comes back
// cancelled with cause ErrInvalidRole. AwaitRoleContext returns these as
// errors instead.
func (r *Rink) AwaitRole(role string) context.Context {
	ctx, err := r.AwaitRoleContext(context.Background(), role)
	if err != nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(err)
		return ctx
	}
	return ctx
}

// AwaitRoleContext is AwaitRole abandoned when ctx ends. It returns
// ErrInvalidRole for an empty role, ErrShutdown once the rink is shutting
// down (ErrClientClosed, which wraps it, when the rink stopped because its
// etcd client was closed: the error Err gives), or ctx's error.
func (r *Rink) AwaitRoleContext(ctx context.Context, role string) (context.Context, error) {
	st, err := r.awaitSlot(ctx, role)
	if err != nil {
		return nil, err
	}
	return st.handOut(), nil
}

// awaitSlot waits until this member holds role's slot and returns the
// slot's state.
func (r *Rink) awaitSlot(ctx context.Context, role string) (*slotState, error) {
	if role == "" {
		return nil, ErrInvalidRole
	}
	s := wire.SlotOf(role, r.opts.slots)
	r.load.noteRole(role, s)
	p := r.slots.at(s)
	for {
		select {
		case <-r.stopping:
			return nil, r.stopErr()
		default:
		}
		st := p.Load()
		if st == nil {
			st = &slotState{changed: make(chan struct{})}
			if !p.CompareAndSwap(nil, st) {
				continue
			}
		}
		if st.ctx != nil && st.ctx.Err() == nil {
			return st, nil
		}
		select {
		case <-st.changed:
		case <-r.stopping:
			return nil, r.stopErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Owner returns the member that owns role in the newest map this member has
// applied, for routing a request to the replica that handles it. ok is false
// while no member is ranked. The owner may not have started the role yet
// (it waits until the previous holder let go). Once the rink has stopped,
// or Shutdown has returned, ok is false: the member follows the rink's maps
// no more, and a router must not route by what it last saw.
func (r *Rink) Owner(role string) (member string, ok bool) {
	if r.over.Load() {
		return "", false
	}
	r.ownersMu.RLock() // (the table may be written in place: see applyInPlace)
	defer r.ownersMu.RUnlock()
	m := r.owners.Load()
	if m == nil || len(m.Table) == 0 || role == "" {
		return "", false
	}
	return m.Members[m.Table[wire.SlotOf(role, m.Slots)]], true
}

// Owners returns the members that hold role in the newest map this member
// has applied: its primary first (Owner's answer), then its secondaries,
// the one that has held it longest first (see WithReplicas). With one
// replica per slot it is Owner's answer alone. ok is false while no
// member is ranked, and, as Owner's, once the rink has stopped or Shutdown
// has returned. As with Owner, a member named may not have started its
// holding yet.
func (r *Rink) Owners(role string) (members []string, ok bool) {
	if r.over.Load() {
		return nil, false
	}
	r.ownersMu.RLock() // (the table may be written in place: see applyInPlace)
	defer r.ownersMu.RUnlock()
	m := r.owners.Load()
	if m == nil || len(m.Table) == 0 || role == "" {
		return nil, false
	}
	return m.ReplicaNames(wire.SlotOf(role, m.Slots)), true
}

// Rank is this member's place in the rink as of one map version.
type Rank struct {
	// Member is this member's name.
	Member string
	// Index is this member's 0-based rank, or -1 while it waits to be ranked
	// (or has not applied any map yet, is rejoining after a fence, or has
	// shut down). Once the rink has stopped, Index is -1, Size 0, Leader
	// empty, Waiting and Settled false; Version stays the last map's.
	Index int
	// Waiting reports that the map lists this member as waiting to be
	// ranked: the rink's leader (see Leader) knows it. The longest-waiting
	// member takes the index (and roles) of the next ranked member to
	// leave; the others wait for later departures or for the rebalance
	// delay. For a readiness
	// check use Ready, which a fence does not turn off.
	Waiting bool
	// Size is the number of ranked members.
	Size int
	// Version is the version of the map this view comes from (0: none yet).
	Version int64
	// Leader is the rink's leader, if known: the member currently elected
	// to coordinate the rink — it proclaims the maps, ranks waiting members
	// and summarises acknowledgements. It is unrelated to any role, a role
	// a service names "leader" included: the rink's leader holds only the
	// roles its slots give it, and Owner("leader") tells who holds that
	// role.
	Leader string
	// Settled reports that the rink is at rest, as this member last heard
	// from the rink's leader: this member is ranked and holds every slot
	// the map gives it, every live member has acknowledged the map, and
	// the leader plans no move after it — nobody waits to be ranked, no
	// move is announced (WithWarmup), and no round of balancing by load
	// would move a slot. Nothing moves in a settled rink until its
	// membership, the roles awaited or the load measured (AddLoad)
	// change. EventSettled marks each time it becomes true. Leaders of
	// releases before Settled never say so: in a rink they lead, Settled
	// stays false.
	Settled bool

	changed <-chan struct{}
}

// Changed returns a channel that is closed once a newer Rank is available.
// Waiting on it never holds the rink up:
//
//	for rk := r.Rank(); ; {
//		use(rk)
//		<-rk.Changed()
//		rk = r.Rank()
//	}
func (rk Rank) Changed() <-chan struct{} { return rk.changed }

type rankState struct {
	rank    Rank
	changed chan struct{}
}

// Rank returns this member's current view of its rank.
func (r *Rink) Rank() Rank { return r.rank.Load().rank }

// slotSet is a set of slot numbers, cheap to add to and to clear on the path
// of a handover (a map from slot to struct{} cost a member gaining 512
// slots about 10 µs). all yields the members in rising order; adding or
// removing slots while it runs is safe.
type slotSet struct {
	in []bool
	n  int
}

func newSlotSet(slots int) slotSet { return slotSet{in: make([]bool, slots)} }

func (p *slotSet) add(s int) {
	if !p.in[s] {
		p.in[s] = true
		p.n++
	}
}

func (p *slotSet) del(s int) {
	if p.in[s] {
		p.in[s] = false
		p.n--
	}
}

func (p *slotSet) clear() {
	if p.n > 0 {
		clear(p.in)
		p.n = 0
	}
}

func (p *slotSet) all() func(yield func(int) bool) {
	return func(yield func(int) bool) {
		for s := 0; s < len(p.in) && p.n > 0; s++ {
			if p.in[s] && !yield(s) {
				return
			}
		}
	}
}

// slotStates publishes every slot's state (see slotState) to the API, in
// chunks of slotChunk allocated as slots are first used: a member uses the
// few slots it holds or awaits, and a pointer per slot of the rink cost
// every member 128 KB at 16,384 slots (issue 25). Safe for concurrent use.
type slotStates struct {
	chunks []atomic.Pointer[[slotChunk]atomic.Pointer[slotState]]
}

const slotChunk = 64

func newSlotStates(slots int) slotStates {
	return slotStates{chunks: make([]atomic.Pointer[[slotChunk]atomic.Pointer[slotState]], (slots+slotChunk-1)/slotChunk)}
}

// load returns slot s's state, or nil.
func (p *slotStates) load(s int) *slotState {
	if s < 0 || s/slotChunk >= len(p.chunks) {
		return nil // (a secondary's, with one replica per slot: none)
	}
	if c := p.chunks[s/slotChunk].Load(); c != nil {
		return c[s%slotChunk].Load()
	}
	return nil
}

// at returns slot s's pointer, allocating its chunk if need be.
func (p *slotStates) at(s int) *atomic.Pointer[slotState] {
	c := p.chunks[s/slotChunk].Load()
	if c == nil {
		p.chunks[s/slotChunk].CompareAndSwap(nil, new([slotChunk]atomic.Pointer[slotState]))
		c = p.chunks[s/slotChunk].Load()
	}
	return &c[s%slotChunk]
}

// each calls f with every slot whose state is not nil, in slot order.
func (p *slotStates) each(f func(s int, st *slotState)) {
	for i := range p.chunks {
		c := p.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if st := c[j].Load(); st != nil {
				f(i*slotChunk+j, st)
			}
		}
	}
}
