package rink

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// keeper decides when an incarnation's lease is renewed and when the
// member stops trusting it (see Rink.keep): a state machine with no I/O
// over fenceClock readings.
//
// Invariant: deadline is the send time of the last confirmed renewal plus
// the TTL the server granted, minus fenceMargin; the member trusts its
// lease only before it.
type keeper struct {
	ttl      time.Duration
	interval int64 // between renewals: a third of the TTL
	deadline int64 // the fence deadline
	tickAt   int64 // the next renewal is due then
	sent     int64 // the renewal in flight was sent then (0: none in flight)
}

// fenceWhy says why a keeper fences (empty: it does not).
type fenceWhy string

const (
	fenceLate      fenceWhy = "lease renewal not confirmed in time: fencing"
	fenceSuspended fenceWhy = "lease deadline passed while the host was suspended or stalled: fencing"
	fenceExpired   fenceWhy = "lease expired on the server: fencing"
)

func newKeeper(ttl time.Duration, sent, deadline int64) *keeper {
	k := &keeper{ttl: ttl, interval: int64(ttl / 3), deadline: deadline}
	k.tickAt = sent + k.interval
	return k
}

// Next returns, at clock reading now, whether to fence, or to send a
// renewal (then renewed), or else the reading to look again at.
func (k *keeper) Next(now int64) (fence fenceWhy, renew bool, wakeAt int64) {
	switch {
	case now >= k.deadline && now >= k.tickAt:
		// The host was suspended (or the process stalled) past the
		// deadline, and the fence timer has not caught up yet.
		return fenceSuspended, false, 0
	case now >= k.deadline:
		return fenceLate, false, 0
	case now >= k.tickAt:
		k.sent = now
		return "", true, 0
	}
	return "", false, min(k.tickAt, k.deadline)
}

// Renewed handles the answer to the renewal next asked for, at now: the
// TTL the server granted (err nil), or the error. It says whether to
// fence.
func (k *keeper) Renewed(ttl int64, err error, now int64) fenceWhy {
	sent := k.sent
	k.sent = 0
	switch {
	case err == nil && ttl > 0:
		k.deadline = deadlineAfter(sent, ttl, k.ttl)
		k.tickAt = sent + k.interval
	case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fenceExpired
	case now >= k.deadline:
		return fenceLate
	default:
		// The renewal failed but the lease may still be alive: try again
		// soon; the deadline bounds how long we keep trusting it.
		k.tickAt = now + min(k.interval, int64(200*time.Millisecond))
	}
	return ""
}

// keep renews the incarnation's lease every third of the TTL and fences the
// member when it cannot confirm a renewal in time (see keeper).
//
// We do not rely on clientv3's KeepAlive channel or Session.Done for this: the
// client measures the lease's remaining life from when a reply arrives and
// checks it once a second, so it can notice an expired lease about a second
// after the server has already deleted the lease's keys. Here the deadline is
// the send time of the last confirmed renewal plus the granted TTL, minus a
// margin, and a renewal in flight is abandoned when that deadline passes.
//
// Deadlines are fenceClock readings, which count time the host spent
// suspended; the timers do not, so after a resume the keeper may wake late,
// and then fences if the deadline has passed (role contexts' Err has already
// said so on the spot).
func (r *Rink) keep(inc *incarnation, sent, deadline int64) {
	defer close(inc.lost)
	k := newKeeper(r.opts.ttl, sent, deadline)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		why, renew, wakeAt := k.Next(r.clock())
		if why != "" {
			r.log.Warn(string(why), zap.Duration("ttl", r.opts.ttl))
			r.fence(inc, ErrFenced)
			return
		}
		if renew {
			cctx, cancel := context.WithTimeout(inc.ctx, untilClock(k.deadline))
			resp, err := r.cli.KeepAliveOnce(cctx, inc.lease)
			cancel()
			if inc.ctx.Err() != nil {
				return
			}
			var ttl int64
			if err == nil {
				ttl = resp.TTL
			}
			if why := k.Renewed(ttl, err, r.clock()); why != "" {
				r.log.Warn(string(why), zap.Error(err))
				r.fence(inc, ErrFenced)
				return
			}
			if err != nil {
				r.log.Info("lease renewal failed, retrying", zap.Error(err))
			}
			inc.deadline.Store(k.deadline)
			continue
		}
		t.Reset(untilClock(wakeAt))
		select {
		case <-inc.ctx.Done():
			return
		case <-t.C:
		}
	}
}
