package rink

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/rink-go/rink/internal/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The production watcher: it carries out what a core.Follower decides (when
// to list, which events the listing already holds, when and how long to
// wait before starting over) with etcd's client. The simulator's watcher
// (simFollower) carries out the same decisions against its model.

// watchBatch carries what the watcher saw: either a full listing of the
// rink's keys (after start or a broken watch) or the events of one watch
// response.
type watchBatch struct {
	snapshot bool
	wide     bool // of the wide view (see view.go)
	own      bool // of this member's own key alone (see followOwn)
	kvs      []*mvccpb.KeyValue
	events   []*clientv3.Event
	rev      int64
}

// errWatchClosed: a watch's channel closed with no error said.
var errWatchClosed = errors.New("rink: watch closed")

// follow feeds send with a listing of the keys in [key, end) and then the
// watch events newer than the listing; after any watch error (compaction,
// lost etcd leader, a broken stream) it starts over with a new listing (see
// core.Follower). It returns when ctx ends or send reports false.
func follow(ctx context.Context, cli *clientv3.Client, key, end string, log *zap.Logger, send func(watchBatch) bool) {
	f := core.NewFollower(newBackoff())
	for ctx.Err() == nil {
		more, wait := followOnce(ctx, cli, f, key, end, nil, nil, log, send)
		if !more {
			return
		}
		sleep(ctx, wait)
	}
}

// followOnce runs one of f's attempts: until the watch breaks (then wait
// is the backoff f drew), or until relist asks for a new listing (wait 0);
// more is false when it should stop for good. Keys in extra, outside
// [key, end), are read with the listing, not watched.
func followOnce(ctx context.Context, cli *clientv3.Client, f *core.Follower, key, end string, extra []string, relist <-chan struct{}, log *zap.Logger, send func(watchBatch) bool) (more bool, wait time.Duration) {
	f.Begin(fenceClock())
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, key, clientv3.WithRange(end), clientv3.WithCreatedNotify())
	created, ok := <-wch
	err := created.Err()
	if !ok && err == nil {
		err = errWatchClosed
	}
	if !f.Opened(err) {
		if ctx.Err() == nil {
			log.Warn("opening the watch failed, retrying", zap.Error(err))
		}
		return ctx.Err() == nil, f.Failed(fenceClock())
	}
	ops := []clientv3.Op{clientv3.OpGet(key, clientv3.WithRange(end))}
	for _, k := range extra {
		ops = append(ops, clientv3.OpGet(k))
	}
	resp, err := cli.Txn(wctx).Then(ops...).Commit()
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("listing the rink failed, retrying", zap.Error(err))
		}
		return ctx.Err() == nil, f.Failed(fenceClock())
	}
	var kvs []*mvccpb.KeyValue
	for _, r := range resp.Responses {
		kvs = append(kvs, r.GetResponseRange().Kvs...)
	}
	f.Listed(resp.Header.Revision)
	if !send(watchBatch{snapshot: true, kvs: kvs, rev: resp.Header.Revision}) {
		return false, 0
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-wch:
		case <-relist:
			return ctx.Err() == nil, 0
		}
		err := wr.Err()
		if !ok && err == nil {
			err = errWatchClosed
		}
		if again, wait := f.Response(err != nil || wr.Canceled, fenceClock()); again {
			if ctx.Err() == nil {
				log.Warn("watch broken, listing again", zap.Error(err))
			}
			return ctx.Err() == nil, wait
		}
		if n := f.Fresh(modRevs(wr.Events)); n > 0 {
			if !send(watchBatch{events: wr.Events[len(wr.Events)-n:], rev: wr.Header.Revision}) {
				return false, 0
			}
		}
	}
}

// modRevs returns the mod revisions of events, in order.
func modRevs(events []*clientv3.Event) []int64 {
	revs := make([]int64, len(events))
	for i, ev := range events {
		revs[i] = ev.Kv.ModRevision
	}
	return revs
}

// relist asks the watcher for a new listing of the rink (see underived).
func (r *Rink) relist() {
	select {
	case r.relistCh <- struct{}{}:
	default:
	}
}

func (r *Rink) sendBatch(b watchBatch) bool {
	select {
	case r.handoffCh <- input{kind: inBatch, batch: b}:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// backoff doubles a wait from 50 ms to 5 s, with jitter (see core.Backoff).
type backoff = core.Backoff

// newBackoff returns a backoff with a jitter source of its own, seeded
// from the global one (a backoff's owner may be any goroutine).
func newBackoff() *backoff {
	return core.NewBackoff(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newBackoff is newBackoff, drawing from the simulator's source in a
// simulated member.
func (r *Rink) newBackoff() *backoff {
	if r.simRand != nil {
		return core.NewBackoff(r.simRand)
	}
	return newBackoff()
}
