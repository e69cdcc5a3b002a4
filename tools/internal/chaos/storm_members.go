package chaos

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The storm's operations on members' keys that take more than one step
// (issue 22): a member key deleted while its member is cut off, with or
// without a newcomer listing the rink at that moment; a replacement under
// the same name; a member of a protocol nobody speaks.

// strangerValue is the member value "stranger-member" puts: a member that
// speaks only a protocol no release has, whom the leader leaves unranked.
const strangerValue = `{"protocols":[9]}`

// opAt records an operation that began at mono and is logged only when
// done (it waited for something): it goes into the list in order of time.
// The caller holds st.mu.
func (r *run) opAt(kind, target string, mono int64) {
	i := len(r.faults)
	for i > 0 && r.faults[i-1].Mono > mono {
		i--
	}
	r.faults = slices.Insert(r.faults, i, Fault{Kind: kind, Target: target, Mono: mono})
	r.logf("op %-22s %s (began at %s)", kind, target, secs(r.began, mono))
}

// cutRandom cuts a live member, drawn at random, off etcd for a while
// drawn as a partition's (TTL/4 to 2 TTL), and schedules the undo. The
// caller holds st.mu; ok is false when no member is live.
func (r *run) cutRandom() (p *proc, d time.Duration, ok bool) {
	pool := r.live()
	if len(pool) == 0 {
		return nil, 0, false
	}
	p = pool[r.rng.IntN(len(pool))]
	d = r.randDur(r.cfg.TTL/4, 2*r.cfg.TTL)
	st := r.st
	r.cut(p)
	r.later(d, func() { st.mu.Lock(); r.uncut(p); st.mu.Unlock() })
	return p, d, true
}

// deleteMemberKey deletes a member key and says what happened.
func (r *run) deleteMemberKey(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.admin.Delete(ctx, "rink/chaos/members/"+name)
	at := secs(r.began, Now())
	if err != nil {
		return fmt.Sprintf("deleting its key failed at %s: %v", at, err)
	}
	return fmt.Sprintf("its key deleted at %s (%d deleted, revision %d)", at, resp.Deleted, resp.Header.Revision)
}

// memberKeyDeleteCut ("member-key-delete-cut") cuts a live member off etcd
// for a while and deletes its member key right after: it cannot see the
// deletion, and acts on its roles until it fences. Half the time a
// newcomer starts at the same instant, and the key is deleted the moment
// the newcomer's own key appears, so that the newcomer's first listing of
// the rink may come after the deletion: it never sees the key go.
func (r *run) memberKeyDeleteCut() (bool, error) {
	const kind = "member-key-delete-cut"
	st := r.st
	st.mu.Lock()
	began := Now()
	p, d, ok := r.cutRandom()
	if !ok {
		st.mu.Unlock()
		return false, nil
	}
	newcomer := r.rng.IntN(2) == 0
	var q *proc
	note := ""
	if newcomer {
		if len(r.live()) >= r.cfg.Members+3 {
			note = "; no newcomer: the rink is full"
		} else {
			var err error
			if q, err = r.startWorker(r.newName()); err != nil {
				st.mu.Unlock()
				return false, err
			}
		}
	}
	st.mu.Unlock()
	if q != nil {
		if seen, err := r.awaitKey("rink/chaos/members/"+q.name, 5*time.Second); err != nil {
			note = fmt.Sprintf("; newcomer %s, its key not seen within 5 s (%v)", q.base, err)
		} else {
			note = fmt.Sprintf("; newcomer %s, its key seen at %s", q.base, secs(r.began, seen))
		}
	}
	what := r.deleteMemberKey(p.name)
	st.mu.Lock()
	defer st.mu.Unlock()
	r.opAt(kind, fmt.Sprintf("%s cut for %v%s; %s", p.base, d.Round(time.Millisecond), note, what), began)
	return true, nil
}

// awaitKey waits, at most d, for key to exist, and returns when it was
// seen (CLOCK_MONOTONIC).
func (r *run) awaitKey(key string, d time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		resp, err := r.admin.Get(ctx, key)
		if err == nil {
			if len(resp.Kvs) > 0 {
				return Now(), nil
			}
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range r.admin.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterDelete()) {
				if wr.Err() != nil {
					break // compacted, or no leader: read it again
				}
				if len(wr.Events) > 0 {
					wcancel()
					return Now(), nil
				}
			}
			wcancel()
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// sameNameReplace ("same-name-replace") replaces a live member the way a
// StatefulSet does: the old process is cut off etcd (its node is gone, as
// far as etcd can tell), its member key is deleted, and a new process
// starts under the same name. The old process, once its cut heals, finds
// its name taken and keeps trying to join again; one TTL later it is told
// to leave (SIGTERM), counted as departed. Both processes log under the
// same member name, each to a log of its own: the checkers tell them apart
// by process (Record.Proc).
func (r *run) sameNameReplace() (bool, error) {
	const kind = "same-name-replace"
	st := r.st
	st.mu.Lock()
	began := Now()
	old, d, ok := r.cutRandom()
	if !ok {
		st.mu.Unlock()
		return false, nil
	}
	old.replaced = true // no other operation picks it from now on
	r.later(d+r.cfg.TTL, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if old.leaving {
			return
		}
		old.leaving = true
		st.departed = append(st.departed, old.name)
		old.signal(syscall.SIGTERM)
		r.op("replaced-leave", old.base+" (its name taken by a replacement)")
	})
	st.mu.Unlock()
	what := r.deleteMemberKey(old.name)
	st.mu.Lock()
	defer st.mu.Unlock()
	q, err := r.startWorker(old.name)
	if err != nil {
		return false, err
	}
	r.opAt(kind, fmt.Sprintf("%s cut for %v; %s; replaced by %s (the old one told to leave %v after)",
		old.base, d.Round(time.Millisecond), what, q.base, (d+r.cfg.TTL).Round(time.Millisecond)), began)
	return true, nil
}

// strangerMember ("stranger-member") puts a member key of a protocol no
// release speaks, bound to a lease kept alive for a while and then
// revoked: the leader leaves it unranked, and it must hold up no handover.
func (r *run) strangerMember() (bool, error) {
	const kind, key = "stranger-member", "rink/chaos/members/future"
	st := r.st
	st.mu.Lock()
	if st.stranger {
		st.mu.Unlock()
		return false, nil
	}
	st.stranger = true
	d := r.randDur(r.cfg.TTL/4, 2*r.cfg.TTL)
	st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ttl := max(int64((r.cfg.TTL+time.Second-1)/time.Second), 1)
	lease, err := r.admin.Grant(ctx, ttl)
	if err == nil {
		_, err = r.admin.Put(ctx, key, strangerValue, clientv3.WithLease(lease.ID))
	}
	if err != nil {
		// A lease granted without its key expires by itself.
		st.mu.Lock()
		defer st.mu.Unlock()
		st.stranger = false
		r.op(kind, "failed: "+err.Error())
		return true, nil
	}
	kctx, kcancel := context.WithCancel(context.Background())
	if ch, err := r.admin.KeepAlive(kctx, lease.ID); err == nil {
		go func() {
			for range ch { // drained until the keep-alive ends
			}
		}()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	r.op(kind, fmt.Sprintf("%q = %q on lease %x (TTL %d s) for %v", key, strangerValue, lease.ID, ttl, d.Round(time.Millisecond)))
	r.later(d, func() {
		kcancel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.admin.Revoke(ctx, lease.ID)
		cancel()
		st.mu.Lock()
		defer st.mu.Unlock()
		st.stranger = false
		if err != nil {
			r.logf("   stranger's lease %x: revoke failed (%v); it expires within %d s", lease.ID, err, ttl)
		} else {
			r.logf("   stranger's lease %x revoked", lease.ID)
		}
	})
	return true, nil
}
