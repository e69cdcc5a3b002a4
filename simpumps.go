package rink

// The simulator's pumps (see simmember.go): they carry out what a member's
// keeper, acknowledgement writer and watches ask of etcd, against the
// simulator's model of it. Nothing here runs in production.

import (
	"context"
	"errors"
	"time"

	"github.com/rink-go/rink/internal/core"
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
		m.env.After(time.Duration(wakeAt-m.env.Clock()), func() { done(0, context.DeadlineExceeded) })
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

// simFollower carries out what a core.Follower decides, against the
// model, as followOnce does with etcd's client: it opens a watch of a
// range from the revision etcd is at, lists the range once etcd says the
// watch is open, hands on the listing and then the watch's events newer
// than it, and starts over when the watch breaks (after the follower's
// wait) or its owner asks (at once).
type simFollower struct {
	m      *simMember
	f      *core.Follower
	gen    int    // numbers the attempts: an older one's answers are dropped
	cancel func() // ends the current attempt's watch (nil: none)
	// what says the range to follow (read at each attempt) and the keys
	// read with its listing; send takes what is handed on; ended reports
	// that the follower's owner is gone.
	what  func() (key, end string, extra []string, wide bool)
	send  func(watchBatch)
	ended func() bool
}

func (m *simMember) newFollower(what func() (key, end string, extra []string, wide bool), send func(watchBatch), ended func() bool) *simFollower {
	return &simFollower{m: m, f: core.NewFollower(m.r.newBackoff()), what: what, send: send, ended: ended}
}

// viewFollower follows the member's view, or its own key (own).
func (m *simMember) viewFollower(own bool) *simFollower {
	r := m.r
	what := func() (key, end string, extra []string, wide bool) {
		if own {
			key = r.keys.Member(r.opts.member)
			return key, key + "\x00", nil, false
		}
		wide = r.wideView.Load()
		key, end, extra = r.viewRange(wide)
		return key, end, extra, wide
	}
	send := func(b watchBatch) {
		b.own = own
		m.step(input{kind: inBatch, batch: b})
	}
	return m.newFollower(what, send, func() bool { return false })
}

// stop ends the current attempt.
func (f *simFollower) stop() {
	f.gen++
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
}

// relist ends the current attempt and starts another at once.
func (f *simFollower) relist() { f.start() }

// start begins an attempt.
func (f *simFollower) start() {
	m := f.m
	f.stop()
	gen := f.gen
	live := func() bool { return !m.dead && gen == f.gen && !f.ended() }
	again := func(wait time.Duration) {
		f.stop()
		gen := f.gen
		m.env.After(wait, func() {
			if !m.dead && gen == f.gen && !f.ended() {
				f.start()
			}
		})
	}
	failed := func() { again(f.f.Failed(m.env.Clock())) }
	f.f.Begin(m.env.Clock())
	key, end, extra, wide := f.what()
	var queue []*etcdserverpb.WatchResponse // (what the watch said before the listing's answer)
	listed := false
	read := func(wr *etcdserverpb.WatchResponse) {
		if broken, wait := f.f.Response(wr.Canceled, m.env.Clock()); broken {
			again(wait)
			return
		}
		revs := make([]int64, len(wr.Events))
		for i, ev := range wr.Events {
			revs[i] = ev.Kv.ModRevision
		}
		n := f.f.Fresh(revs)
		if n == 0 {
			return
		}
		evs := make([]*clientv3.Event, n)
		for i, ev := range wr.Events[len(wr.Events)-n:] {
			evs[i] = (*clientv3.Event)(ev)
		}
		f.send(watchBatch{events: evs, rev: wr.Header.Revision, wide: wide})
	}
	list := func() {
		ops := []*etcdserverpb.RequestOp{wire.Range(key, end)}
		for _, k := range extra {
			ops = append(ops, wire.Get(k))
		}
		m.etcd.Txn(&etcdserverpb.TxnRequest{Success: ops}, func(resp *etcdserverpb.TxnResponse, err error) {
			if !live() {
				return
			}
			if err != nil {
				failed()
				return
			}
			var kvs []*mvccpb.KeyValue
			for _, rr := range resp.Responses {
				kvs = append(kvs, rr.GetResponseRange().Kvs...)
			}
			f.f.Listed(resp.Header.Revision)
			listed = true
			f.send(watchBatch{snapshot: true, kvs: kvs, rev: resp.Header.Revision, wide: wide})
			for len(queue) > 0 && live() {
				wr := queue[0]
				queue = queue[1:]
				read(wr)
			}
		})
	}
	opened := false
	f.cancel = m.etcd.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte(key), RangeEnd: []byte(end)}, func(wr *etcdserverpb.WatchResponse) {
		switch {
		case !live():
			if !m.dead && gen == f.gen && f.ended() {
				f.stop() // (its owner is gone: as the production watcher's context ends it)
			}
		case !opened:
			var err error
			if wr.Canceled || !wr.Created {
				err = errors.New("sim: watch not opened")
			}
			if !f.f.Opened(err) {
				failed()
				return
			}
			opened = true
			list()
		case !listed:
			queue = append(queue, wr)
		default:
			read(wr)
		}
	})
}
