package core

import (
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// keeper decides when an incarnation's lease is renewed and when the
// member stops trusting it (see Rink.keep): a state machine with no I/O
// over fenceClock readings.
//
// Invariant: deadline is the send time of the last confirmed renewal plus
// the TTL the server granted, minus fenceMargin; the member trusts its
// lease only before it.
type Keeper struct {
	ttl      time.Duration
	interval int64 // between renewals: a third of the TTL
	Deadline int64 // the fence deadline
	tickAt   int64 // the next renewal is due then
	sent     int64 // the renewal in flight was sent then (0: none in flight)
}

// fenceWhy says why a keeper fences (empty: it does not).
type FenceWhy string

const (
	FenceLate      FenceWhy = "lease renewal not confirmed in time: fencing"
	FenceSuspended FenceWhy = "lease deadline passed while the host was suspended or stalled: fencing"
	FenceExpired   FenceWhy = "lease expired on the server: fencing"
)

func NewKeeper(ttl time.Duration, sent, deadline int64) *Keeper {
	k := &Keeper{ttl: ttl, interval: int64(ttl / 3), Deadline: deadline}
	k.tickAt = sent + k.interval
	return k
}

// Next returns, at clock reading now, whether to fence, or to send a
// renewal (then Renewed), or else the reading to look again at. With a
// renewal, wakeAt is the reading its answer must come by: the fence
// deadline, at which a renewal still in flight is abandoned and Renewed
// told so, because the lease may be gone by then and waiting longer would
// keep the member trusting it.
func (k *Keeper) Next(now int64) (fence FenceWhy, renew bool, wakeAt int64) {
	switch {
	case now >= k.Deadline && now >= k.tickAt:
		// The host was suspended (or the process stalled) past the
		// deadline, and the fence timer has not caught up yet.
		return FenceSuspended, false, 0
	case now >= k.Deadline:
		return FenceLate, false, 0
	case now >= k.tickAt:
		k.sent = now
		return "", true, k.Deadline
	}
	return "", false, min(k.tickAt, k.Deadline)
}

// Renewed handles the answer to the renewal next asked for, at now: the
// TTL the server granted (err nil), or the error. It says whether to
// fence.
func (k *Keeper) Renewed(ttl int64, err error, now int64) FenceWhy {
	sent := k.sent
	k.sent = 0
	switch {
	case err == nil && ttl > 0:
		k.Deadline = DeadlineAfter(sent, ttl, k.ttl)
		k.tickAt = sent + k.interval
	case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
		return FenceExpired
	case now >= k.Deadline:
		return FenceLate
	default:
		// The renewal failed but the lease may still be alive: try again
		// soon; the deadline bounds how long we keep trusting it.
		k.tickAt = now + min(k.interval, int64(200*time.Millisecond))
	}
	return ""
}

// deadlineAfter is the fence deadline for a renewal sent at sent and
// granted ttl seconds, of a lease asked for with TTL lease. A TTL granted
// longer than asked for (etcd grants none below 1.5 of its election
// timeouts) counts as the one asked for: what is timed by the TTL (the
// quiet times, a drain timeout a sidecar derives from it) assumes that a
// member cut off or paused stops within 7/8 of it.
func DeadlineAfter(sent, ttl int64, lease time.Duration) int64 {
	return sent + int64(min(time.Duration(ttl)*time.Second, lease)-FenceMargin(lease))
}

// fenceMargin is how long before the server could expire the lease a member
// stops trusting it. It covers clock rate drift between this process and the
// etcd leader (assumed far below 1%), scheduling delay of the fence itself,
// and etcd's own lease checking granularity works in our favour.
func FenceMargin(ttl time.Duration) time.Duration { return ttl / 8 }
