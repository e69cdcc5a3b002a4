package rink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/simhook"
	"github.com/rink-go/rink/internal/wire"
)

// The simulator's driver of a member (see internal/simhook): the same core
// (step) and the same state machines (keeper, campaigner, ackWriter,
// aggregation, floorWriter) as the production driver, carried out on the
// simulator's goroutine, in its virtual time, against its model of etcd.
// Nothing here runs in production.
//
// Not simulated yet: Watch's role sets, and a join that gives up (the
// simulator's join retries until it joins; production's attempt ends at
// its join timeout). The load reporter, leaving with a warm-up, and
// functions on holdings are: the simulator enters them (Enter, as Run
// does) and makes them outlast their holdings, and Leave waits for the
// drains as Shutdown does (see awaitDrains).

func init() {
	simhook.NewMember = newSimMember
	simhook.Plants = plants
}

// simMember is one simulated member. Every callback it gives the
// simulator checks dead first: a crashed member acts on nothing.
type simMember struct {
	r     *Rink
	etcd  simhook.Etcd
	env   simhook.Env
	trace func(string, ...any)
	dead  bool
	steps int

	wakeGen int       // the core's wake-up scheduled last (see settle)
	wakeAt  time.Time // and when (zero: none)

	view, own *simFollower // the member's watches: its view, and its own key
	set       *RoleSet     // the role set the simulator watches with (nil: none)
	quietLeft bool         // it left without a hand-over, its key left to expire (see leaveNow)
	lost      *incarnation // the incarnation whose end the core was told of

	keep    *core.Keeper
	keepInc *incarnation
	keepGen int // the renewal in flight, or the wake-up scheduled last

	acks      *core.AckWriter
	acksBusy  bool
	acksWake  time.Time
	acksWatch func() // cancels the ack key's watch (nil: none)
	acksRev   int64  // the revision it watches from
	acksQueue []*etcdserverpb.WatchResponse
	acksMail  *core.AckReq // handed to the writer, not taken yet (see simEffects.ack)

	camp     *core.Campaigner
	campBusy bool
	campGen  int // the campaign's request in flight (see pumpCampaign)

	agg *simAggregator

	// drainWait, while leaving, is what to do once every drain has ended
	// (see awaitDrains); drainGen numbers its timer's wake-ups.
	drainWait func()
	drainGen  int

	// The load reporter (with simhook.Config.Load; nil without): the
	// inputs gathered for it, a write in flight, an early write pending.
	load      *core.LoadReporter
	loadIn    *loadInputs
	loadBusy  bool
	loadWoken bool
	loadTicks bool // its interval ticks

	// revoked holds the fenced leases this member revoked (see
	// simEffects.revokeLease and simWork.FenceHeld).
	revoked map[int64]bool
}

func newSimMember(cfg simhook.Config) (simhook.Member, error) {
	opts := make([]Option, 0, len(cfg.Options))
	for _, o := range cfg.Options {
		opt, ok := o.(Option)
		if !ok {
			return nil, fmt.Errorf("%w: %T is not an Option", ErrInvalidOption, o)
		}
		opts = append(opts, opt)
	}
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg.Plant != "" && !slices.Contains(plants, cfg.Plant) {
		return nil, fmt.Errorf("%w: no bug called %q to plant (there are %v)", ErrInvalidOption, cfg.Plant, plants)
	}
	if k := cfg.Knobs; k.HistChanges < 0 || k.Marks < 0 || k.Marks == 1 || k.Losses < 0 || k.Losses == 1 {
		return nil, fmt.Errorf("%w: knobs %+v (none negative, Marks and Losses not 1)", ErrInvalidOption, k)
	}
	o.member = cfg.Member
	if why := validName(o.member, false); why != "" {
		return nil, fmt.Errorf("%w: member name %q: %s", ErrInvalidName, o.member, why)
	}
	m := &simMember{etcd: cfg.Etcd, env: cfg.Env, trace: cfg.Trace}
	if m.trace == nil {
		m.trace = func(string, ...any) {}
	}
	r := newRink(cfg.Rink, o)
	r.nowFn, r.clockFn, r.simRand, r.plant, r.simKnobs = cfg.Env.Now, cfg.Env.Clock, cfg.Env.Rand(), cfg.Plant, cfg.Knobs
	r.simFx = simEffects{m}
	m.r = r
	m.acks = core.NewAckWriter(r.keys, o.member, r.log, core.NewBackoff(r.simRand))
	if cfg.Load {
		m.load, m.loadIn = core.NewLoadReporter(o.loadEvery, o.loadWindow), newLoadInputs()
	}
	r.simEarly = cfg.EarlyMoves
	r.simLeave = m.leaveNow
	r.simRound = cfg.LoadRound
	// The role set's rounds run on the simulator's goroutine, each as an
	// event of its own, and the member steps on what they sent it.
	r.simSet = func(round func()) {
		m.env.After(0, func() {
			if !m.dead {
				round()
				m.settle()
			}
		})
	}
	if warm := cfg.Warm; warm != nil {
		r.simWarm = func(v int64, slots []int, ready func()) {
			warm(v, slices.Clone(slots), func() {
				if m.dead {
					return
				}
				ready()
				m.settle()
			})
		}
	}
	if cfg.Assigned != nil {
		set, err := r.Watch(Handler{Assigned: cfg.Assigned, Revoked: cfg.Revoked, Secondary: cfg.Secondary}, cfg.Roles...)
		if err != nil {
			return nil, err
		}
		m.set = set
	}
	return m, nil
}

// Start reads the map, as New does, to pick the view, then joins.
func (m *simMember) Start() error {
	r := m.r
	if m.load != nil && !m.loadTicks {
		m.loadTicks = true // (once: Start is called again on a retry)
		m.env.After(m.load.Interval, m.loadTick)
	}
	r.publishRank()
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{wire.Get(r.keys.Map()), wire.Get(r.keys.Snapshot())}},
		func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead {
				return
			}
			if err != nil {
				m.env.After(m.backoff(), func() { _ = m.Start() })
				return
			}
			wide := true
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				var snap *mvccpb.KeyValue
				if s := resp.Responses[1].GetResponseRange().Kvs; len(s) > 0 {
					snap = s[0]
				}
				mp, err := wire.ReadMap(kvs[0], snap, &wire.Map{}, false, 0, 0, r.geometry())
				wide = err != nil || mp.Schema < 3
			}
			r.wideView.Store(wide)
			m.join(nil, func(inc *incarnation) {
				m.trace("joined: lease %x, key at %d", int64(inc.Lease), inc.CreateRev)
				r.initState()
				r.startIncarnation(inc)
				m.view = m.viewFollower(false)
				m.own = m.viewFollower(true)
				m.view.start()
				m.own.start()
				m.settle()
			})
		})
	return nil
}

// backoff draws a retry's wait.
func (m *simMember) backoff() time.Duration {
	return 50*time.Millisecond + time.Duration(m.r.simRand.Int64N(int64(200*time.Millisecond)))
}

// step hands the core one input, then settles what follows from it.
func (m *simMember) step(in input) {
	if m.dead || m.r.st.stopping {
		return
	}
	m.steps++
	if !m.r.step(in) {
		m.trace("stopped")
		return
	}
	m.settle()
}

// settle does what the production driver's goroutines would do after a
// step: the end of the incarnation, the inbox's mail, the aggregator's
// wake-up, the ack writer, and the core's next timer.
func (m *simMember) settle() {
	r := m.r
	for !m.dead && !r.st.stopping {
		if inc := r.st.inc; inc != nil && inc.ctx.Err() != nil && m.lost != inc {
			m.lost = inc
			m.closeLost(inc)
			m.step(input{kind: inLost})
			return
		}
		if ml := r.inbox.take(); !ml.empty() {
			m.step(input{kind: inMail, mail: ml})
			return
		}
		if m.agg != nil && m.agg.kicked() {
			continue
		}
		break
	}
	if m.dead || r.st.stopping {
		return
	}
	m.pumpAcks()
	m.loadKicked()
	if at, ok := r.st.NextTimer(); ok && !at.Equal(m.wakeAt) {
		m.wakeGen++
		gen := m.wakeGen
		m.wakeAt = at
		m.env.After(at.Sub(m.env.Now()), func() {
			if m.dead || gen != m.wakeGen {
				return
			}
			m.wakeAt = time.Time{}
			m.step(input{kind: inTimers, now: m.env.Now()})
		})
	} else if !ok {
		m.wakeGen++
		m.wakeAt = time.Time{}
	}
}

// closeLost closes inc.lost once: the keeper's end, as keep's return.
func (m *simMember) closeLost(inc *incarnation) {
	select {
	case <-inc.lost:
	default:
		close(inc.lost)
	}
}

// Crash stops the member at once, leaving its lease to expire.
func (m *simMember) Crash() {
	if m.dead {
		return
	}
	m.dead = true
	m.r.cancel() // every role context ends with the process
	m.trace("crashed")
}

// Leave shuts the member down as Shutdown does: with a warm-up
// (WithWarmup) it first says it is leaving and keeps serving until its
// heirs are ready, the leader tells it to leave, or its time is up (see
// startLeaving; the core then decides to leave, and leaveNow departs);
// else it departs at once (see leaveNow).
func (m *simMember) Leave() bool {
	r := m.r
	if m.dead || r.st.stopping || r.st.leaving {
		return !m.quietLeft
	}
	if r.opts.warmup > 0 {
		r.stopCtx = context.Background() // (as Shutdown's context, which never ends here)
		m.trace("shutdown: leaving with a warm-up")
		m.step(input{kind: inStop}) // (startLeaving, or at once leaveNow)
		return !m.quietLeft
	}
	m.leaveNow()
	return !m.quietLeft
}

// leaveNow shuts the member down as shutdown does: it leaves by handing
// its slots over in one transaction (see depart) when it is ranked in a
// usable map, or lets its lease expire in a quiet time, and revokes its
// lease; the process ends when etcd answers. Meanwhile the core handles
// nothing more, as the run goroutine does while it leaves.
func (m *simMember) leaveNow() {
	r := m.r
	if m.dead || r.st.stopping {
		return
	}
	inc := r.st.inc
	r.st.stopping = true
	if inc == nil || r.hushed() {
		// (Out of the rink, or in a quiet time: nothing to hand over, and
		// the key keeps our slots from others until the lease expires.)
		r.releaseAll()
		m.trace("leaves without a hand-over")
		m.quietLeft = true
		m.Crash()
		return
	}
	var d *handOver
	revoke := func() {
		r.releaseAll()
		if d != nil && d.keep {
			// (etcd went back, or we were fenced: the key may keep the
			// slots a restored map gives us from others until the lease
			// expires, see handOver.keep.)
			m.trace("leaves without revoking its lease: etcd went back, or fenced")
			m.quietLeft = true
			m.Crash()
			return
		}
		m.awaitDrains(func() {
			m.etcd.LeaseRevoke(&etcdserverpb.LeaseRevokeRequest{ID: int64(inc.Lease)}, func(_ *etcdserverpb.LeaseRevokeResponse, err error) {
				m.trace("left: lease revoked (%v)", err)
				m.Crash()
			})
		})
	}
	d, ok := r.newHandOver()
	if !ok {
		revoke()
		return
	}
	var send func()
	send = func() {
		txn, ok := d.next()
		if !ok {
			revoke()
			return
		}
		r.releaseAll()
		m.awaitDrains(func() {
			m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
				switch {
				case m.dead:
				case err != nil:
					m.trace("hand-over: %v", err)
					revoke()
				case d.answered(resp):
					m.trace("handed over")
					revoke()
				default:
					send()
				}
			})
		})
	}
	if !d.narrow {
		send()
		return
	}
	m.etcd.Txn(d.listTxn(), func(resp *etcdserverpb.TxnResponse, err error) {
		switch {
		case m.dead:
		case err != nil || !d.listed(resp):
			revoke()
		default:
			send()
		}
	})
}

// awaitDrains calls then once every drain has ended (see checkDrains), as
// Shutdown's awaitDrains waits before its departure and its revocation: a
// function's return (see simWork.Return) or the drain timer looks again.
func (m *simMember) awaitDrains(then func()) {
	r := m.r
	if m.dead {
		return
	}
	r.inbox.takeDrained() // (checkDrains counts the functions itself)
	if r.checkDrains() {
		m.drainWait = nil
		then()
		return
	}
	m.trace("leaving: waits for %d drains", len(r.st.draining))
	m.drainWait = then
	m.drainGen++
	gen := m.drainGen
	if r.st.TimerSet(core.TimerDrain) {
		m.env.After(r.st.At[core.TimerDrain].Sub(m.env.Now()), func() {
			if gen == m.drainGen && m.drainWait != nil {
				r.st.StopTimer(core.TimerDrain)
				m.awaitDrains(m.drainWait)
			}
		})
	}
}

// Enter starts a function on slot s's primary holding (see simhook).
func (m *simMember) Enter(s int) (simhook.Work, bool) {
	if m.dead {
		return nil, false
	}
	st := m.r.slots.load(s)
	if st == nil || st.ctx == nil || !st.enter() {
		return nil, false
	}
	rc, _ := st.ctx.(*roleContext)
	return &simWork{m: m, st: st, rc: rc}, true
}

// simWork is a function running on a holding, for the simulator.
type simWork struct {
	m    *simMember
	st   *slotState
	rc   *roleContext
	done bool
}

// Return ends the function: the holding counts one function less, and a
// drain waiting for it may end (see slotState.leave).
func (w *simWork) Return() {
	m := w.m
	if w.done || m.dead {
		return
	}
	w.done = true
	w.st.leave(m.r)
	if m.drainWait != nil {
		m.awaitDrains(m.drainWait)
		return
	}
	m.settle()
}

// Acts reports whether the function can still act (see simhook): its
// process runs, and its holding's incarnation has neither ended nor passed
// its lease's deadline.
func (w *simWork) Acts() bool {
	if w.done || w.m.dead {
		return false
	}
	if w.rc == nil {
		return true
	}
	return w.rc.inc.ctx.Err() == nil && (!w.rc.inc.expired() || w.m.r.planted(plantIgnoreFence))
}

// FenceHeld reports whether the function still runs on a holding a fence
// ended before its incarnation's deadline (on the member's clock), and
// the member has revoked that incarnation's lease (see simhook).
func (w *simWork) FenceHeld() bool {
	if w.done || w.m.dead || w.rc == nil {
		return false
	}
	inc := w.rc.inc
	return errors.Is(context.Cause(w.rc), ErrFenced) && !inc.expired() && w.m.revoked[inc.Lease]
}

// AddLoad records units of work done for role (see Rink.AddLoad).
func (m *simMember) AddLoad(role string, units float64) {
	if !m.dead {
		m.r.AddLoad(role, units)
	}
}

// loadTick is the reporter's load interval (see reportLoad): it folds in
// the units added, decides, and ticks again an interval later.
func (m *simMember) loadTick() {
	if m.dead || m.r.st.stopping {
		return
	}
	m.load.Tick(m.env.Now(), m.r.heldLoads(m.loadIn), m.loadIn.roleOf)
	m.reportLoad()
	m.env.After(m.load.Interval, m.loadTick)
}

// loadKicked wakes the reporter for an early write when the core asked
// for one (see loadAcc.wake): after the reporter's pause, one at a time.
func (m *simMember) loadKicked() {
	if m.load == nil || m.loadWoken {
		return
	}
	select {
	case <-m.r.load.kick:
	default:
		return
	}
	m.loadWoken = true
	m.env.After(m.load.WakeDelay(m.env.Now()), func() {
		m.loadWoken = false
		if m.dead || m.r.st.stopping {
			return
		}
		m.load.Woke(m.env.Now())
		m.reportLoad()
		m.loadKicked() // (a kick that came meanwhile)
	})
}

// reportLoad decides, and writes the summary when the reporter says so
// (one write at a time: a decision while one is in flight is skipped, as
// the production reporter blocks on its write).
func (m *simMember) reportLoad() {
	r := m.r
	inc := r.loadInc.Load()
	var ci *core.Inc
	live := false
	if inc != nil {
		ci, live = &inc.Inc, inc.ctx.Err() == nil
	}
	owned, byLoad := r.ownedSlots(m.loadIn)
	r.load.takeAgain(m.load)
	next := m.load.Next(ci, live, m.loadIn.roleOf, owned, byLoad)
	if next.Joined {
		r.emit(Event{Kind: EventLoadReported, Slot: -1})
	}
	if !next.Write || m.loadBusy {
		return
	}
	m.loadBusy = true
	m.etcd.Txn(core.LoadTxn(r.keys, r.opts.member, ci, next.Report), func(resp *etcdserverpb.TxnResponse, err error) {
		m.loadBusy = false
		if m.dead || err != nil || !resp.Succeeded {
			return
		}
		r.loadWritten(m.load, inc, next.Report)
	})
}

// Holding returns the slots whose holdings act now, with their tokens.
// Rank returns the member's rank (see Rink.Rank).
func (m *simMember) Rank() (index, size int) {
	if m.r.rank.Load() == nil {
		return -1, 0 // (not started yet: Start publishes it, as New does)
	}
	rk := m.r.Rank()
	return rk.Index, rk.Size
}

// Owner returns role's owner (see Rink.Owner).
func (m *simMember) Owner(role string) (string, bool) { return m.r.Owner(role) }

// Owners returns role's owners (see Rink.Owners).
func (m *simMember) Owners(role string) ([]string, bool) { return m.r.Owners(role) }

// View returns the leader, map version and Settled of the member's rank
// (see Rink.Rank).
func (m *simMember) View() (string, int64, bool) {
	if m.r.rank.Load() == nil {
		return "", 0, false // (not started yet, as in Rank)
	}
	rk := m.r.Rank()
	return rk.Leader, rk.Version, rk.Settled
}

func (m *simMember) Holding() map[int]int64 {
	held := map[int]int64{}
	if m.dead {
		return held
	}
	for s := range m.r.opts.slots {
		if st := m.r.slots.load(s); st != nil && st.ctx != nil && st.ctx.Err() == nil {
			t, _ := Token(st.ctx)
			held[s] = t
		}
	}
	return held
}

// HoldingSecondaries returns the slots the member holds as a secondary
// whose holdings' contexts have not ended (see Holding; none with one
// replica per slot).
func (m *simMember) HoldingSecondaries() map[int]bool {
	held := map[int]bool{}
	if m.dead {
		return held
	}
	m.r.secs.each(func(s int, st *slotState) {
		if st.ctx != nil && st.ctx.Err() == nil {
			held[s] = true
		}
	})
	return held
}

// Describe tells what the member's core knows, for a failing history.
func (m *simMember) Describe() string {
	r := m.r
	st := &r.st
	if m.dead {
		return "dead"
	}
	var pending []string
	for s := range st.pending.all() {
		pending = append(pending, fmt.Sprintf("%d(gain %d)", s, st.mine.of(s).gain))
	}
	low, ok := int64(0), false
	if st.inc != nil {
		if st.view.wide {
			_, ok = r.others()
		} else {
			low, ok = r.narrowBarrier()
		}
	}
	fl, _ := json.Marshal(st.floor)
	var inc string
	if st.inc != nil {
		me := st.members[r.opts.member]
		inc = fmt.Sprintf("lease %x key %d/%d (view: %d/%d), selfSeen %v", int64(st.inc.Lease), st.inc.CreateRev, st.inc.BoundRev, me.createRev, me.modRev, st.selfSeen)
	}
	return fmt.Sprintf("map v%d seq %d view %d lineage %d, %s, joins %d, wide %v, selfCheck %d, ghosts %d, hushed %v, pending %v, barrier low %d ok %v, acked %d, floor %s",
		st.cur.Version, st.curSeq, st.curView, st.lineage, inc, st.joins, st.view.wide, st.view.selfCheck, len(st.ghosts), r.hushed(), pending, low, ok, st.acked.seq, fl)
}

// Holds reports whether the member acts on slot s now (see simhook).
func (m *simMember) Holds(s int) bool {
	if m.dead {
		return false
	}
	return holdingActs(m.r, m.r.slots.load(s))
}

// holdingActs reports whether a published holding (a primary's or a
// secondary's) acts now: its context has not ended and, as rc.Err says
// without its fence, its lease's deadline has not passed (unless the
// fence is planted away).
func holdingActs(r *Rink, st *slotState) bool {
	if st == nil || st.ctx == nil {
		return false
	}
	if rc, ok := st.ctx.(*roleContext); ok {
		return rc.Context.Err() == nil && (!rc.inc.expired() || r.planted(plantIgnoreFence))
	}
	return st.ctx.Err() == nil
}

// HoldsSecondary reports whether the member acts on slot s as a secondary
// now, as Holds does for its primary: the published secondary state's
// context (see startSecondary) has not ended, and the lease's deadline has
// not passed.
func (m *simMember) HoldsSecondary(s int) bool {
	if m.dead {
		return false
	}
	return holdingActs(m.r, m.r.secs.load(s))
}

// Unfenced reports whether slot s's holding is past its lease's deadline
// with its context still open (see simhook).
func (m *simMember) Unfenced(s int) bool {
	if m.dead {
		return false
	}
	st := m.r.slots.load(s)
	if st == nil || st.ctx == nil {
		return false
	}
	rc, ok := st.ctx.(*roleContext)
	return ok && rc.Context.Err() == nil && rc.inc.expired()
}

// Trusted returns the current incarnation's lease, whether its deadline
// has not passed, and whether it is the process's first (see simhook).
func (m *simMember) Trusted() (int64, bool, bool) {
	inc := m.r.st.inc
	if m.dead || inc == nil {
		return 0, false, false
	}
	return int64(inc.Lease), !inc.expired(), m.r.st.joins == 1
}

// Steps counts the inputs the core handled.
func (m *simMember) Steps() int { return m.steps }

// Ranked reports whether the applied map ranks the member.
func (m *simMember) Ranked() bool {
	return !m.dead && m.r.st.inc != nil && m.r.st.cur.Index(m.r.opts.member) >= 0
}

// Joined reports whether the member has joined the rink once.
func (m *simMember) Joined() bool { return m.r.st.joins > 0 }

// join carries out what a core.Joiner asks (see Rink.joinWith) against
// the model: it grants a lease and creates the member key, or, with old,
// rebinds old's key first; then it calls then with the new incarnation.
// A failed attempt is tried again after the joiner's wait, as rejoin does.
func (m *simMember) join(old *incarnation, then func(*incarnation)) {
	r := m.r
	var oi *core.Inc
	if old != nil {
		oi = &old.Inc
	}
	m.joinWith(core.NewJoiner(r.opts.ttl, r.keys.Member(r.opts.member), oi, r.joinerTxn, r.newBackoff()), then)
}

func (m *simMember) joinWith(j *core.Joiner, then func(*incarnation)) {
	r := m.r
	var do func(step core.JoinStep)
	do = func(step core.JoinStep) {
		if m.dead {
			return
		}
		for _, id := range step.Revoke {
			m.etcd.LeaseRevoke(&etcdserverpb.LeaseRevokeRequest{ID: id}, func(*etcdserverpb.LeaseRevokeResponse, error) {})
		}
		if lease := step.KeyGone; lease != 0 {
			m.trace("own member key gone: joining as a newcomer")
			r.inbox.send(func(ml *mail) { ml.keyGone = clientv3.LeaseID(lease) })
			m.settle()
		}
		switch {
		case step.Joined != nil:
			then(m.joined(step.Joined))
		case step.Again:
			m.env.After(step.Wait, func() { do(j.Start(m.env.Clock())) })
		case step.Err != nil:
			m.trace("join: %v", step.Err)
			m.env.After(j.Retry(), func() { do(j.Start(m.env.Clock())) })
		case step.Grant:
			m.etcd.LeaseGrant(&etcdserverpb.LeaseGrantRequest{TTL: j.TTL()}, func(grant *etcdserverpb.LeaseGrantResponse, err error) {
				if err != nil {
					do(j.Granted(0, 0, err))
					return
				}
				do(j.Granted(grant.ID, grant.TTL, nil))
			})
		case step.Txn != nil:
			m.etcd.Txn(step.Txn, func(resp *etcdserverpb.TxnResponse, err error) { do(j.Answered(resp, err, m.env.Clock())) })
		case step.AwaitDeleted != nil:
			m.awaitDeleted(step.AwaitDeleted.Key, step.AwaitDeleted.Rev, func(err error) { do(j.Deleted(err)) })
		}
	}
	do(j.Start(m.env.Clock()))
}

// joined begins the incarnation a join or a resume made (see Rink.joined).
func (m *simMember) joined(in *core.Joined) *incarnation {
	inc := m.begin(clientv3.LeaseID(in.Lease), in.CreateRev, in.BoundRev, in.Sent, in.Deadline)
	if !in.Resumed {
		first := firstLoad()
		inc.JoinLoad, inc.Hint = &first, m.r.hintOf(in.Resp)
	}
	return inc
}

// awaitDeleted calls done once key is deleted after rev (nil), or the
// watch breaks (see waitDeleted).
func (m *simMember) awaitDeleted(key string, rev int64, done func(error)) {
	m.awaitChange(&etcdserverpb.WatchCreateRequest{Key: []byte(key), StartRevision: rev + 1,
		Filters: []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT}}, func() bool { return true }, done)
}

// awaitChange watches as r asks and calls done once, at its first event
// (nil) or when it breaks, while live holds; then it ends the watch.
func (m *simMember) awaitChange(r *etcdserverpb.WatchCreateRequest, live func() bool, done func(error)) {
	var cancel func()
	ended := false
	cancel = m.etcd.Watch(r, func(wr *etcdserverpb.WatchResponse) {
		if m.dead || ended || !live() {
			return
		}
		var err error
		switch {
		case wr.Canceled:
			err = errors.New("sim: watch canceled")
		case len(wr.Events) == 0:
			return
		}
		ended = true
		if cancel != nil {
			cancel()
		}
		done(err)
	})
}

// begin makes an incarnation and starts its keeper (see Rink.begin).
func (m *simMember) begin(lease clientv3.LeaseID, createRev, boundRev, sent, deadline int64) *incarnation {
	inc := &incarnation{Inc: core.Inc{Lease: int64(lease), CreateRev: createRev, BoundRev: boundRev}, lost: make(chan struct{}), clock: m.env.Clock}
	inc.deadline.Store(deadline)
	inc.ctx, inc.cancel = context.WithCancelCause(m.r.ctx)
	inc.Done, inc.Owner = inc.ctx.Done(), inc
	m.keep, m.keepInc = core.NewKeeper(m.r.opts.ttl, sent, deadline), inc
	m.keepGen++
	m.pumpKeeper()
	return inc
}
