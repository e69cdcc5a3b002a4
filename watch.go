package rink

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rink-go/rink/internal/wire"
)

// Handler receives the assignments of a RoleSet (see Watch). Its functions
// run on the set's own goroutine, one at a time, in the order the changes
// happened: keep them short, or hand the work to goroutines of your own.
type Handler struct {
	// Assigned is called when this member starts holding role, with the
	// role's context (cancelled the moment the role is lost, as AwaitRole's
	// is). Required.
	Assigned func(ctx context.Context, role string)
	// Revoked is called when this member stops holding role (its context
	// is cancelled by then), when role is removed from the set, and when
	// the set is closed. With WithDrainTimeout the role's heir starts once
	// Revoked has returned, so Revoked may finish the role's work first:
	// flush, hand over state, close connections. Optional.
	Revoked func(role string)
	// Warm is called when role is about to move to this member in a
	// planned move (see WithWarmup), while its current holder still
	// serves it: load its state, open its connections. Returning says
	// this member is ready for it. ctx ends when the announcement does:
	// the move is made (Assigned follows, once the previous holder has
	// let go), withdrawn, or announced anew with other slots (Warm is then
	// called again: make it cheap to repeat), or the set is closed. Warm
	// calls run each on a goroutine of their own; EventIncoming names the
	// current holder. Optional: without it this member is ready at once.
	Warm func(ctx context.Context, role string)
	// Secondary is called, on a goroutine of its own, when this member
	// starts holding role as a secondary (see WithReplicas): one of the
	// members that keep a warm copy of the role's state beside its
	// primary, of which the one that has held it longest takes the role
	// over when the primary crashes or leaves without an heir. ctx ends
	// when that holding does: the member leaves the role's replicas
	// (context.Cause is ErrRoleMoved), holds its primary now (ErrPromoted:
	// Assigned follows, and the copy kept warm is what the primary serves
	// from), is fenced or shuts down, or the role is removed from the set,
	// or the set is closed. Secondaries get no fencing token: only the
	// primary acts on the role's state. Secondary runs beside the set's
	// other calls: when this member is promoted, Assigned may be called
	// while Secondary has not returned yet (its ctx has ended by then);
	// hand the warm copy over between the two. Close waits for Secondary
	// calls to return. Optional.
	Secondary func(ctx context.Context, role string)
}

// RoleSet is a set of roles whose assignments to this member a Handler
// receives (see Watch). Its methods are safe for concurrent use.
type RoleSet struct {
	r *Rink
	h Handler

	bits []atomic.Uint64 // slots with roles in the set, read by the run goroutine

	mu      sync.Mutex
	bySlot  map[int][]string // the set's roles by slot
	queue   []int            // slots to look at again
	closed  bool
	warmReq *warmReq // an announcement to warm up for
	wake    chan struct{}
	stopped chan struct{} // closed once the last round (see dispatcher.round) has run

	d *dispatcher // what the handler was told (the set's goroutine, or the simulator's rounds)
	// roundDue: in the simulator (Rink.simSet), a round is scheduled and
	// has not run yet (simulator's goroutine only).
	roundDue bool
}

// warmReq asks a set to warm up the roles of slots for the announcement
// of version v.
type warmReq struct {
	v     int64
	slots []int
}

// warmUp asks the set to warm up for an announcement, replacing any
// earlier one (run goroutine). The set answers through the inbox (warmed).
func (s *RoleSet) warmUp(v int64, slots []int) {
	s.mu.Lock()
	s.warmReq = &warmReq{v: v, slots: slots}
	s.mu.Unlock()
	s.signal()
}

// startWarm calls Warm for every role of the set in req's slots, each on a
// goroutine of its own counted in wg, and answers once all have returned.
// It returns the function that cancels them.
func (s *RoleSet) startWarm(req *warmReq, wg *sync.WaitGroup) context.CancelFunc {
	r := s.r
	answer := func() { r.inbox.send(func(m *mail) { m.warmed = append(m.warmed, req.v) }) }
	if r.simSet != nil {
		// The simulator warms up the slots of the set's roles in virtual
		// time, and says when it is ready (see simhook.Config.Warm);
		// without a warm-up, the set is ready at once.
		if r.simWarm == nil {
			answer()
			return func() {}
		}
		var slots []int
		s.mu.Lock()
		for _, slot := range req.slots {
			if len(s.bySlot[slot]) > 0 {
				slots = append(slots, slot)
			}
		}
		s.mu.Unlock()
		r.simWarm(req.v, slots, answer)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var roles []string
	if s.h.Warm != nil {
		s.mu.Lock()
		for _, slot := range req.slots {
			roles = append(roles, s.bySlot[slot]...)
		}
		s.mu.Unlock()
	}
	var calls sync.WaitGroup
	for _, role := range roles {
		calls.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer calls.Done()
			s.h.Warm(ctx, role)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		calls.Wait()
		answer()
	}()
	return cancel
}

// Watch calls h.Assigned for each of roles (and those added later with
// Add) when this member starts holding it, and h.Revoked when it stops:
// the callbacks of client-go's leader election and of Kafka's rebalance
// listener, for any number of roles, at no cost for the roles this member
// does not hold (a map entry per role, no goroutine). A role already held
// is assigned at once. Watch returns ErrNilFunc when h.Assigned is nil,
// ErrInvalidRole for an empty role, and, once the rink is shutting down,
// no set and ErrShutdown (ErrClientClosed if its etcd client was closed:
// the error Err gives). Close the set when done with it.
//
// When the rink stops, a set's roles are revoked (Revoked is called for
// each role assigned) and Add returns the stop's error; close the set.
func (r *Rink) Watch(h Handler, roles ...string) (*RoleSet, error) {
	if h.Assigned == nil {
		return nil, ErrNilFunc
	}
	if slices.Contains(roles, "") {
		return nil, ErrInvalidRole
	}
	select {
	case <-r.stopping:
		return nil, r.stopErr()
	default:
	}
	s := &RoleSet{r: r, h: h, bits: make([]atomic.Uint64, (r.opts.slots+63)/64), bySlot: map[int][]string{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	s.d = newDispatcher(s)
	r.setsMu.Lock()
	r.sets = append(r.sets, s)
	r.publishSets()
	r.setsMu.Unlock()
	if err := s.Add(roles...); err != nil {
		r.dropSet(s) // (the rink began to stop meanwhile)
		return nil, err
	}
	if r.simSet == nil {
		go s.dispatch()
	}
	return s, nil
}

// Add adds roles to the set; those this member holds are assigned at
// once. It returns ErrInvalidRole for an empty role (adding none),
// ErrShutdown once the set is closed, and, once the rink is shutting down,
// the error that AwaitRoleContext returns then (ErrShutdown, or
// ErrClientClosed: see Rink.Err).
func (s *RoleSet) Add(roles ...string) error {
	if slices.Contains(roles, "") {
		return ErrInvalidRole
	}
	r := s.r
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrShutdown
	}
	select {
	case <-r.stopping:
		return r.stopErr()
	default:
	}
	for _, role := range roles {
		slot := wire.SlotOf(role, r.opts.slots)
		if slices.Contains(s.bySlot[slot], role) {
			continue
		}
		r.load.noteRole(role, slot)
		s.bySlot[slot] = append(s.bySlot[slot], role)
		s.bits[slot/64].Or(1 << (slot % 64))
		s.queue = append(s.queue, slot)
	}
	s.signal()
	return nil
}

// Remove removes roles from the set; h.Revoked is called for those that
// were assigned.
func (s *RoleSet) Remove(roles ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, role := range roles {
		slot := wire.SlotOf(role, s.r.opts.slots)
		rs := s.bySlot[slot]
		i := slices.Index(rs, role)
		if i < 0 {
			continue
		}
		rs = slices.Delete(rs, i, i+1)
		if len(rs) == 0 {
			delete(s.bySlot, slot)
			s.bits[slot/64].And(^uint64(1 << (slot % 64)))
		} else {
			s.bySlot[slot] = rs
		}
		s.queue = append(s.queue, slot)
	}
	s.signal()
}

// Held returns the roles of the set that this member holds right now.
func (s *RoleSet) Held() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var held []string
	for slot, rs := range s.bySlot {
		if st := s.r.slots.load(slot); st != nil && st.ctx != nil && st.ctx.Err() == nil {
			held = append(held, rs...)
		}
	}
	slices.Sort(held)
	return held
}

// Close stops the set: h.Revoked is called for every role still assigned,
// and Close returns once the handler's functions, Warm calls included,
// have returned. Do not call it from a handler function: it would wait for
// itself.
func (s *RoleSet) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.signal()
	}
	s.mu.Unlock()
	if s.r.simSet != nil {
		s.simRound() // (the simulator's goroutine: the round that stops the set runs now)
	}
	<-s.stopped
	s.r.dropSet(s)
}

// dropSet removes s from the rink's sets.
func (r *Rink) dropSet(s *RoleSet) {
	r.setsMu.Lock()
	defer r.setsMu.Unlock()
	if i := slices.Index(r.sets, s); i >= 0 {
		r.sets = slices.Delete(r.sets, i, i+1)
		r.publishSets()
	}
}

// signal asks for a round: it wakes the set's goroutine, or, in the
// simulator, schedules one on its goroutine.
func (s *RoleSet) signal() {
	if sched := s.r.simSet; sched != nil {
		if !s.roundDue {
			s.roundDue = true
			sched(s.simRound)
		}
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// simRound runs a round in the simulator, unless the set has stopped.
func (s *RoleSet) simRound() {
	s.roundDue = false
	select {
	case <-s.stopped:
		return
	default:
	}
	if s.d.round() {
		close(s.stopped)
	}
}

// has reports whether the set has roles in slot (for the run goroutine).
func (s *RoleSet) has(slot int) bool { return s.bits[slot/64].Load()&(1<<(slot%64)) != 0 }

// changed queues slot, whose holding began or ended (run goroutine).
func (s *RoleSet) changed(slot int) {
	s.mu.Lock()
	s.queue = append(s.queue, slot)
	s.mu.Unlock()
	s.signal()
}

// dispatch is the set's goroutine: it runs a round each time it is
// woken, until one stops the set.
func (s *RoleSet) dispatch() {
	defer close(s.stopped)
	for {
		select {
		case <-s.wake:
		case <-s.r.done:
		}
		if s.d.round() {
			return
		}
	}
}

// dispatcher is what a set's handler was told: the holdings it runs on,
// the roles Assigned was called for, the Secondary calls and the Warm
// calls under way. Its rounds run one at a time: on the set's goroutine,
// or on the simulator's.
//
// Invariants: assigned has an entry only for a slot of active, and every
// role in it had Assigned called and Revoked not since; a slot of active
// is a holding entered (slotState.enter) and not yet left.
type dispatcher struct {
	s        *RoleSet
	active   map[int]*slotState // holdings counted as running on (see enter)
	assigned map[int][]string   // roles Assigned was called for, by slot
	sec      *secondaryCalls
	warming  sync.WaitGroup
	stopWarm context.CancelFunc
}

func newDispatcher(s *RoleSet) *dispatcher {
	sec := newSecondaryCalls(s.h.Secondary)
	if s.r.simSet != nil {
		sec.spawn = func(f func()) { f() } // (the simulator's handler records the call and returns)
	}
	return &dispatcher{s: s, active: map[int]*slotState{}, assigned: map[int][]string{}, sec: sec, stopWarm: func() {}}
}

// revoke calls Revoked for roles.
func (d *dispatcher) revoke(roles []string) {
	if d.s.h.Revoked != nil {
		for _, role := range roles {
			d.s.h.Revoked(role)
		}
	}
}

// end revokes slot's roles and leaves its holding.
func (d *dispatcher) end(slot int) {
	d.revoke(d.assigned[slot])
	d.active[slot].leave(d.s.r)
	delete(d.active, slot)
	delete(d.assigned, slot)
}

// round calls the handler for what changed since the last one: the slots
// queued, a warm-up asked for, the set closed or the rink stopped. It
// reports whether the set has stopped: every role revoked, and every
// Secondary and Warm call returned.
func (d *dispatcher) round() (stopped bool) {
	s, r := d.s, d.s.r
	s.mu.Lock()
	queue, closed, warm := s.queue, s.closed, s.warmReq
	s.queue, s.warmReq = nil, nil
	s.mu.Unlock()
	if warm != nil && !closed {
		d.stopWarm()
		d.stopWarm = s.startWarm(warm, &d.warming)
	}
	select {
	case <-r.done:
		closed = true // the rink has stopped: every holding has ended
	default:
	}
	if closed {
		for slot := range d.active {
			d.end(slot)
		}
		d.sec.stop()
		if warm != nil {
			// Counted among the sets to warm up: answer, with nothing
			// to warm.
			v := warm.v
			r.inbox.send(func(m *mail) { m.warmed = append(m.warmed, v) })
		}
		d.stopWarm()
		d.warming.Wait()
		return true
	}
	slices.Sort(queue)
	for _, slot := range slices.Compact(queue) {
		d.look(slot)
	}
	return false
}

// look brings the handler in line with slot's holding and the set's roles
// in it.
func (d *dispatcher) look(slot int) {
	s, r := d.s, d.s.r
	cur := r.slots.load(slot)
	held := cur != nil && cur.ctx != nil && cur.ctx.Err() == nil
	if a := d.active[slot]; a != nil && (a != cur || !held) {
		d.end(slot) // the holding ended
	}
	s.mu.Lock()
	want := slices.Clone(s.bySlot[slot])
	s.mu.Unlock()
	d.sec.update(slot, r.secs.load(slot), want)
	if !held {
		if len(want) > 0 && cur == nil {
			// Awaited: the run goroutine starts it among the first.
			r.slots.at(slot).CompareAndSwap(nil, &slotState{changed: make(chan struct{})})
		}
		return
	}
	if d.active[slot] == nil {
		if len(want) == 0 || !cur.enter() {
			return // (ended meanwhile: its release queues the slot again)
		}
		d.active[slot] = cur
	}
	var gone []string
	keep := d.assigned[slot][:0:0]
	for _, role := range d.assigned[slot] {
		if slices.Contains(want, role) {
			keep = append(keep, role)
		} else {
			gone = append(gone, role)
		}
	}
	d.revoke(gone)
	ctx := cur.handOut()
	for _, role := range want {
		if !slices.Contains(keep, role) {
			keep = append(keep, role)
			s.h.Assigned(ctx, role)
		}
	}
	d.assigned[slot] = keep
	if len(keep) == 0 {
		d.end(slot)
	}
}

// secondaryCalls runs a RoleSet's Handler.Secondary: one call per role
// held as a secondary, on a goroutine of its own, with a context of its
// own derived from the holding's (dispatch goroutine only).
type secondaryCalls struct {
	f      func(ctx context.Context, role string)
	spawn  func(func()) // runs a call (on a goroutine of its own but in the simulator)
	wg     sync.WaitGroup
	active map[int]*slotState                    // the secondary holding calls run for, by slot
	calls  map[int]map[string]context.CancelFunc // by slot, by role
}

func newSecondaryCalls(f func(ctx context.Context, role string)) *secondaryCalls {
	return &secondaryCalls{f: f, spawn: func(f func()) { go f() }, active: map[int]*slotState{}, calls: map[int]map[string]context.CancelFunc{}}
}

// update brings slot's calls in line with its published secondary state
// cur and the set's roles in it, want.
func (c *secondaryCalls) update(slot int, cur *slotState, want []string) {
	if c.f == nil {
		return
	}
	held := cur != nil && cur.ctx != nil && cur.ctx.Err() == nil
	if a := c.active[slot]; a != nil && (a != cur || !held || len(want) == 0) {
		c.end(slot)
	}
	if !held || len(want) == 0 {
		return
	}
	c.active[slot] = cur
	calls := c.calls[slot]
	if calls == nil {
		calls = map[string]context.CancelFunc{}
		c.calls[slot] = calls
	}
	for role, cancel := range calls {
		if !slices.Contains(want, role) {
			cancel() // removed from the set
			delete(calls, role)
		}
	}
	for _, role := range want {
		if _, ok := calls[role]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(cur.ctx)
		if rc, ok := cur.ctx.(*roleContext); ok {
			// Its Err checks the lease's deadline as the holding's does: a
			// process stopped past it acts on nothing after it resumes,
			// before its keeper wakes to fence (a storm found a member
			// acting as a secondary 1 to 4 ms after SIGCONT, beside the
			// secondary that had taken its place).
			ctx = &roleContext{Context: ctx, r: rc.r, inc: rc.inc}
		}
		calls[role] = cancel
		c.wg.Add(1)
		c.spawn(func() {
			defer c.wg.Done()
			c.f(ctx, role)
		})
	}
}

// end cancels slot's calls.
func (c *secondaryCalls) end(slot int) {
	for _, cancel := range c.calls[slot] {
		cancel()
	}
	delete(c.calls, slot)
	delete(c.active, slot)
}

// stop cancels every call and waits for them to return.
func (c *secondaryCalls) stop() {
	for slot := range c.active {
		c.end(slot)
	}
	c.wg.Wait()
}

// publishSets publishes r.sets for the run goroutine (setsMu held).
func (r *Rink) publishSets() {
	sets := slices.Clone(r.sets)
	r.setsPub.Store(&sets)
}

// notifySets tells the role sets with roles in slot that its holding
// began or ended (run goroutine).
func (r *Rink) notifySets(slot int) {
	sets := r.setsPub.Load()
	if sets == nil {
		return
	}
	for _, s := range *sets {
		if s.has(slot) {
			s.changed(slot)
		}
	}
}
