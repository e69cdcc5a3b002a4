package rink

// The simulator's pumps (see simmember.go): they carry out what a member's
// keeper, acknowledgement writer and watches ask of etcd, against the
// simulator's model of it. Nothing here runs in production.

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pumpKeeper carries out what the keeper asks (see Rink.keep).
func (m *simMember) pumpKeeper() {
	k, inc := m.keep, m.keepInc
	if m.dead || inc.ctx.Err() != nil {
		return
	}
	why, renew, wakeAt := k.Next(m.env.Clock())
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
			if why := k.Renewed(ttl, err, m.env.Clock()); why != "" {
				m.trace("%s (%v)", string(why), err)
				m.r.fence(inc, ErrFenced)
				m.settle()
				return
			}
			inc.deadline.Store(k.Deadline)
			m.pumpKeeper()
		}
		m.env.After(time.Duration(k.Deadline-m.env.Clock()), func() { done(0, context.DeadlineExceeded) })
		m.etcd.LeaseKeepAlive(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(inc.Lease)}, func(resp *etcdserverpb.LeaseKeepAliveResponse, err error) {
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
			w.Take(*m.acksMail)
			m.acksMail = nil
		}
		if w.Idle() && len(m.acksQueue) > 0 {
			resp := m.acksQueue[0]
			m.acksQueue = m.acksQueue[1:]
			wr := watchResponseOf(resp)
			w.Changed(wr.Events, wr.Err(), !resp.Canceled)
			continue
		}
		txn, wait := w.Next(m.env.Now())
		if w.WatchRev != m.acksRev {
			if m.acksWatch != nil {
				m.acksWatch()
				m.acksWatch, m.acksQueue = nil, nil
			}
			m.acksRev = w.WatchRev
			if w.WatchRev != 0 {
				m.acksWatch = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(w.Key), StartRevision: w.WatchRev}, func(resp *etcdserverpb.WatchResponse) {
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
				m.trace("ack seq %d: written %v, err %v", w.Cur.Seq, err == nil && resp.Succeeded, err)
				w.Replied(resp, err, m.env.Now())
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
	key, end := r.keys.Narrowed()
	var extra []string
	switch {
	case f.own:
		key = r.keys.Member(r.opts.member)
		end = key + "\x00"
	case wide:
		key, end = r.keys.Followed()
		extra = []string{r.keys.Snapshot()}
	default:
		extra = []string{r.keys.Snapshot(), r.keys.Member(r.opts.member)}
	}
	ops := []*etcdserverpb.RequestOp{wire.Range(key, end)}
	for _, k := range extra {
		ops = append(ops, wire.Get(k))
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

// (warm-up is not simulated)
