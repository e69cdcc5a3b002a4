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
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink/internal/simhook"
)

// The simulator's driver of a member (see internal/simhook): the same core
// (step) and the same state machines (keeper, campaigner, ackWriter,
// aggregation, floorWriter) as the production driver, carried out on the
// simulator's goroutine, in its virtual time, against its model of etcd.
// Nothing here runs in production.
//
// Not simulated yet: the graceful departure (Leave revokes the lease), the
// load reporter, leaving with a warm-up, and Watch's role sets.

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
	lost      *incarnation // the incarnation whose end the core was told of

	keep    *keeper
	keepInc *incarnation
	keepGen int // the renewal in flight, or the wake-up scheduled last

	acks      *ackWriter
	acksBusy  bool
	acksWake  time.Time
	acksWatch func() // cancels the ack key's watch (nil: none)
	acksRev   int64  // the revision it watches from
	acksQueue []*etcdserverpb.WatchResponse
	acksMail  *ackReq // handed to the writer, not taken yet (see simEffects.ack)

	camp     *campaigner
	campBusy bool

	agg *simAggregator
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
	o.member = cfg.Member
	if why := validName(o.member, false); why != "" {
		return nil, fmt.Errorf("%w: member name %q: %s", ErrInvalidName, o.member, why)
	}
	m := &simMember{etcd: cfg.Etcd, env: cfg.Env, trace: cfg.Trace}
	if m.trace == nil {
		m.trace = func(string, ...any) {}
	}
	r := &Rink{
		name:      cfg.Rink,
		opts:      o,
		log:       o.log.With(zap.String("rink", cfg.Rink), zap.String("member", o.member)),
		keys:      newKeys(cfg.Rink),
		slots:     newSlotStates(o.slots),
		stopping:  make(chan struct{}),
		done:      make(chan struct{}),
		handoffCh: make(chan input),
		relistCh:  make(chan struct{}, 1),
		ackCh:     make(chan ackReq, 1),
		inbox:     newInbox(),
		load:      newLoadAcc(o.slots),
		nowFn:     cfg.Env.Now,
		clockFn:   cfg.Env.Clock,
		simRand:   cfg.Env.Rand(),
		plant:     cfg.Plant,
	}
	r.simFx = simEffects{m}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	m.r = r
	m.acks = newAckWriter(r.keys, o.member, r.log)
	m.acks.b.rnd = r.simRand
	return m, nil
}

// Start reads the map, as New does, to pick the view, then joins.
func (m *simMember) Start() error {
	r := m.r
	r.publishRank()
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{getOp(r.keys.rankMap()), getOp(r.keys.snapshot())}},
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
				mp, err := readMap(kvs[0], snap, &rankMap{}, false, 0, 0, r.opts.slots)
				wide = err != nil || mp.Schema < 3
			}
			r.wideView.Store(wide)
			m.join(nil, func(inc *incarnation) {
				m.trace("joined: lease %x, key at %d", int64(inc.lease), inc.createRev)
				r.initState()
				r.startIncarnation(inc)
				m.view = m.newFollower(false)
				m.own = m.newFollower(true)
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
	if at, ok := r.st.nextTimer(); ok && !at.Equal(m.wakeAt) {
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

// Leave revokes the lease, then stops.
func (m *simMember) Leave() {
	if m.dead {
		return
	}
	if inc := m.r.st.inc; inc != nil {
		m.etcd.LeaseRevoke(&etcdserverpb.LeaseRevokeRequest{ID: int64(inc.lease)}, func(*etcdserverpb.LeaseRevokeResponse, error) {})
	}
	m.Crash()
}

// Holding returns the slots whose holdings act now, with their tokens.
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
		inc = fmt.Sprintf("lease %x key %d/%d (view: %d/%d), selfSeen %v", int64(st.inc.lease), st.inc.createRev, st.inc.boundRev, me.createRev, me.modRev, st.selfSeen)
	}
	return fmt.Sprintf("map v%d seq %d view %d lineage %d, %s, joins %d, wide %v, selfCheck %d, ghosts %d, hushed %v, pending %v, barrier low %d ok %v, acked %d, floor %s",
		st.cur.Version, st.curSeq, st.curView, st.lineage, inc, st.joins, st.view.wide, st.view.selfCheck, len(st.ghosts), r.hushed(), pending, low, ok, st.acked.seq, fl)
}

// Holds reports whether the member acts on slot s now (see simhook).
func (m *simMember) Holds(s int) bool {
	if m.dead {
		return false
	}
	st := m.r.slots.load(s)
	if st == nil || st.ctx == nil {
		return false
	}
	if rc, ok := st.ctx.(*roleContext); ok {
		// As rc.Err says, without its fence: past the deadline, nothing
		// (unless the fence is planted away).
		return rc.Context.Err() == nil && (!rc.inc.expired() || m.r.planted(plantIgnoreFence))
	}
	return st.ctx.Err() == nil
}

// Steps counts the inputs the core handled.
func (m *simMember) Steps() int { return m.steps }

// Ranked reports whether the applied map ranks the member.
func (m *simMember) Ranked() bool {
	return !m.dead && m.r.st.inc != nil && m.r.st.cur.index(m.r.opts.member) >= 0
}

// join grants a lease and creates the member key (see joinAfter), or,
// with old, rebinds old's key first (see resume); then it calls then with
// the new incarnation.
func (m *simMember) join(old *incarnation, then func(*incarnation)) {
	r := m.r
	retry := func() { m.env.After(m.backoff(), func() { m.join(old, then) }) }
	sent := m.env.Clock()
	m.etcd.LeaseGrant(&etcdserverpb.LeaseGrantRequest{TTL: int64(r.opts.ttl / time.Second)}, func(grant *etcdserverpb.LeaseGrantResponse, err error) {
		if m.dead {
			return
		}
		if err != nil {
			retry()
			return
		}
		revoke := func(id int64) {
			m.etcd.LeaseRevoke(&etcdserverpb.LeaseRevokeRequest{ID: id}, func(*etcdserverpb.LeaseRevokeResponse, error) {})
		}
		txn, first := r.joinTxn(grant.ID)
		if old != nil {
			txn = r.resumeTxn(old, grant.ID)
		}
		m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead {
				return
			}
			if err != nil || !resp.Succeeded {
				revoke(grant.ID)
				if old != nil && err == nil {
					revoke(int64(old.lease))
					old = nil // its key is gone: join anew
					m.trace("own member key gone: joining as a newcomer")
				}
				retry()
				return
			}
			deadline := deadlineAfter(sent, grant.TTL, r.opts.ttl)
			if m.env.Clock() >= deadline {
				retry()
				return
			}
			createRev := resp.Header.Revision
			if old != nil {
				createRev = old.createRev
				revoke(int64(old.lease))
			}
			inc := m.begin(clientv3.LeaseID(grant.ID), createRev, resp.Header.Revision, sent, deadline)
			if old == nil {
				inc.joinLoad = &first
			}
			then(inc)
		})
	})
}

// begin makes an incarnation and starts its keeper (see Rink.begin).
func (m *simMember) begin(lease clientv3.LeaseID, createRev, boundRev, sent, deadline int64) *incarnation {
	inc := &incarnation{lease: lease, createRev: createRev, boundRev: boundRev, lost: make(chan struct{}), clock: m.env.Clock}
	inc.deadline.Store(deadline)
	inc.ctx, inc.cancel = context.WithCancelCause(m.r.ctx)
	m.keep, m.keepInc = newKeeper(m.r.opts.ttl, sent, deadline), inc
	m.keepGen++
	m.pumpKeeper()
	return inc
}

// pumpKeeper carries out what the keeper asks (see Rink.keep).
func (m *simMember) pumpKeeper() {
	k, inc := m.keep, m.keepInc
	if m.dead || inc.ctx.Err() != nil {
		return
	}
	why, renew, wakeAt := k.next(m.env.Clock())
	switch {
	case why != "":
		m.trace("%s", string(why))
		m.r.fence(inc, ErrFenced)
		m.settle()
	case renew:
		m.keepGen++
		gen := m.keepGen
		done := func(ttl int64, err error) {
			if m.dead || gen != m.keepGen || inc.ctx.Err() != nil {
				return
			}
			m.keepGen++
			if why := k.renewed(ttl, err, m.env.Clock()); why != "" {
				m.trace("%s (%v)", string(why), err)
				m.r.fence(inc, ErrFenced)
				m.settle()
				return
			}
			inc.deadline.Store(k.deadline)
			m.pumpKeeper()
		}
		m.env.After(time.Duration(k.deadline-m.env.Clock()), func() { done(0, context.DeadlineExceeded) })
		m.etcd.LeaseKeepAlive(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(inc.lease)}, func(resp *etcdserverpb.LeaseKeepAliveResponse, err error) {
			switch {
			case err != nil:
				done(0, err)
			case resp.TTL <= 0:
				done(0, rpctypes.ErrLeaseNotFound)
			default:
				done(resp.TTL, nil)
			}
		})
	default:
		m.keepGen++
		gen := m.keepGen
		m.env.After(time.Duration(wakeAt-m.env.Clock()), func() {
			if !m.dead && gen == m.keepGen {
				m.pumpKeeper()
			}
		})
	}
}

// pumpAcks carries out what the ack writer asks (see Rink.writeAcks).
func (m *simMember) pumpAcks() {
	w := m.acks
	for !m.dead && !m.acksBusy {
		if m.acksMail != nil {
			w.take(*m.acksMail)
			m.acksMail = nil
		}
		if w.idle() && len(m.acksQueue) > 0 {
			resp := m.acksQueue[0]
			m.acksQueue = m.acksQueue[1:]
			w.changed(watchResponseOf(resp), !resp.Canceled)
			continue
		}
		txn, wait := w.next(m.env.Now())
		if w.watchRev != m.acksRev {
			if m.acksWatch != nil {
				m.acksWatch()
				m.acksWatch, m.acksQueue = nil, nil
			}
			m.acksRev = w.watchRev
			if w.watchRev != 0 {
				m.acksWatch = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(w.key), StartRevision: w.watchRev}, func(resp *etcdserverpb.WatchResponse) {
					if m.dead {
						return
					}
					m.acksQueue = append(m.acksQueue, resp)
					m.pumpAcks()
				})
			}
		}
		switch {
		case txn != nil:
			m.acksBusy = true
			m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
				if m.dead {
					return
				}
				m.acksBusy = false
				m.trace("ack seq %d: written %v, err %v", w.cur.seq, err == nil && resp.Succeeded, err)
				w.replied(resp, err, m.env.Now())
				m.pumpAcks()
			})
			return
		case !wait.IsZero() && !wait.Equal(m.acksWake):
			m.acksWake = wait
			m.env.After(wait.Sub(m.env.Now()), func() {
				if !m.dead && m.acksWake.Equal(wait) {
					m.acksWake = time.Time{}
					m.pumpAcks()
				}
			})
		}
		return
	}
}

// watchResponseOf is resp as clientv3 hands it over.
func watchResponseOf(resp *etcdserverpb.WatchResponse) clientv3.WatchResponse {
	wr := clientv3.WatchResponse{Header: resp.Header, CompactRevision: resp.CompactRevision, Canceled: resp.Canceled}
	for _, ev := range resp.Events {
		wr.Events = append(wr.Events, (*clientv3.Event)(ev))
	}
	return wr
}

// simFollower is a watch of the member's (its view, or its own key), with
// follow's semantics: a listing, then the events after it, listed anew
// when the watch breaks or the core asks.
type simFollower struct {
	m      *simMember
	own    bool
	gen    int
	cancel func()
}

func (m *simMember) newFollower(own bool) *simFollower { return &simFollower{m: m, own: own} }

// start lists the keys followed and watches them from after the listing.
func (f *simFollower) start() {
	m, r := f.m, f.m.r
	f.gen++
	gen := f.gen
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
	wide := r.wideView.Load()
	key, end := r.keys.narrowed()
	var extra []string
	switch {
	case f.own:
		key = r.keys.member(r.opts.member)
		end = key + "\x00"
	case wide:
		key, end = r.keys.followed()
		extra = []string{r.keys.snapshot()}
	default:
		extra = []string{r.keys.snapshot(), r.keys.member(r.opts.member)}
	}
	ops := []*etcdserverpb.RequestOp{rangeOp(key, end)}
	for _, k := range extra {
		ops = append(ops, getOp(k))
	}
	retry := func() {
		m.env.After(m.backoff(), func() {
			if !m.dead && gen == f.gen {
				f.start()
			}
		})
	}
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: ops}, func(resp *etcdserverpb.TxnResponse, err error) {
		if m.dead || gen != f.gen {
			return
		}
		if err != nil {
			retry()
			return
		}
		var kvs []*mvccpb.KeyValue
		for _, rr := range resp.Responses {
			kvs = append(kvs, rr.GetResponseRange().Kvs...)
		}
		listed := resp.Header.Revision
		f.cancel = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(key), RangeEnd: []byte(end), StartRevision: listed + 1},
			func(wr *etcdserverpb.WatchResponse) {
				if m.dead || gen != f.gen {
					return
				}
				if wr.Canceled {
					f.cancel = nil
					retry()
					return
				}
				if len(wr.Events) == 0 {
					return
				}
				evs := make([]*clientv3.Event, len(wr.Events))
				for i, ev := range wr.Events {
					evs[i] = (*clientv3.Event)(ev)
				}
				m.step(input{kind: inBatch, batch: watchBatch{events: evs, rev: wr.Header.Revision, wide: wide, own: f.own}})
			})
		m.step(input{kind: inBatch, batch: watchBatch{snapshot: true, kvs: kvs, rev: listed, wide: wide, own: f.own}})
	})
}

// simEffects carries out the core's effects in the simulation.
type simEffects struct{ m *simMember }

// ack leaves req for the ack writer, replacing one it has not taken, as
// netEffects.ack does with its channel: the writer takes it between
// writes (pumped as the step settles).
func (fx simEffects) ack(req ackReq) {
	m := fx.m
	if old := m.acksMail; old != nil {
		req.lazy = req.lazy && old.lazy
	}
	m.acksMail = &req
}

func (fx simEffects) relist() {
	if fx.m.view != nil {
		fx.m.view.start()
	}
}

func (fx simEffects) campaign(inc *incarnation) {
	m := fx.m
	m.camp, m.campBusy = newCampaigner(m.r.keys, m.r.opts.member, inc, m.r.log), false
	m.camp.b.rnd = m.r.simRand
	m.pumpCampaign(m.camp)
}

// pumpCampaign carries out what the campaigner c asks (see runCampaign).
func (m *simMember) pumpCampaign(c *campaigner) {
	if m.dead || m.camp != c || m.campBusy || c.inc.ctx.Err() != nil {
		return
	}
	txn, key, after, wait := c.next(m.env.Now())
	switch {
	case txn != nil:
		m.campBusy = true
		m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead || m.camp != c {
				return
			}
			m.campBusy = false
			if e := c.replied(resp, err, m.env.Now()); e != nil {
				m.trace("elected: key at %d", e.rev)
				m.camp = nil
				m.step(input{kind: inElected, elected: *e})
				return
			}
			m.pumpCampaign(c)
		})
	case key != "":
		m.campBusy = true
		var cancel func()
		cancel = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(key), StartRevision: after + 1}, func(wr *etcdserverpb.WatchResponse) {
			if m.dead || m.camp != c || !m.campBusy {
				return
			}
			var err error
			switch {
			case wr.Canceled:
				err = errors.New("sim: watch canceled")
			case len(wr.Events) == 0:
				return
			}
			m.campBusy = false
			if cancel != nil {
				cancel()
			}
			c.changed(err, m.env.Now())
			m.pumpCampaign(c)
		})
	default:
		m.env.After(wait.Sub(m.env.Now()), func() { m.pumpCampaign(c) })
	}
}

func (fx simEffects) aggregate(el elected, box *restBox) context.CancelFunc {
	a := fx.m.newAggregator(el, box)
	return a.stop
}

func (fx simEffects) proclaim(l *leadership, base, next rankMap, mapRev int64, t transition) {
	m := fx.m
	m.etcd.Txn(m.r.proclaimTxn(l, &base, &next, mapRev, t), func(resp *etcdserverpb.TxnResponse, err error) {
		res := proclaimedBy(l, next.Version, mapRev, resp, err)
		m.trace("proclaimed version %d %v %v: ok %v, revision %d, err %v", next.Version, next.Members, next.Table, res.ok, res.rev, err)
		m.step(input{kind: inProclaimed, proclaimed: res})
	})
}

func (fx simEffects) checkOwnName(own int64) {
	m, r := fx.m, fx.m.r
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{rangeOp(r.keys.election(), clientv3.GetPrefixRangeEnd(r.keys.election()))}},
		func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead {
				return
			}
			if err != nil {
				m.env.After(m.backoff(), func() { fx.checkOwnName(own) })
				return
			}
			var wait []int64
			for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
				if cur := r.st.inc; kv.Lease == own || cur != nil && kv.Lease == int64(cur.lease) {
					continue
				}
				if string(kv.Value) == r.opts.member && r.keys.isCandidate(kv) {
					wait = append(wait, kv.Lease)
				}
			}
			var next func()
			next = func() {
				if len(wait) == 0 {
					r.inbox.send(func(ml *mail) { ml.selfChecked = true })
					m.settle()
					return
				}
				lease := wait[0]
				wait = wait[1:]
				m.awaitLeaseGone(lease, next)
			}
			next()
		})
}

// awaitLeaseGone asks etcd until lease is gone, then calls then (see
// Rink.awaitLeaseGone).
func (m *simMember) awaitLeaseGone(lease int64, then func()) {
	m.etcd.LeaseTimeToLive(&etcdserverpb.LeaseTimeToLiveRequest{ID: lease}, func(resp *etcdserverpb.LeaseTimeToLiveResponse, err error) {
		if m.dead {
			return
		}
		if err == nil && resp.TTL < 0 {
			then()
			return
		}
		wait := m.backoff()
		if err == nil {
			wait = max(min(time.Duration(resp.TTL)*time.Second, m.r.opts.ttl/4), 50*time.Millisecond)
		}
		m.env.After(wait, func() {
			if !m.dead {
				m.awaitLeaseGone(lease, then)
			}
		})
	})
}

func (fx simEffects) dropLineage(rev int64) {
	key := fx.m.r.keys.rankMap()
	fx.m.etcd.Txn(&etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{cmpOf(clientv3.Compare(clientv3.ModRevision(key), "=", rev))},
		Success: []*etcdserverpb.RequestOp{deleteOp(key)},
	}, func(*etcdserverpb.TxnResponse, error) {})
}

func (fx simEffects) awaitLeaseGone(name string, lease int64) {
	m := fx.m
	m.awaitLeaseGone(lease, func() {
		if name != m.r.opts.member {
			m.r.inbox.send(func(ml *mail) { ml.ghosts = append(ml.ghosts, lease) })
			m.settle()
		}
	})
}

func (fx simEffects) deleteStray(inc *incarnation, key string, rev int64) {
	m := fx.m
	m.etcd.Txn(&etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{cmpOf(clientv3.Compare(clientv3.ModRevision(key), "=", rev))},
		Success: []*etcdserverpb.RequestOp{deleteOp(key)},
	}, func(_ *etcdserverpb.TxnResponse, err error) {
		if err != nil && !m.dead && inc.ctx.Err() == nil {
			m.env.After(m.backoff(), func() {
				if !m.dead {
					fx.deleteStray(inc, key, rev)
				}
			})
		}
	})
}

func (fx simEffects) rewriteMemberKey(inc *incarnation, value, _ string) {
	r := fx.m.r
	key := r.keys.member(r.opts.member)
	fx.m.etcd.Txn(&etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			cmpOf(clientv3.Compare(clientv3.CreateRevision(key), "=", inc.createRev)),
			cmpOf(clientv3.Compare(clientv3.LeaseValue(key), "=", inc.lease)),
		},
		Success: []*etcdserverpb.RequestOp{putOp(key, value, int64(inc.lease))},
	}, func(*etcdserverpb.TxnResponse, error) {})
}

func (fx simEffects) watchHeirs(*incarnation) {} // (warm-up is not simulated)

func (fx simEffects) rejoin(old *incarnation, join bool) {
	m := fx.m
	if !join {
		return
	}
	m.join(old, func(inc *incarnation) {
		m.trace("rejoined: lease %x", int64(inc.lease))
		m.step(input{kind: inJoined, joined: inc})
	})
}

// simAggregator is the leader's aggregator (see Rink.aggregate): its
// watch of the whole rink, its fold, its held floor and its writer.
type simAggregator struct {
	m       *simMember
	a       *aggregation
	box     *restBox
	w       *floorWriter
	f       *simFollower
	ctx     context.Context
	cancel  context.CancelFunc
	busy    bool
	holdGen int
	wake    time.Time
	gen     int // the follower's generation folded
	done    bool
}

func (m *simMember) newAggregator(el elected, box *restBox) *simAggregator {
	r := m.r
	ctx, cancel := context.WithCancel(el.inc.ctx)
	a := &simAggregator{m: m, box: box, ctx: ctx, cancel: cancel,
		a: &aggregation{v: &ackView{members: map[string]ackMember{}, acks: map[string]ackKey{}, ranked: map[string]bool{}},
			loads: map[string]loadReport{}, reqs: make(chan []byte, 1), rest: box},
		w: newFloorWriter(r.keys, el.key, el.rev, r.log)}
	a.w.b.rnd = r.simRand
	m.agg = a
	a.follow()
	return a
}

func (a *simAggregator) stop() {
	a.cancel()
	a.done = true
	if a.f != nil && a.f.cancel != nil {
		a.f.cancel()
	}
	if a.m.agg == a {
		a.m.agg = nil
	}
}

// follow lists the whole rink and follows it (see follow).
func (a *simAggregator) follow() {
	m, r := a.m, a.m.r
	a.gen++
	gen := a.gen
	key, end := r.keys.prefix, clientv3.GetPrefixRangeEnd(r.keys.prefix)
	retry := func() {
		m.env.After(m.backoff(), func() {
			if !m.dead && !a.done && gen == a.gen {
				a.follow()
			}
		})
	}
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{rangeOp(key, end)}}, func(resp *etcdserverpb.TxnResponse, err error) {
		if m.dead || a.done || gen != a.gen {
			return
		}
		if err != nil {
			retry()
			return
		}
		listed := resp.Header.Revision
		a.f = &simFollower{m: m}
		a.f.cancel = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(key), RangeEnd: []byte(end), StartRevision: listed + 1}, func(wr *etcdserverpb.WatchResponse) {
			if m.dead || a.done || gen != a.gen {
				return
			}
			if wr.Canceled {
				retry()
				return
			}
			evs := make([]*clientv3.Event, len(wr.Events))
			for i, ev := range wr.Events {
				evs[i] = (*clientv3.Event)(ev)
			}
			a.fold(watchBatch{events: evs, rev: wr.Header.Revision})
		})
		a.fold(watchBatch{snapshot: true, kvs: resp.Responses[0].GetResponseRange().Kvs, rev: listed})
	})
}

// fold folds b (see Rink.fold) and carries out what comes of it.
func (a *simAggregator) fold(b watchBatch) {
	a.m.r.fold(a.a, b)
	a.pump()
	a.m.settle() // (loads and warm-up readiness for the run goroutine)
}

// kicked folds once if the leader's plan changed (see setRest), and
// reports whether it did.
func (a *simAggregator) kicked() bool {
	select {
	case <-a.box.kick:
		a.m.r.fold(a.a, watchBatch{})
		a.pump()
		return true
	default:
		return false
	}
}

// pump hands the writer the newest floor asked for, arms the hold, and
// writes.
func (a *simAggregator) pump() {
	m := a.m
	if a.done || m.dead {
		return
	}
	if !a.busy {
		select {
		case val := <-a.a.reqs: // (taken between writes, as writeFloors does)
			a.w.take(val)
		default:
		}
	}
	if at := a.a.holdUntil; !at.IsZero() && !at.Equal(a.wake) {
		a.wake = at
		a.holdGen++
		gen := a.holdGen
		m.env.After(at.Sub(m.env.Now()), func() {
			if m.dead || a.done || gen != a.holdGen || !a.a.holdUntil.Equal(at) {
				return
			}
			a.wake = time.Time{}
			a.a.holdUntil = time.Time{}
			a.a.holds = min(a.a.holds+1, maxHolds)
			a.a.send(a.a.held)
			a.pump()
		})
	}
	if a.busy {
		return
	}
	txn, wait := a.w.next(m.env.Now())
	switch {
	case txn != nil:
		a.busy = true
		m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead || a.done {
				return
			}
			a.busy = false
			m.trace("floor %s: written %v, err %v", txn.Success[0].GetRequestPut().Value, err == nil && resp.Succeeded, err)
			if !a.w.replied(resp, err, m.env.Now()) {
				a.done = true // no longer the leader: the run goroutine finds out on its own
				return
			}
			a.pump()
		})
	case !wait.IsZero():
		m.env.After(wait.Sub(m.env.Now()), func() {
			if !m.dead && !a.done {
				a.pump()
			}
		})
	}
}
