package rink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
func (inc *incarnation) expired() bool {
	if inc.clock != nil {
		return inc.clock() >= inc.deadline.Load()
	}
	return fenceClock() >= inc.deadline.Load()
}

// deadlineAfter returns the fence deadline for a renewal sent at sent (a
// fenceClock reading) and granted ttl by the server.
func (r *Rink) deadlineAfter(sent int64, ttl int64) int64 {
	return core.DeadlineAfter(sent, ttl, r.opts.ttl)
}

// join grants a lease and creates the member key bound to it. If a live
// member already uses the name, it waits for that key to go (a restarted
// process reusing its name waits out its predecessor's lease) until ctx ends,
// and then returns ErrMemberExists.
func (r *Rink) join(ctx context.Context) (*incarnation, error) { return r.joinAfter(ctx, nil) }

// joinAfter is join after attempts on the leases tried whose transaction
// failed unanswered: it may have committed, and if the revoke failed too,
// the key found in the name's place is our own, which it takes away
// rather than wait for (a TTL, or ErrMemberExists).
func (r *Rink) joinAfter(ctx context.Context, tried []clientv3.LeaseID) (*incarnation, error) {
	key := r.keys.Member(r.opts.member)
	b := newBackoff()
	for {
		// Grant the lease only when the name looks free, so that waiting out
		// a predecessor does not eat into our own lease.
		sent := fenceClock()
		grant, err := r.cli.Grant(ctx, int64(r.opts.ttl/time.Second))
		if err != nil {
			if transient(err) && sleep(ctx, b.Next()) {
				r.log.Info("granting the lease failed, retrying", zap.Error(err))
				continue
			}
			return nil, fmt.Errorf("rink: granting lease: %w", err)
		}
		revokeLease := func(id clientv3.LeaseID) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_, _ = r.cli.Revoke(rctx, id)
		}
		revoke := func() { revokeLease(grant.ID) }
		// The member's first load summary goes with its key (the leader
		// ranks a newcomer once it knows its load: see holdForReports),
		// which saves every join a write.
		txn, first := r.joinTxn(int64(grant.ID))
		resp, err := execTxn(ctx, r.cli, txn)
		if err != nil {
			// (It may have committed: the revoke takes the key with the
			// lease, or the retry finds it, ours, and revokes it again.)
			revoke()
			tried = append(tried, grant.ID)
			if transient(err) && sleep(ctx, b.Next()) {
				r.log.Info("creating the member key failed, retrying", zap.Error(err))
				continue
			}
			return nil, fmt.Errorf("rink: creating member key: %w", err)
		}
		if !resp.Succeeded {
			revoke()
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 && slices.Contains(tried, clientv3.LeaseID(kvs[0].Lease)) {
				// Our own key, from an attempt whose answer was lost: it
				// never acted. Take it away and try again.
				revokeLease(clientv3.LeaseID(kvs[0].Lease))
				if sleep(ctx, b.Next()) {
					continue
				}
				return nil, fmt.Errorf("rink: creating member key: %w", ctx.Err())
			}
			// The name is taken. Wait for its key to be deleted, then try again.
			r.log.Info("member name in use, waiting for its key to go", zap.String("key", key))
			if err := waitDeleted(ctx, r.cli, key, resp.Header.Revision); err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %q (its key did not go within the join timeout)", ErrMemberExists, r.opts.member)
				}
				return nil, fmt.Errorf("rink: waiting for member key: %w", err)
			}
			continue
		}
		deadline := r.deadlineAfter(sent, grant.TTL)
		if fenceClock() >= deadline {
			// Joining took so long that the lease may already be near its end.
			revoke()
			return nil, fmt.Errorf("rink: joining took longer than the lease allows: %w", context.DeadlineExceeded)
		}
		inc := r.begin(grant.ID, resp.Header.Revision, resp.Header.Revision, sent, deadline)
		inc.JoinLoad, inc.Hint = &first, r.hintOf(resp)
		return inc, nil
	}
}

// transient reports whether err is an etcd error that a retry may not
// meet: an overloaded or leaderless cluster, a request that timed out
// (and may have committed), a connection lost. A join retries them
// until its timeout (at 10,000 members joining at once, etcd answered
// "too many requests" while its apply caught up).
func transient(err error) bool {
	for _, e := range []error{rpctypes.ErrTooManyRequests, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged} {
		if errors.Is(err, e) {
			return true
		}
	}
	return status.Code(err) == codes.Unavailable
}

// candidacy is the put of the election key that a campaign on lease makes
// (see campaign), written with the member key: the campaign finds it
// there and writes nothing, which saves every join a write.
func (r *Rink) candidacy(lease int64) *etcdserverpb.RequestOp {
	return wire.Put(r.keys.ElectionKey(lease), r.opts.member, lease)
}

// joinTxn creates the member key bound to lease, if the name is free, with
// its candidacy and its first load summary (returned); it reads the
// newest candidacy before its own from the tail key, and names its own
// there (see candidacyHint and hintOf).
func (r *Rink) joinTxn(lease int64) (*etcdserverpb.TxnRequest, wire.LoadReport) {
	key := r.keys.Member(r.opts.member)
	first := wire.LoadReport{Unmeasured: true}
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
func (r *Rink) resumeTxn(old *incarnation, lease int64) *etcdserverpb.TxnRequest {
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

// errKeyGone means that a fenced incarnation's member key is gone, or no
// longer bound to its lease: the member cannot resume, and joins anew.
var errKeyGone = errors.New("rink: member key gone or bound to another lease")

// resume brings back a member that fenced itself while its member key is
// still there, bound to the old lease (which the server has not expired
// yet, or extended after an outage): one transaction rebinds the key to a
// new lease. A put keeps the key's create revision, the member's identity
// and join order in the leader's eyes, so the leader sees no departure, and
// the member keeps its rank and slots. This is safe because the member
// cancelled every holding when it fenced, and the old incarnation's writes
// are guarded by the key's lease. The old candidacy goes with the
// rebinding, and the core revokes the old lease as the new incarnation
// begins (see revokeFenced), taking the old acknowledgement with it; the
// new incarnation writes its own and campaigns again. It returns
// errKeyGone when the key cannot be rebound.
func (r *Rink) resume(ctx context.Context, old *incarnation) (*incarnation, error) {
	sent := fenceClock()
	grant, err := r.cli.Grant(ctx, int64(r.opts.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("rink: granting lease: %w", err)
	}
	revoke := func(id clientv3.LeaseID) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = r.cli.Revoke(rctx, id)
	}
	resp, err := execTxn(ctx, r.cli, r.resumeTxn(old, int64(grant.ID)))
	if err != nil {
		// If the put landed after all, the key goes with the new lease:
		// the member joins anew, as when its key vanished.
		revoke(grant.ID)
		return nil, fmt.Errorf("rink: rebinding member key: %w", err)
	}
	if !resp.Succeeded {
		revoke(grant.ID)
		return nil, errKeyGone
	}
	deadline := r.deadlineAfter(sent, grant.TTL)
	if fenceClock() >= deadline {
		// The key is bound to a lease we cannot trust. It is left to
		// expire, not revoked: while it is there it keeps our slots from
		// others, which after a restore may be what keeps them safe (see
		// hush). The next attempt waits for it to go.
		return nil, fmt.Errorf("rink: resuming took longer than the lease allows: %w", context.DeadlineExceeded)
	}
	return r.begin(grant.ID, old.CreateRev, resp.Header.Revision, sent, deadline), nil
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
