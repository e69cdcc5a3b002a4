package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/core"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// simEffects carries out the core's effects in the simulation.
type simEffects struct{ m *simMember }

// ack leaves req for the ack writer, replacing one it has not taken, as
// netEffects.ack does with its channel: the writer takes it between
// writes (pumped as the step settles).
func (fx simEffects) ack(req core.AckReq) {
	m := fx.m
	if old := m.acksMail; old != nil {
		req.Lazy = req.Lazy && old.Lazy
	}
	m.acksMail = &req
}

func (fx simEffects) relist() {
	if fx.m.view != nil {
		fx.m.view.relist()
	}
}

func (fx simEffects) campaign(inc *incarnation) {
	m := fx.m
	m.camp, m.campBusy = core.NewCampaigner(m.r.keys, m.r.opts.member, &inc.Inc, m.r.log, core.NewBackoff(m.r.simRand)), false
	m.pumpCampaign(m.camp)
}

// pumpCampaign carries out what the campaigner c asks (see runCampaign).
func (m *simMember) pumpCampaign(c *core.Campaigner) {
	if m.dead || m.camp != c || m.campBusy || c.Inc.Ended() {
		return
	}
	txn, key, after, wait := c.Next(m.env.Now())
	m.campGen++
	gen := m.campGen // (an answer or a watch event of an earlier request is not this one's)
	switch {
	case txn != nil:
		m.campBusy = true
		m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead || m.camp != c || m.campGen != gen {
				return
			}
			m.campBusy = false
			if e := c.Replied(resp, err, m.env.Now()); e != nil {
				m.trace("elected: key at %d", e.Rev)
				m.camp = nil
				m.step(input{kind: inElected, elected: *e})
				return
			}
			m.pumpCampaign(c)
		})
	case key != "":
		m.campBusy = true
		live := func() bool { return m.camp == c && m.campBusy && m.campGen == gen }
		m.awaitChange(&etcdserverpb.WatchCreateRequest{Key: []byte(key), StartRevision: after + 1}, live, func(err error) {
			m.campBusy = false
			c.Changed(err, m.env.Now())
			m.pumpCampaign(c)
		})
	default:
		m.env.After(wait.Sub(m.env.Now()), func() {
			if m.campGen == gen {
				m.pumpCampaign(c)
			}
		})
	}
}

func (fx simEffects) aggregate(el core.Elected, box *restBox) context.CancelFunc {
	a := fx.m.newAggregator(el, box)
	return a.stop
}

func (fx simEffects) proclaim(l *leadership, base, next wire.Map, mapRev int64, t wire.Transition) {
	m := fx.m
	m.etcd.Txn(m.r.proclaimTxn(l, &base, &next, mapRev, t), func(resp *etcdserverpb.TxnResponse, err error) {
		res := proclaimedBy(l, next.Version, mapRev, resp, err)
		m.trace("proclaimed version %d %v %v: ok %v, revision %d, err %v", next.Version, next.Members, next.Table, res.ok, res.rev, err)
		m.step(input{kind: inProclaimed, proclaimed: res})
	})
}

func (fx simEffects) checkOwnName(own int64) {
	m, r := fx.m, fx.m.r
	c, step := core.NewOwnNameCheck(r.keys, r.opts.member, own, m.backoff, r.log)
	m.ownNameStep(c, step)
}

// ownNameStep carries out step of c, and what follows from its answers
// (see netEffects.checkOwnName).
func (m *simMember) ownNameStep(c *core.OwnNameCheck, step core.OwnNameStep) {
	r := m.r
	switch {
	case m.dead:
	case step.Done:
		r.inbox.send(func(ml *mail) { ml.selfChecked = true })
		m.settle()
	case step.After > 0:
		m.env.After(step.After, func() { m.ownNameStep(c, core.OwnNameStep{List: step.List}) })
	case step.Await != 0:
		m.awaitLeaseGone(r.opts.member, step.Await, false, func(core.GhostStep) { m.ownNameStep(c, c.Gone()) })
	default:
		key, end := c.Range()
		m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{wire.Range(key, end)}}, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead {
				return
			}
			var kvs []*mvccpb.KeyValue
			if err == nil {
				kvs = resp.Responses[0].GetResponseRange().Kvs
			}
			m.ownNameStep(c, c.Listed(kvs, err, r.curLease()))
		})
	}
}

// awaitLeaseGone carries out, in the simulator, what a core.GhostAsk
// decides (see Rink.awaitLeaseGone): it asks etcd until lease is gone,
// then, when tell, reads the map key and calls then with what it read.
func (m *simMember) awaitLeaseGone(name string, lease int64, tell bool, then func(step core.GhostStep)) {
	g, step := core.NewGhostAsk(name, lease, tell, m.r.opts.ttl, m.env.Now(), m.backoff, m.r.log)
	m.ghostStep(g, step, then)
}

// ghostStep carries out step of g, and what follows from its answers.
func (m *simMember) ghostStep(g *core.GhostAsk, step core.GhostStep, then func(step core.GhostStep)) {
	if m.dead {
		return
	}
	if step.Done {
		then(step)
		return
	}
	if step.After > 0 {
		m.env.After(step.After, func() { m.ghostStep(g, core.GhostStep{AskTTL: step.AskTTL, ReadMap: step.ReadMap}, then) })
		return
	}
	if step.AskTTL {
		m.etcd.LeaseTimeToLive(&etcdserverpb.LeaseTimeToLiveRequest{ID: g.Lease}, func(resp *etcdserverpb.LeaseTimeToLiveResponse, err error) {
			if m.dead {
				return
			}
			ttl := int64(0)
			if err == nil {
				ttl = resp.TTL
			}
			m.ghostStep(g, g.TTL(ttl, err, m.env.Now()), then)
		})
		return
	}
	m.etcd.Txn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{wire.Get(m.r.keys.Map())}}, func(resp *etcdserverpb.TxnResponse, err error) {
		if m.dead {
			return
		}
		rev, mapRev := int64(0), int64(0)
		if err == nil {
			rev = resp.Header.GetRevision()
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				mapRev = kvs[0].ModRevision
			}
		}
		m.ghostStep(g, g.MapRead(rev, mapRev, err), then)
	})
}

func (fx simEffects) dropLineage(inc *incarnation, rev int64) {
	key := fx.m.r.keys.Map()
	if inc != nil {
		fx.m.deleteStray(core.NewStrayDelete(key, rev, &inc.Inc, fx.m.backoff))
		return
	}
	fx.m.etcd.Txn(&etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{wire.ModRevisionEq(key, rev)},
		Success: []*etcdserverpb.RequestOp{wire.Delete(key)},
	}, func(*etcdserverpb.TxnResponse, error) {})
}

func (fx simEffects) awaitLeaseGone(name string, lease int64) {
	m := fx.m
	// (A ghost of our own name is another process's incarnation of it:
	// the check for one, checkOwnName, waits on its own.)
	m.awaitLeaseGone(name, lease, true, func(step core.GhostStep) {
		e := ghostEnd{lease: lease, rev: step.Rev, mapRev: step.MapRev}
		m.r.inbox.send(func(ml *mail) { ml.ghosts = append(ml.ghosts, e) })
		m.settle()
	})
}

func (fx simEffects) deleteStray(inc *incarnation, key string, rev int64) {
	fx.m.deleteStray(core.NewStrayDelete(key, rev, &inc.Inc, fx.m.backoff))
}

// deleteStray carries out d (see netEffects.deleteStray).
func (m *simMember) deleteStray(d *core.StrayDelete) {
	m.etcd.Txn(d.Txn(), func(resp *etcdserverpb.TxnResponse, err error) {
		if m.dead {
			return
		}
		if _, again := d.Replied(resp, err); again > 0 {
			m.env.After(again, func() {
				if !m.dead {
					m.deleteStray(d)
				}
			})
		}
	})
}

func (fx simEffects) repairKey(inc *incarnation, d *core.StrayDelete) { fx.m.deleteStray(d) }

func (fx simEffects) rewriteMemberKey(inc *incarnation, value, _ string) {
	r := fx.m.r
	key := r.keys.Member(r.opts.member)
	fx.m.etcd.Txn(&etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			wire.CreateRevisionEq(key, inc.CreateRev),
			wire.LeaseEq(key, int64(inc.Lease)),
		},
		Success: []*etcdserverpb.RequestOp{wire.Put(key, value, int64(inc.Lease))},
	}, func(*etcdserverpb.TxnResponse, error) {})
}

// watchHeirs follows, while inc lasts, the warm-up readiness in every
// member's acknowledgement, for a member leaving with a warm-up (see
// Rink.watchHeirs): it lists the ack keys, then watches them, folding each
// batch as the production watcher does (foldHeirs).
func (fx simEffects) watchHeirs(inc *incarnation) {
	m := fx.m
	r := m.r
	warm := map[string]int64{}
	what := func() (key, end string, extra []string, wide bool) {
		return r.keys.Acks(), clientv3.GetPrefixRangeEnd(r.keys.Acks()), nil, false
	}
	m.newFollower(what, func(b watchBatch) {
		r.foldHeirs(warm, b)
		m.settle()
	}, func() bool { return inc.ctx.Err() != nil }).start()
}

func (fx simEffects) revokeLease(lease int64) {
	m := fx.m
	m.trace("revoking the fenced lease %x", lease)
	if m.revoked == nil {
		m.revoked = map[int64]bool{}
	}
	m.revoked[lease] = true
	m.etcd.LeaseRevoke(&etcdserverpb.LeaseRevokeRequest{ID: lease}, func(*etcdserverpb.LeaseRevokeResponse, error) {})
}
func (fx simEffects) rejoin(old *incarnation, join bool) {
	m := fx.m
	if !join {
		return
	}
	m.join(old, func(inc *incarnation) {
		m.trace("rejoined: lease %x", int64(inc.Lease))
		m.step(input{kind: inJoined, joined: inc})
	})
}

// simAggregator is the leader's aggregator (see Rink.aggregate): its
// watch of the whole rink, its fold, its held floor and its writer.
type simAggregator struct {
	m       *simMember
	a       *aggregation
	box     *restBox
	w       *core.FloorWriter
	f       *simFollower
	ctx     context.Context
	cancel  context.CancelFunc
	busy    bool
	holdGen int
	wake    time.Time
	done    bool
}

func (m *simMember) newAggregator(el core.Elected, box *restBox) *simAggregator {
	r := m.r
	ctx, cancel := context.WithCancel(incOf(el.Inc).ctx)
	a := &simAggregator{m: m, box: box, ctx: ctx, cancel: cancel,
		a: &aggregation{v: &core.AckView{Members: map[string]core.AckMember{}, Acks: map[string]core.AckKey{}, Ranked: map[string]bool{},
			MaxMarks: r.simKnobs.Marks, Changes: core.ChangeLog{MaxLosses: r.simKnobs.Losses}},
			loads: map[string]wire.LoadReport{}, reqs: make(chan []byte, 1), rest: box},
		w: core.NewFloorWriter(r.keys, el.Key, el.Rev, r.log, core.NewBackoff(r.simRand))}
	m.agg = a
	a.follow()
	return a
}

func (a *simAggregator) stop() {
	a.cancel()
	a.done = true
	if a.f != nil {
		a.f.stop()
	}
	if a.m.agg == a {
		a.m.agg = nil
	}
}

// follow lists the whole rink and follows it (see follow).
func (a *simAggregator) follow() {
	m, r := a.m, a.m.r
	what := func() (key, end string, extra []string, wide bool) {
		return r.keys.Prefix, clientv3.GetPrefixRangeEnd(r.keys.Prefix), nil, false
	}
	a.f = m.newFollower(what, a.fold, func() bool { return a.done })
	a.f.start()
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
			a.w.Take(val)
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
	txn, wait := a.w.Next(m.env.Now())
	switch {
	case txn != nil:
		a.busy = true
		m.etcd.Txn(txn, func(resp *etcdserverpb.TxnResponse, err error) {
			if m.dead || a.done {
				return
			}
			a.busy = false
			m.trace("floor %s: written %v, err %v", txn.Success[0].GetRequestPut().Value, err == nil && resp.Succeeded, err)
			if !a.w.Replied(resp, err, m.env.Now()) {
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
