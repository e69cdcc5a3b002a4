package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/core"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// effects is what the core asks of the world. Every request to etcd, every
// goroutine it starts and every wait goes through it: the core calls it
// from step and never blocks on it, and what comes of an effect comes back
// as an input (see step.go) or through the inbox. netEffects carries
// effects out with clientv3 and goroutines, each owned by the Rink's wait
// group; a simulator can carry them out in virtual time.
type effects interface {
	ack(req core.AckReq)                                                          // to the ack writer
	relist()                                                                      // the watch lists anew, in the view r.wideView says (→ inBatch)
	campaign(inc *incarnation)                                                    // → inElected
	aggregate(el core.Elected, box *restBox) (stop context.CancelFunc)            // the leader's aggregator, until stop
	proclaim(l *leadership, base, next wire.Map, mapRev int64, t wire.Transition) // → inProclaimed
	checkOwnName(own int64)                                                       // → mail.selfChecked
	dropLineage(inc *incarnation, rev int64)
	awaitLeaseGone(name string, lease int64) // → mail.ghosts
	revokeLease(lease int64)
	deleteStray(inc *incarnation, key string, rev int64)
	rewriteMemberKey(inc *incarnation, value, why string)
	repairKey(inc *incarnation, d *core.StrayDelete)
	watchHeirs(inc *incarnation)        // → mail.heirs
	rejoin(old *incarnation, join bool) // → inJoined
}

// fx returns the core's effects: the simulator's when it set r.simFx,
// netEffects otherwise.
func (r *Rink) fx() effects {
	if r.simFx != nil {
		return r.simFx
	}
	return netEffects{r}
}

// netEffects carries out the core's effects with the Rink's etcd client and
// goroutines.
type netEffects struct{ r *Rink }

// campaign runs for leader (see Rink.campaign) on a goroutine, and hands
// the run goroutine the election once won.
func (fx netEffects) campaign(inc *incarnation) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.runCampaign(inc)
	}()
}

// aggregate starts the leader's acknowledgement aggregator (see
// Rink.aggregate) for the leadership won in el; stop stops it.
func (fx netEffects) aggregate(el core.Elected, box *restBox) (stop context.CancelFunc) {
	r := fx.r
	ctx, stop := context.WithCancel(incOf(el.Inc).ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.aggregate(ctx, el.Key, el.Rev, box)
	}()
	return stop
}

// proclaim writes next in etcd (see Rink.proclaim) on a goroutine and
// hands the run goroutine the result.
func (fx netEffects) proclaim(l *leadership, base, next wire.Map, mapRev int64, t wire.Transition) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(l.inc.ctx, r.opts.ttl)
		res := r.proclaim(ctx, l, base, next, mapRev, t)
		cancel()
		select {
		case r.handoffCh <- input{kind: inProclaimed, proclaimed: res}:
		case <-r.ctx.Done():
		}
	}()
}

// checkOwnName carries out, on a goroutine, what a core.OwnNameCheck
// decides: it lists the election keys and waits until every lease that
// campaigns under this member's name, but is neither own nor of this
// process's current incarnation, is gone (see Rink.checkOwnName); then it
// tells the run goroutine.
func (fx netEffects) checkOwnName(own int64) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		b := newBackoff()
		c, step := core.NewOwnNameCheck(r.keys, r.opts.member, own, b.Next, r.log)
		for !step.Done {
			if step.After > 0 && !sleep(r.ctx, step.After) {
				return
			}
			if r.ctx.Err() != nil {
				return
			}
			if step.Await != 0 {
				r.awaitLeaseGone(r.opts.member, step.Await, false)
				step = c.Gone()
				continue
			}
			key, end := c.Range()
			ctx, cancel := context.WithTimeout(r.ctx, r.opts.ttl)
			resp, err := r.cli.Get(ctx, key, clientv3.WithRange(end))
			cancel()
			var kvs []*mvccpb.KeyValue
			if err == nil {
				kvs = resp.Kvs
			}
			step = c.Listed(kvs, err, r.curLease())
		}
		r.inbox.send(func(m *mail) { m.selfChecked = true })
	}()
}

// dropLineage deletes the map key if it is still at rev (see
// Rink.dropLineage), on a goroutine: once without an incarnation, else
// until it is done, the key has changed or inc ends.
func (fx netEffects) dropLineage(inc *incarnation, rev int64) {
	r := fx.r
	key := r.keys.Map()
	if inc == nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(r.ctx, r.opts.ttl)
			defer cancel()
			_, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
			if err != nil && r.ctx.Err() == nil {
				r.log.Warn("deleting the map key of a restored lineage failed; the next map of that lineage retries", zap.Error(err))
			}
		}()
		return
	}
	fx.guarded(inc, core.NewStrayDelete(key, rev, &inc.Inc, newBackoff().Next), nil, func(err error, backoff time.Duration) {
		r.log.Warn("deleting the map key of a restored lineage failed, retrying", zap.Error(err), zap.Duration("backoff", backoff))
	})
}

// awaitLeaseGone waits, on a goroutine, until lease is gone, then tells the
// run goroutine (see Rink.awaitLeaseGone).
func (fx netEffects) awaitLeaseGone(name string, lease int64) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.awaitLeaseGone(name, lease, true)
	}()
}

// deleteStray deletes key if it is still at rev, retrying on a goroutine
// while inc lasts (see Rink.sweepStrays).
func (fx netEffects) deleteStray(inc *incarnation, key string, rev int64) {
	fx.guarded(inc, core.NewStrayDelete(key, rev, &inc.Inc, newBackoff().Next), func() { fx.r.log.Warn("deleted a stray key", zap.String("key", key)) }, nil)
}

// repairKey carries out d, a key written back (see Rink.writeOwnKeyBack),
// on a goroutine, retrying while inc lasts.
func (fx netEffects) repairKey(inc *incarnation, d *core.StrayDelete) {
	fx.guarded(inc, d, nil, func(err error, backoff time.Duration) {
		fx.r.log.Warn("writing the member key back failed, retrying", zap.Error(err), zap.Duration("backoff", backoff))
	})
}

// guarded carries out d, a core.StrayDelete, on a goroutine: its key
// deleted (or written) if it is still at the revision d saw, sent again
// after a failure while inc lasts. done and retrying, when set, hear of
// success and of each retry.
func (fx netEffects) guarded(inc *incarnation, d *core.StrayDelete, done func(), retrying func(err error, backoff time.Duration)) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			ctx, cancel := context.WithTimeout(inc.ctx, r.opts.ttl)
			resp, err := execTxn(ctx, r.cli, d.Txn())
			cancel()
			ok, again := d.Replied(resp, err)
			if ok && done != nil {
				done()
			}
			if again > 0 && retrying != nil {
				retrying(err, again)
			}
			if again == 0 || !sleep(inc.ctx, again) {
				return
			}
		}
	}()
}

// rewriteMemberKey puts value into this member's key on a goroutine (see
// Rink.rewriteMemberKey).
func (fx netEffects) rewriteMemberKey(inc *incarnation, value, why string) {
	r := fx.r
	key := r.keys.Member(r.opts.member)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(inc.ctx, r.opts.ttl)
		defer cancel()
		_, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", inc.CreateRev),
				clientv3.Compare(clientv3.LeaseValue(key), "=", inc.Lease)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(clientv3.LeaseID(inc.Lease)))).
			Commit()
		if err != nil && inc.ctx.Err() == nil {
			r.log.Warn(why, zap.Error(err))
		}
	}()
}

// watchHeirs follows the heirs' warm-up readiness while inc lasts (see
// Rink.watchHeirs), on a goroutine.
func (fx netEffects) watchHeirs(inc *incarnation) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.watchHeirs(inc.ctx)
	}()
}

// rejoin resumes or joins anew on a goroutine (see Rink.startRejoin), and
// hands the run goroutine the new incarnation.
func (fx netEffects) rejoin(old *incarnation, join bool) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// The fenced incarnation's lease is revoked by the core once the
		// member key is not bound to it (see revokeFenced): never before,
		// since after a restore of etcd such a key keeps its old slots from
		// others (see hush).
		if !join {
			return
		}
		j := r.newJoiner(old)
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(r.ctx, r.opts.joinTimeout)
			inc, err := r.joinWith(ctx, j)
			cancel()
			if err == nil {
				select {
				case r.handoffCh <- input{kind: inJoined, joined: inc}:
					r.log.Info("rejoined", zap.Int64("lease", int64(inc.Lease)), zap.Int("attempt", attempt))
				case <-r.ctx.Done():
					// A rejoin: its key may keep slots that others may
					// still act on after a restore (see hush); let it expire.
					r.abandon(inc, ErrShutdown)
				}
				return
			}
			if r.ctx.Err() != nil {
				return
			}
			wait := j.Retry()
			r.log.Warn("rejoin failed, retrying", zap.Error(err), zap.Int("attempt", attempt), zap.Duration("backoff", wait))
			if !sleep(r.ctx, wait) {
				return
			}
		}
	}()
}

// revokeLease revokes lease (see revokeFenced) on a goroutine, best
// effort: what it misses expires with the lease.
func (fx netEffects) revokeLease(lease int64) {
	r := fx.r
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
		defer cancel()
		if _, err := r.cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
			r.log.Info("revoking the fenced incarnation's lease failed: it expires", zap.Error(err))
		}
	}()
}

// ack hands req to the ack writer (see writeAcks), replacing one not yet
// taken: req is lazy only if that one was too.
func (fx netEffects) ack(req core.AckReq) {
	r := fx.r
	select {
	case old := <-r.ackCh:
		req.Lazy = req.Lazy && old.Lazy
	default:
	}
	r.ackCh <- req
}

// relist has the watcher list the rink anew (see Rink.watch).
func (fx netEffects) relist() { fx.r.relist() }
