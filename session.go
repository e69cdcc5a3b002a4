package rink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// incarnation is one life of this member in the rink: a lease, the member key
// bound to it, and a context that ends when the member stops trusting the
// lease. Every role context this member hands out derives from ctx, so a fence
// cancels them all at once, without waiting for any other goroutine.
type incarnation struct {
	core.Inc
	ctx      context.Context
	cancel   context.CancelCauseFunc
	lost     chan struct{} // closed by the keeper when the lease is not trusted any more
	fenced   atomic.Bool   // a fence event was emitted (the keeper and the run goroutine may both fence)
	deadline atomic.Int64  // fence deadline, a fenceClock reading
	clock    func() int64  // the simulator's fence clock (nil: fenceClock)
}

// monoBase anchors a process-wide monotonic clock: durations since it are
// read from the monotonic clock, which keeps counting while the process is
// stopped (SIGSTOP) or stalled, but not while the host is suspended.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }

// fenceClock reads the clock that fence deadlines are kept on, in
// nanoseconds from an arbitrary origin. The etcd server's lease clock keeps
// counting while this member's host is suspended (or its VM frozen), so this
// one must too: it is CLOCK_BOOTTIME on Linux, the monotonic clock elsewhere
// (see sysFenceClock). Tests replace it to simulate a suspend.
var fenceClock = sysFenceClock()

// untilClock returns how long until fenceClock reaches t. Timers run on
// Go's monotonic clock, which stops while the host is suspended: one set
// with this may fire late after a resume, never early.
func untilClock(t int64) time.Duration { return time.Duration(t - fenceClock()) }

// expired reports whether the fence deadline has passed, whether or not
// the keeper has woken up to act on it yet.
func (inc *incarnation) expired() bool { return inc.left() <= 0 }

// left returns how long until the fence deadline (negative once passed).
func (inc *incarnation) left() time.Duration {
	if inc.clock != nil {
		return time.Duration(inc.deadline.Load() - inc.clock())
	}
	return untilClock(inc.deadline.Load())
}

// join grants a lease and creates the member key bound to it (see
// core.Joiner). If a live member already uses the name, it waits for that
// key to go (a restarted process reusing its name waits out its
// predecessor's lease) until ctx ends, and then returns ErrMemberExists.
func (r *Rink) join(ctx context.Context) (*incarnation, error) {
	return r.joinWith(ctx, r.newJoiner(nil))
}

// newJoiner returns a joiner that resumes old (nil: joins anew).
func (r *Rink) newJoiner(old *incarnation) *core.Joiner {
	var oi *core.Inc
	if old != nil {
		oi = &old.Inc
	}
	return core.NewJoiner(r.opts.ttl, r.keys.Member(r.opts.member), oi, r.joinerTxn, newBackoff())
}

// joinerTxn is the transaction that binds the member key to lease: a
// join's (old nil), or the resume of old's.
func (r *Rink) joinerTxn(lease int64, old *core.Inc) *etcdserverpb.TxnRequest {
	if old != nil {
		return r.resumeTxn(old, lease)
	}
	txn, _ := r.joinTxn(lease)
	return txn
}

// joinWith carries out what j asks with etcd's client until it has made an
// incarnation, or failed, or ctx ended.
func (r *Rink) joinWith(ctx context.Context, j *core.Joiner) (*incarnation, error) {
	revoke := func(id int64) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = r.cli.Revoke(rctx, clientv3.LeaseID(id))
	}
	step := j.Start(fenceClock())
	for {
		for _, id := range step.Revoke {
			revoke(id)
		}
		if lease := step.KeyGone; lease != 0 {
			r.log.Info("own member key gone: joining as a newcomer")
			r.inbox.send(func(m *mail) { m.keyGone = clientv3.LeaseID(lease) })
		}
		switch {
		case step.Joined != nil:
			return r.joined(step.Joined), nil
		case step.Again:
			if step.Why != "" {
				r.log.Info(step.Why, zap.Error(step.Err))
			}
			if !sleep(ctx, step.Wait) {
				if step.Err != nil {
					return nil, step.Err
				}
				return nil, fmt.Errorf("rink: joining: %w", ctx.Err())
			}
			step = j.Start(fenceClock())
		case errors.Is(step.Err, core.ErrJoinSlow):
			return nil, fmt.Errorf("%w: %w", step.Err, context.DeadlineExceeded)
		case step.Err != nil:
			return nil, step.Err
		case step.Grant:
			grant, err := r.cli.Grant(ctx, j.TTL())
			if err != nil {
				step = j.Granted(0, 0, err)
			} else {
				step = j.Granted(int64(grant.ID), grant.TTL, nil)
			}
		case step.Txn != nil:
			resp, err := execTxn(ctx, r.cli, step.Txn)
			step = j.Answered(resp, err, fenceClock())
		case step.AwaitDeleted != nil:
			key := step.AwaitDeleted.Key
			r.log.Info("member name in use, waiting for its key to go", zap.String("key", key))
			err := waitDeleted(ctx, r.cli, key, step.AwaitDeleted.Rev)
			if err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %q (its key did not go within the join timeout)", ErrMemberExists, r.opts.member)
			}
			step = j.Deleted(err)
		default:
			return nil, fmt.Errorf("rink: joining: no step (a bug)")
		}
	}
}

// joined begins the incarnation a join or a resume made.
func (r *Rink) joined(in *core.Joined) *incarnation {
	inc := r.begin(clientv3.LeaseID(in.Lease), in.CreateRev, in.BoundRev, in.Sent, in.Deadline)
	if in.Resumed {
		r.log.Info("resumed: member key bound to a new lease, rank and slots kept")
	} else {
		first := firstLoad()
		inc.JoinLoad, inc.Hint = &first, r.hintOf(in.Resp)
	}
	return inc
}

// transient reports whether err is an etcd error that a retry may not
// meet (see core.Transient).
func transient(err error) bool { return core.Transient(err) }

// candidacy is the put of the election key that a campaign on lease makes
// (see campaign), written with the member key: the campaign finds it
// there and writes nothing, which saves every join a write.
func (r *Rink) candidacy(lease int64) *etcdserverpb.RequestOp {
	return wire.Put(r.keys.ElectionKey(lease), r.opts.member, lease)
}

// firstLoad is the load summary a member's key is created with (see
// joinTxn): unmeasured.
func firstLoad() wire.LoadReport { return wire.LoadReport{Unmeasured: true} }

// joinTxn creates the member key bound to lease, if the name is free, with
// its candidacy and its first load summary (returned); it reads the
// newest candidacy before its own from the tail key, and names its own
// there (see candidacyHint and hintOf).
func (r *Rink) joinTxn(lease int64) (*etcdserverpb.TxnRequest, wire.LoadReport) {
	key := r.keys.Member(r.opts.member)
	first := firstLoad()
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{wire.CreateRevisionEq(key, 0)},
		Success: []*etcdserverpb.RequestOp{wire.Put(key, r.ownMemberValue(false), lease), r.candidacy(lease),
			wire.Put(r.keys.Load(r.opts.member), string(first.Encode()), lease),
			wire.Get(r.keys.Tail()), wire.Put(r.keys.Tail(), r.keys.ElectionKey(lease), lease)},
		Failure: []*etcdserverpb.RequestOp{wire.Get(key)},
	}, first
}

// hintOf returns the candidacy that the tail key named when joinTxn's
// answer resp read it: an election key, and the revision of the join that
// wrote both (zero: none, or not one a join wrote).
func (r *Rink) hintOf(resp *etcdserverpb.TxnResponse) CandidacyHint {
	if len(resp.Responses) < 4 {
		return CandidacyHint{}
	}
	kvs := resp.Responses[3].GetResponseRange().GetKvs()
	if len(kvs) != 1 || !r.keys.IsElection(string(kvs[0].Value)) {
		return CandidacyHint{}
	}
	return CandidacyHint{Key: string(kvs[0].Value), Rev: kvs[0].ModRevision}
}

// resumeTxn rebinds old's member key to lease, if it is still old's (see
// resume), with the new candidacy; the old one goes in the same
// transaction. No view ever has our name campaign under a lease that our
// key is not bound to, which others would take for an incarnation whose
// key an operator deleted, still acting, and wait for (see
// noteCandidates): the old incarnation fenced, and acts on nothing. (Its
// other keys go when the old lease is revoked: see revokeFenced.)
func (r *Rink) resumeTxn(old *core.Inc, lease int64) *etcdserverpb.TxnRequest {
	key := r.keys.Member(r.opts.member)
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{
			wire.CreateRevisionEq(key, old.CreateRev),
			wire.LeaseEq(key, int64(old.Lease)),
		},
		Success: []*etcdserverpb.RequestOp{wire.Put(key, r.ownMemberValue(false), lease), r.candidacy(lease),
			wire.Delete(r.keys.ElectionKey(int64(old.Lease)))},
	}
}

// begin makes the incarnation of the member key bound to lease, and starts
// its keeper.
func (r *Rink) begin(lease clientv3.LeaseID, createRev, boundRev, sent, deadline int64) *incarnation {
	inc := &incarnation{Inc: core.Inc{Lease: int64(lease), CreateRev: createRev, BoundRev: boundRev}, lost: make(chan struct{})}
	inc.deadline.Store(deadline)
	inc.ctx, inc.cancel = context.WithCancelCause(r.ctx)
	inc.Done, inc.Owner = inc.ctx.Done(), inc
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.keep(inc, sent, deadline)
	}()
	return inc
}

// waitDeleted blocks until key is deleted at a revision after rev.
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}

// fence ends an incarnation's trust in its lease: every role context derived
// from it is cancelled at once, whatever the run goroutine is doing.
func (r *Rink) fence(inc *incarnation, cause error) {
	if cause == ErrFenced && r.planted(plantIgnoreFence) {
		return
	}
	inc.cancel(cause)
	if inc.fenced.CompareAndSwap(false, true) {
		r.emit(Event{Kind: EventFenced, Slot: -1, Cause: context.Cause(inc.ctx)})
	}
}

// leave ends an incarnation: it stops renewals and revokes the lease, which
// deletes the member key and any election key at once.
func (r *Rink) leave(ctx context.Context, inc *incarnation, cause error) error {
	inc.cancel(cause)
	<-inc.lost
	if _, err := r.cli.Revoke(ctx, clientv3.LeaseID(inc.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("rink: revoking lease: %w", err)
	}
	return nil
}

// abandon ends an incarnation without revoking its lease: renewals stop,
// and the member key goes when the server expires the lease.
func (r *Rink) abandon(inc *incarnation, cause error) {
	inc.cancel(cause)
	<-inc.lost
}
