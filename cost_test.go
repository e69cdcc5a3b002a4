package rink

import (
	"fmt"
	"runtime"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cost guards, counted rather than timed, so that they fail on any
// machine: what a member spends on one watch event must not grow with the
// rink. A clone of the whole member view per batch (for ghosts) made a join
// at 1,000 members six times slower, and no test noticed (issues 22, 25).

// eventBytes returns the bytes a member with n others in its view
// allocates, on average, to fold in one watch batch that changes one
// member key, as an ordinary join or leave elsewhere does.
func eventBytes(t *testing.T, n int) float64 {
	b := newBare(t, "self", 64, 1)
	k := newKeys("bare")
	var evs []*clientv3.Event
	for i := 0; i < n; i++ {
		rev := int64(10 + i)
		evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{
			Key: []byte(k.member(fmt.Sprintf("member-%05d", i))), Value: []byte(`{"protocols":[2]}`), CreateRevision: rev, ModRevision: rev, Lease: rev}})
	}
	rev := int64(10 + n)
	b.r.onWatch(watchBatch{wide: true, events: evs, rev: rev})
	const rounds = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < rounds; i++ {
		// A member joins and leaves, outside the map: one put, one delete.
		rev++
		kv := &mvccpb.KeyValue{Key: []byte(k.member("newcomer")), Value: []byte(`{"protocols":[2]}`), CreateRevision: rev, ModRevision: rev, Lease: rev}
		b.r.onWatch(watchBatch{wide: true, events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}}, rev: rev})
		rev++
		del := &mvccpb.KeyValue{Key: kv.Key, ModRevision: rev}
		b.r.onWatch(watchBatch{wide: true, events: []*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: del}}, rev: rev})
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / (2 * rounds)
}

// TestWatchEventCostFlat: a watch event about one member costs a member
// the same bytes in a rink of 2,000 as in one of 50 (836 bytes in both; at
// d85b50e 6,980 against 426,587, from cloning the view).
func TestWatchEventCostFlat(t *testing.T) {
	small, large := eventBytes(t, 50), eventBytes(t, 2000)
	t.Logf("bytes allocated per watch event: %.0f with 50 members, %.0f with 2,000", small, large)
	if large > 1.5*small+512 {
		t.Fatalf("a watch event costs %.0f bytes with 2,000 members, %.0f with 50: it grows with the rink", large, small)
	}
}
