package sim

import (
	"sort"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// The model's watches. A watcher remembers the next revision it owes its
// watch; the scheduler decides when to deliver, and how much at once
// (Take), so that delays and batching are its to draw. A watcher whose
// next revision the store has compacted away is cancelled with the
// compaction's revision, as etcd cancels it.

// Watcher is one watch on the model.
//
// Invariants: next ≥ 1; every event of the watch's range below next has
// been delivered, none from next on; once canceled, nothing more is.
type Watcher struct {
	ID         int64
	key, end   []byte
	next       int64
	noPut      bool
	noDelete   bool
	prevKV     bool
	canceled   bool
	compactRev int64 // the compaction that cancelled it (0: none)
}

// Watch opens a watch: from the request's start revision, or from the
// next write when it gives none.
func (e *Etcd) Watch(r *etcdserverpb.WatchCreateRequest) *Watcher {
	e.nextWatch++
	w := &Watcher{ID: e.nextWatch, key: r.Key, end: r.RangeEnd, next: r.StartRevision, prevKV: r.PrevKv}
	if w.next == 0 {
		w.next = e.rev + 1
	}
	for _, f := range r.Filters {
		switch f {
		case etcdserverpb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case etcdserverpb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	e.watchers[w.ID] = w
	return w
}

// CancelWatch ends a watch.
func (e *Etcd) CancelWatch(w *Watcher) {
	w.canceled = true
	delete(e.watchers, w.ID)
}

// Pending reports whether the watch has something to deliver: events of
// its range up to the store's revision, or its cancellation by a
// compaction. A watch that owes no event is moved past the revisions it
// looked at (etcd sends nothing for them either).
func (e *Etcd) Pending(w *Watcher) bool {
	if w.canceled || w.next > e.rev {
		return false
	}
	if w.next < e.compacted {
		return true
	}
	i := sort.Search(len(e.log), func(i int) bool { return e.log[i].Kv.ModRevision >= w.next })
	for _, ev := range e.log[i:] {
		if inRange(ev.Kv.Key, w.key, w.end) && !(ev.Type == mvccpb.PUT && w.noPut) && !(ev.Type == mvccpb.DELETE && w.noDelete) {
			return true
		}
	}
	w.next = e.rev + 1
	return false
}

// Take delivers what the watch owes up to revision upto (at most the
// store's), as one response: the events of its range in order, with the
// revision upto in the header; or, when a compaction took revisions the
// watch still owed, its cancellation with the compaction's revision. It
// returns nil when nothing is owed.
func (e *Etcd) Take(w *Watcher, upto int64) *etcdserverpb.WatchResponse {
	if w.canceled || w.next > e.rev {
		return nil
	}
	if w.next < e.compacted {
		e.CancelWatch(w)
		w.compactRev = e.compacted
		return &etcdserverpb.WatchResponse{Header: e.header(), WatchId: w.ID, Canceled: true, CompactRevision: e.compacted}
	}
	upto = min(upto, e.rev)
	if upto < w.next {
		return nil
	}
	resp := &etcdserverpb.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: upto}, WatchId: w.ID}
	i := sort.Search(len(e.log), func(i int) bool { return e.log[i].Kv.ModRevision >= w.next })
	for _, ev := range e.log[i:] {
		if ev.Kv.ModRevision > upto {
			break
		}
		if !inRange(ev.Kv.Key, w.key, w.end) || ev.Type == mvccpb.PUT && w.noPut || ev.Type == mvccpb.DELETE && w.noDelete {
			continue
		}
		out := proto.Clone(ev).(*mvccpb.Event)
		if !w.prevKV || ev.Kv.ModRevision <= e.compacted {
			// (An event at the compaction's revision lost its key's
			// version before it to the compaction.)
			out.PrevKv = nil
		}
		resp.Events = append(resp.Events, out)
	}
	w.next = upto + 1
	return resp
}
