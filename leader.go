package rink

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// leadership is the run goroutine's state while this member leads.
type leadership struct {
	inc *incarnation
	key string // our election key
	rev int64  // its create revision: proclamations are guarded by it

	since   map[string]time.Time // when each waiting member was first seen (monotonic)
	busy    bool                 // a proclamation is in flight
	waitRev int64                // plan only once the view has reached this revision
	timer   *time.Timer          // next rebalance or retry
	retry   *backoff
	stopAgg context.CancelFunc // stops the acknowledgement aggregator
	refused string             // why the last planned map was not proclaimed (logged once)
}

type elected struct {
	inc *incarnation
	key string
	rev int64
}

type proclaimResult struct {
	lead    *leadership
	version int64
	rev     int64 // ok: the revision of our write; otherwise the map key's mod revision
	ok      bool  // the map was written
	lost    bool  // our election key is gone
	err     error
}

// campaign starts a goroutine that runs for leadership for the life of inc.
//
// It uses concurrency.Election over a concurrency.Session built on inc's
// lease. The session is orphaned at once: it would otherwise renew the lease
// a second time, and renewals and the fencing that depends on their timing
// are the keeper's job (see keep).
//
// The election gets a client of its own that shares the real client's
// connection (its KV, Watcher and Lease) but whose context ends with the
// incarnation. A cancelled Campaign resigns using its client's context; on
// the shared client that context never ends, and with etcd unreachable the
// resignation would block until the connection came back, holding up
// Shutdown. It is never closed: Close would close the shared Watcher and
// Lease.
func (r *Rink) campaign(inc *incarnation) {
	ec := clientv3.NewCtxClient(inc.ctx, clientv3.WithZapLogger(r.log))
	ec.KV, ec.Watcher, ec.Lease = r.cli.KV, r.cli.Watcher, r.cli.Lease
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		b := newBackoff()
		for inc.ctx.Err() == nil {
			sess, err := concurrency.NewSession(ec, concurrency.WithLease(inc.lease), concurrency.WithContext(inc.ctx))
			if err == nil {
				sess.Orphan()
				// NewElection adds the "/" itself: keys are rink/<name>/election/<lease>.
				e := concurrency.NewElection(sess, strings.TrimSuffix(r.keys.election(), "/"))
				if err = e.Campaign(inc.ctx, r.opts.member); err == nil {
					select {
					case r.electedCh <- elected{inc: inc, key: e.Key(), rev: e.Rev()}:
					case <-inc.ctx.Done():
					}
					return
				}
			}
			if inc.ctx.Err() != nil {
				return
			}
			wait := b.next()
			r.log.Warn("campaign failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
			sleep(inc.ctx, wait)
		}
	}()
}

func (r *Rink) onElected(e elected) {
	st := &r.st
	if e.inc != st.inc || st.stopping {
		return
	}
	r.log.Info("elected leader", zap.Int64("version", st.cur.Version))
	st.lead = &leadership{inc: e.inc, key: e.key, rev: e.rev, since: map[string]time.Time{}, retry: newBackoff()}
	st.dirty = true
	var ctx context.Context
	ctx, st.lead.stopAgg = context.WithCancel(e.inc.ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.aggregate(ctx, e.key, e.rev)
	}()
}

func (r *Rink) stopLeading() {
	st := &r.st
	if st.lead == nil {
		return
	}
	if st.lead.timer != nil {
		st.lead.timer.Stop()
	}
	st.lead.stopAgg()
	st.lead = nil
}

// plan runs after every event while this member leads: when membership, the
// map or a timer changed something, it derives the next map and proclaims it
// if it differs from the current one.
func (r *Rink) plan() {
	st := &r.st
	l := st.lead
	if l == nil || !st.dirty || l.busy || st.rev < l.waitRev || st.stopping || st.incompatible != nil ||
		st.inc == nil || !st.selfSeen {
		return
	}
	st.dirty = false
	now := time.Now()
	live := liveByAge(st.members)
	ranked := make(map[string]bool, len(st.cur.Members))
	for _, name := range st.cur.Members {
		ranked[name] = true
	}
	in := planInput{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}}
	for _, name := range live {
		if !ranked[name] {
			if _, ok := l.since[name]; !ok {
				l.since[name] = now
			}
		}
	}
	var due time.Time
	for name, t := range l.since {
		if _, ok := st.members[name]; !ok || ranked[name] {
			delete(l.since, name)
			continue
		}
		in.Since[name] = t
		if now.Sub(t) >= r.opts.delay {
			in.Ready[name] = true
		} else if at := t.Add(r.opts.delay); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if !due.IsZero() {
		l.timer = time.NewTimer(time.Until(due))
	}

	next := plan(st.cur, in)
	if next.sameAssignment(st.cur) && st.cur.Version > 0 && st.curRev != 0 {
		return // nothing changed (a map key that was deleted is written again)
	}
	if st.cur.Version == 0 && len(live) == 0 {
		return
	}
	next.Version = st.cur.Version + 1
	next.Leader = r.opts.member
	if err := r.usable(next); err != nil {
		if l.refused != err.Error() {
			l.refused = err.Error()
			r.log.Error("refusing to proclaim a map that members would refuse", zap.Error(err), zap.Int64("version", next.Version))
		}
		return
	}
	l.refused = ""
	l.busy = true
	mapRev := st.curRev
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(l.inc.ctx, r.opts.ttl)
		res := r.proclaim(ctx, l, next, mapRev)
		cancel()
		select {
		case r.proclaimedCh <- res:
		case <-r.ctx.Done():
		}
	}()
}

// usable checks a planned map as members check what they apply: a leader
// never proclaims a map that it would refuse itself.
func (r *Rink) usable(m rankMap) error {
	_, err := decodeMap(m.encode(), r.opts.slots)
	return err
}

// proclaim writes m as the rink's map, provided we still lead and the map
// key is still at mapRev. Extra operations join the same transaction.
func (r *Rink) proclaim(ctx context.Context, l *leadership, m rankMap, mapRev int64, extra ...clientv3.Op) proclaimResult {
	res := proclaimResult{lead: l, version: m.Version}
	ops := append([]clientv3.Op{clientv3.OpPut(r.keys.rankMap(), string(m.encode()))}, extra...)
	resp, err := r.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev),
			clientv3.Compare(clientv3.ModRevision(r.keys.rankMap()), "=", mapRev),
		).
		Then(ops...).
		Else(clientv3.OpGet(l.key), clientv3.OpGet(r.keys.rankMap())).
		Commit()
	if err != nil {
		res.err = err
		return res
	}
	res.rev, res.ok = resp.Header.Revision, resp.Succeeded
	if !resp.Succeeded {
		// Wait for the map write that beat us, not for the header revision:
		// in an etcd shared with others that may be a write our watch of
		// the rink's keys never sees.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		res.lost = len(kvs) == 0 || kvs[0].CreateRevision != l.rev
		res.rev = 0
		if m := resp.Responses[1].GetResponseRange().Kvs; len(m) > 0 {
			res.rev = m[0].ModRevision
		}
	}
	return res
}

func (r *Rink) onProclaimed(res proclaimResult) {
	st := &r.st
	l := st.lead
	if l == nil || res.lead != l {
		return
	}
	l.busy = false
	st.dirty = true
	switch {
	case res.err != nil:
		wait := l.retry.next()
		r.log.Warn("proclaiming the map failed, retrying", zap.Error(res.err), zap.Int64("version", res.version), zap.Duration("backoff", wait))
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timer = time.NewTimer(wait)
		st.dirty = false // the timer sets it again
	case res.ok:
		l.retry.reset()
		l.waitRev = res.rev
		r.log.Info("proclaimed map", zap.Int64("version", res.version), zap.Int64("revision", res.rev))
	case res.lost:
		r.log.Warn("lost leadership: our election key is gone")
		r.stopLeading()
		if st.inc != nil && st.inc.ctx.Err() == nil {
			r.campaign(st.inc)
		}
	case res.rev == 0:
		// The map key is gone but our view still shows it: retry shortly,
		// once the watch has delivered the deletion.
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timer = time.NewTimer(l.retry.next())
		st.dirty = false // the timer sets it again
	default:
		// The map changed under us: plan again once the view has caught up.
		l.waitRev = res.rev
	}
}

// handOver is a leaving leader's last act: it proclaims a map without this
// member (promoting a waiting member into its index, or moving the highest
// index into it) and deletes its own member key in the same transaction, so
// that the members taking over its slots see both in one watch event and
// start at once. If the view is stale, it reads the rink again and retries.
func (r *Rink) handOver(ctx context.Context) {
	st := &r.st
	l, self := st.lead, r.opts.member
	key := r.keys.member(self)
	members, cur, curRev := st.members, st.cur, st.curRev
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		live := liveByAge(members)
		live = deleteName(live, self)
		base := cur
		next := plan(base, planInput{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}})
		next.Version, next.Leader = base.Version+1, self
		if err := r.usable(next); err != nil {
			r.log.Error("hand-over: refusing to proclaim a map that members would refuse", zap.Error(err))
			return
		}
		r.log.Debug("hand-over: proclaiming", zap.Int("attempt", attempt))
		res := r.proclaim(ctx, l, next, curRev,
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", st.inc.createRev)},
				[]clientv3.Op{clientv3.OpDelete(key)}, nil))
		if res.ok {
			r.log.Info("handed over leadership", zap.Int64("version", next.Version))
			return
		}
		if res.err != nil || res.lost {
			r.log.Warn("hand-over failed; successors wait for the lease to be revoked", zap.Error(res.err), zap.Bool("lost", res.lost))
			return
		}
		key, end := r.keys.followed()
		resp, err := r.cli.Get(ctx, key, clientv3.WithRange(end))
		if err != nil {
			return
		}
		members = map[string]memberInfo{}
		curRev = 0
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			switch {
			case r.keys.isMember(k):
				if name, ok := r.keys.validMember(k); ok {
					members[name] = memberInfo{createRev: kv.CreateRevision}
				}
			case r.keys.isMap(k):
				m, err := decodeMap(kv.Value, r.opts.slots)
				if err != nil {
					return
				}
				cur, curRev = m, kv.ModRevision
			}
		}
	}
}

func deleteName(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}
