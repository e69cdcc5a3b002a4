package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/core"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.uber.org/zap"
)

// keep renews the incarnation's lease every third of the TTL and fences the
// member when it cannot confirm a renewal in time (see keeper).
//
// We do not rely on clientv3's KeepAlive channel or Session.Done for this: the
// client measures the lease's remaining life from when a reply arrives and
// checks it once a second, so it can notice an expired lease about a second
// after the server has already deleted the lease's keys. Here the deadline is
// the send time of the last confirmed renewal plus the granted TTL (no more
// than the TTL asked for: see core.DeadlineAfter), minus a
// margin, and a renewal in flight is abandoned when that deadline passes.
//
// Deadlines are fenceClock readings, which count time the host spent
// suspended; the timers do not, so after a resume the keeper may wake late,
// and then fences if the deadline has passed (role contexts' Err has already
// said so on the spot).
func (r *Rink) keep(inc *incarnation, sent, deadline int64) {
	defer close(inc.lost)
	k := core.NewKeeper(r.opts.ttl, sent, deadline)
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
			cctx, cancel := context.WithTimeout(inc.ctx, untilClock(wakeAt))
			resp, err := r.cli.KeepAliveOnce(cctx, clientv3.LeaseID(inc.Lease))
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
			inc.deadline.Store(k.Deadline)
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
