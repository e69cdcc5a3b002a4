package sim

import (
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// ErrTimeout is what a request gets when it or its answer was lost (its
// client was cut off, see Cut): as with a real client, the request may or
// may not have been applied. It is etcd's "request timed out", which says
// just that, so the members take it as etcd's (a join retries it, see
// core.Transient).
var ErrTimeout = fmt.Errorf("sim: %w", rpctypes.ErrTimeout)

// Client is one connection to the simulated etcd, as a member's clientv3
// client is. A request reaches etcd after a delay drawn in [MinDelay,
// MaxDelay], and its answer comes back after another. While the client is
// cut off, requests and answers are lost and the caller hears ErrTimeout
// after Timeout; its watches deliver nothing, and resume where they were
// when it is back (a watch the scheduler breaks instead ends, see Break).
type Client struct {
	w                  *World
	Name               string
	MinDelay, MaxDelay time.Duration
	Timeout            time.Duration
	cutUntil           time.Duration
	// lagUntil: until then its watches deliver nothing (their stream
	// lags, a cancellation too) while its requests go through (see
	// restore-unseen-lag).
	lagUntil time.Duration
}

// NewClient opens a client with delays of 0.1 to 2 ms each way and a
// timeout of 5 s.
func (w *World) NewClient(name string) *Client {
	return &Client{w: w, Name: name, MinDelay: 100 * time.Microsecond, MaxDelay: 2 * time.Millisecond, Timeout: 5 * time.Second}
}

// Cut cuts the client off for d.
func (c *Client) Cut(d time.Duration) {
	c.cutUntil = max(c.cutUntil, c.w.now+d)
	c.w.Tracef("%s: cut off until %.6f", c.Name, c.cutUntil.Seconds())
}

func (c *Client) cut() bool { return c.w.now < c.cutUntil }

// LagWatches holds what the client's watches deliver for d: its requests
// and their answers go on as before.
func (c *Client) LagWatches(d time.Duration) {
	c.lagUntil = max(c.lagUntil, c.w.now+d)
	c.w.Tracef("%s: watches lag until %.6f", c.Name, c.lagUntil.Seconds())
}

func (c *Client) delay() time.Duration { return c.w.Between(c.MinDelay, c.MaxDelay) }

// do sends one request: apply runs at etcd when the request arrives, and
// done gets its answer when the answer arrives, or ErrTimeout.
func do[T any](c *Client, what string, apply func() (T, error), done func(T, error)) {
	w := c.w
	var zero T
	timeout := func() {
		w.After(c.Timeout, func() {
			w.Tracef("%s: %s: timed out", c.Name, what)
			done(zero, ErrTimeout)
		})
	}
	if c.cut() {
		w.Tracef("%s: %s: lost on the way", c.Name, what)
		timeout()
		return
	}
	w.After(c.delay(), func() {
		if c.cut() {
			w.Tracef("%s: %s: lost on the way", c.Name, what)
			timeout()
			return
		}
		failing := w.now < w.FailUntil && w.rng.IntN(2) == 0
		if failing && w.rng.IntN(2) == 0 {
			w.Tracef("%s: %s: refused (too many requests)", c.Name, what)
			w.After(c.delay(), func() { done(zero, fmt.Errorf("sim: %w", rpctypes.ErrTooManyRequests)) })
			return
		}
		rev := w.Etcd.Rev()
		resp, err := apply()
		if failing {
			// Applied, but the answer is a timeout.
			resp, err = zero, ErrTimeout
		}
		w.Tracef("%s: %s at etcd: revision %d, err %v", c.Name, what, w.Etcd.Rev(), err)
		if w.Etcd.Rev() != rev {
			w.pump()
		}
		w.After(c.delay(), func() {
			if c.cut() {
				w.Tracef("%s: %s: answer lost", c.Name, what)
				timeout()
				return
			}
			done(resp, err)
		})
	})
}

// Txn sends a transaction.
func (c *Client) Txn(r *etcdserverpb.TxnRequest, done func(*etcdserverpb.TxnResponse, error)) {
	do(c, "txn", func() (*etcdserverpb.TxnResponse, error) { return c.w.Etcd.Txn(r) }, done)
}

// Put sends a put.
func (c *Client) Put(r *etcdserverpb.PutRequest, done func(*etcdserverpb.PutResponse, error)) {
	do(c, fmt.Sprintf("put %s", r.Key), func() (*etcdserverpb.PutResponse, error) { return c.w.Etcd.Put(r) }, done)
}

// Range sends a range.
func (c *Client) Range(r *etcdserverpb.RangeRequest, done func(*etcdserverpb.RangeResponse, error)) {
	do(c, fmt.Sprintf("range %s", r.Key), func() (*etcdserverpb.RangeResponse, error) { return c.w.Etcd.Range(r) }, done)
}

// DeleteRange sends a delete.
func (c *Client) DeleteRange(r *etcdserverpb.DeleteRangeRequest, done func(*etcdserverpb.DeleteRangeResponse, error)) {
	do(c, fmt.Sprintf("delete %s", r.Key), func() (*etcdserverpb.DeleteRangeResponse, error) { return c.w.Etcd.DeleteRange(r) }, done)
}

// LeaseGrant sends a lease grant.
func (c *Client) LeaseGrant(r *etcdserverpb.LeaseGrantRequest, done func(*etcdserverpb.LeaseGrantResponse, error)) {
	do(c, "grant", func() (*etcdserverpb.LeaseGrantResponse, error) { return c.w.Etcd.LeaseGrant(r) }, done)
}

// LeaseRevoke sends a revocation.
func (c *Client) LeaseRevoke(r *etcdserverpb.LeaseRevokeRequest, done func(*etcdserverpb.LeaseRevokeResponse, error)) {
	do(c, fmt.Sprintf("revoke %x", r.ID), func() (*etcdserverpb.LeaseRevokeResponse, error) { return c.w.Etcd.LeaseRevoke(r) }, done)
}

// LeaseKeepAlive sends one renewal (TTL 0 in the answer: the lease is
// gone).
func (c *Client) LeaseKeepAlive(r *etcdserverpb.LeaseKeepAliveRequest, done func(*etcdserverpb.LeaseKeepAliveResponse, error)) {
	do(c, fmt.Sprintf("keep-alive %x", r.ID), func() (*etcdserverpb.LeaseKeepAliveResponse, error) {
		return c.w.Etcd.LeaseKeepAlive(r), nil
	}, done)
}

// Watch is a watch a client opened: its events reach deliver in order,
// each response after a drawn delay and holding what the scheduler drew
// (one revision or several).
type Watch struct {
	c         *Client
	m         *Watcher // nil until the request reaches etcd
	deliver   func(*etcdserverpb.WatchResponse)
	scheduled bool // a delivery is on its way
	ended     bool
}

// Watch opens a watch; it starts at etcd when the request arrives (a
// start revision of 0 means the revision after the one etcd is at then).
func (c *Client) Watch(r *etcdserverpb.WatchCreateRequest, deliver func(*etcdserverpb.WatchResponse)) *Watch {
	wa := &Watch{c: c, deliver: deliver}
	w := c.w
	var open func()
	open = func() {
		if wa.ended {
			return
		}
		if c.cut() {
			w.After(c.cutUntil-w.now+c.delay(), open) // (sent again once the client is back)
			return
		}
		wa.m = w.Etcd.Watch(r)
		w.watched[wa.m.ID] = wa
		w.Tracef("%s: watch %d of %q from %d", c.Name, wa.m.ID, r.Key, wa.m.next)
		if r.StartRevision == 0 {
			// A watch from etcd's revision: its client learns that it is
			// open, and from where, from a first response saying so
			// (etcd's created notification), ahead of any event.
			wa.scheduled = true
			rev := wa.m.next - 1
			var created func()
			created = func() {
				switch {
				case wa.ended:
				case c.cut():
					w.After(c.cutUntil-w.now+c.delay(), created)
				default:
					wa.scheduled = false
					wa.deliver(&etcdserverpb.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: rev}, WatchId: wa.m.ID, Created: true})
					w.pump()
				}
			}
			w.After(c.delay(), created)
			return
		}
		w.pump()
	}
	w.After(c.delay(), open)
	return wa
}

// Cancel ends the watch: nothing more is delivered.
func (wa *Watch) Cancel() {
	wa.ended = true
	if wa.m != nil {
		wa.c.w.Etcd.CancelWatch(wa.m)
		delete(wa.c.w.watched, wa.m.ID)
	}
}

// Break ends the watch as a broken stream does: its consumer hears a
// cancellation (no compaction) and must watch anew.
func (wa *Watch) Break() {
	if wa.ended {
		return
	}
	wa.Cancel()
	w := wa.c.w
	w.Tracef("%s: watch broken", wa.c.Name)
	w.After(wa.c.delay(), func() {
		wa.deliver(&etcdserverpb.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: w.Etcd.Rev()}, Canceled: true, CancelReason: "sim: watch broken"})
	})
}

// pump schedules a delivery for every watch that owes events (or its
// cancellation by a compaction) and has none on its way: after a drawn
// delay, of the revisions from the next it owes up to a drawn one, so
// that one response may carry several writes.
func (w *World) pump() {
	ids := make([]int64, 0, len(w.watched))
	for id := range w.watched {
		ids = append(ids, id)
	}
	slices.Sort(ids) // (map order is random: the history must not be)
	for _, id := range ids {
		wa := w.watched[id]
		if wa.scheduled || wa.ended || !w.Etcd.Pending(wa.m) {
			continue
		}
		wa.scheduled = true
		w.After(wa.c.delay(), func() {
			wa.scheduled = false
			if wa.ended {
				return
			}
			if wa.c.cut() {
				// Held while its client is cut off; tried again then.
				wa.scheduled = true
				w.After(wa.c.cutUntil-w.now, func() { wa.scheduled = false; w.pump() })
				return
			}
			if w.now < wa.c.lagUntil {
				wa.scheduled = true
				w.After(wa.c.lagUntil-w.now, func() { wa.scheduled = false; w.pump() })
				return
			}
			upto := wa.m.next + w.rng.Int64N(w.Etcd.Rev()-wa.m.next+1)
			resp := w.Etcd.Take(wa.m, upto)
			if resp == nil || len(resp.Events) == 0 && !resp.Canceled {
				w.pump() // (nothing of its range up to upto: etcd sends nothing)
				return
			}
			if resp.Canceled {
				wa.ended = true
				delete(w.watched, id)
			}
			if resp.CompactRevision != 0 {
				w.Tracef("%s: watch %d cancelled: compacted at %d", wa.c.Name, id, resp.CompactRevision)
			} else {
				w.Tracef("%s: watch %d delivers %d events up to %d", wa.c.Name, id, len(resp.Events), resp.Header.Revision)
			}
			wa.deliver(resp)
			w.pump()
		})
	}
}
