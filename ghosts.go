package rink

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Ghosts. A member key can go while its member still acts: an operator
// deletes it (or revokes nothing and deletes the key) while the member is
// cut off etcd, and the member, which cannot see the deletion, holds its
// roles until it fences, up to 7/8 of a TTL after its last renewal. So a
// key that goes while the applied map still ranks its member (a graceful
// departure removes the member from the map in the same transaction; a
// crash's key goes with its lease) makes the member a ghost: nothing
// starts until its lease is gone, which etcd tells (LeaseTimeToLive). A
// crash's ghost is gone at the first question; an operator's lasts until
// the member's lease runs out.

// noteGhosts makes ghosts of the members whose keys went (gone: the keys a
// watch batch deleted, or that a listing no longer has, as they were) and
// have none now, while the applied map ranks them. It costs what the batch
// deleted, not what the view holds: a clone of the view per batch made
// every member's every event O(members), and a join at 1,000 members six
// times slower (issue 25).
func (r *Rink) noteGhosts(gone map[string]memberInfo) {
	st := &r.st
	for name, m := range gone {
		if _, ok := st.members[name]; ok || name == r.opts.member || m.lease == 0 || st.cur.index(name) < 0 {
			continue
		}
		if st.ghosts == nil {
			st.ghosts = map[int64]string{}
		}
		if _, ok := st.ghosts[m.lease]; ok {
			continue
		}
		st.ghosts[m.lease] = name
		lease := m.lease
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.awaitLeaseGone(name, lease)
		}()
	}
}

// awaitLeaseGone asks etcd until lease is gone, then tells the run
// goroutine.
func (r *Rink) awaitLeaseGone(name string, lease int64) {
	b := newBackoff()
	logged := false
	for r.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(r.ctx, r.opts.ttl)
		resp, err := r.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		cancel()
		wait := b.next()
		switch {
		case err == nil && resp.TTL < 0: // (0: under a second left)
			select {
			case r.ghostCh <- lease:
			case <-r.ctx.Done():
			}
			return
		case err == nil:
			if !logged {
				logged = true
				r.log.Warn("a member's key was deleted while its lease lives: starting nothing until the lease is gone",
					zap.String("member", name), zap.Int64("ttl", resp.TTL))
			}
			wait = max(min(time.Duration(resp.TTL)*time.Second, r.opts.ttl/4), 50*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			return
		}
	}
}
