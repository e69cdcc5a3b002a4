package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// busyWorld runs a world in which clients write keys, hold leases and
// watch, with cuts, broken watches and compactions drawn from the seed,
// for d of virtual time. It returns the world and, per watch opened from
// the first revision, the revisions it delivered.
func busyWorld(seed uint64, d time.Duration) (*World, [][]int64) {
	w := NewWorld(seed, 2)
	const clients = 3
	var seen [][]int64
	for i := range clients {
		c := w.NewClient(fmt.Sprintf("c%d", i))
		var lease int64
		watchFrom := func(rev int64) {
			idx := len(seen)
			seen = append(seen, nil)
			wa := c.Watch(&etcdserverpb.WatchCreateRequest{Key: []byte("k/"), RangeEnd: []byte(clientv3.GetPrefixRangeEnd("k/")), StartRevision: rev}, func(resp *etcdserverpb.WatchResponse) {
				for _, ev := range resp.Events {
					seen[idx] = append(seen[idx], ev.Kv.ModRevision)
				}
				if resp.Canceled {
					seen[idx] = append(seen[idx], -resp.CompactRevision) // (0: broken)
				}
			})
			w.After(w.Between(0, 2*time.Second), func() {
				if w.Rand().IntN(4) == 0 {
					wa.Break()
				}
			})
		}
		watchFrom(1)
		var act func()
		act = func() {
			switch k := w.Rand().IntN(10); {
			case k < 4:
				key := fmt.Sprintf("k/%d", w.Rand().IntN(5))
				c.Put(&etcdserverpb.PutRequest{Key: []byte(key), Value: []byte(c.Name), Lease: lease}, func(*etcdserverpb.PutResponse, error) {})
			case k < 6:
				key := fmt.Sprintf("k/%d", w.Rand().IntN(5))
				c.Txn(&etcdserverpb.TxnRequest{
					Compare: []*etcdserverpb.Compare{{Key: []byte(key), Target: etcdserverpb.Compare_CREATE, Result: etcdserverpb.Compare_EQUAL, TargetUnion: &etcdserverpb.Compare_CreateRevision{}}},
					Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte("new")}}}},
					Failure: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(key)}}}},
				}, func(*etcdserverpb.TxnResponse, error) {})
			case k < 7:
				c.LeaseGrant(&etcdserverpb.LeaseGrantRequest{TTL: 2}, func(r *etcdserverpb.LeaseGrantResponse, err error) {
					if err == nil {
						lease = r.ID
					}
				})
			case k < 8:
				if lease != 0 {
					c.LeaseKeepAlive(&etcdserverpb.LeaseKeepAliveRequest{ID: lease}, func(r *etcdserverpb.LeaseKeepAliveResponse, err error) {
						if err == nil && r.TTL == 0 {
							lease = 0
						}
					})
				}
			case k < 9:
				c.Cut(w.Between(0, 3*time.Second))
			default:
				if rev := w.Etcd.Rev() - int64(w.Rand().IntN(20)); rev > 1 {
					_, _ = w.Etcd.Compact(&etcdserverpb.CompactionRequest{Revision: rev})
				}
				watchFrom(max(1, w.Etcd.Rev()-int64(w.Rand().IntN(30))))
			}
			w.After(w.Between(0, 400*time.Millisecond), act)
		}
		w.After(0, act)
	}
	w.RunUntil(d)
	return w, seen
}

// One seed, one history: the same seed gives the same trace byte for
// byte, another seed another trace.
func TestWorldReplaysBySeed(t *testing.T) {
	t.Parallel()
	a, _ := busyWorld(7, time.Minute)
	b, _ := busyWorld(7, time.Minute)
	c, _ := busyWorld(8, time.Minute)
	if a.Trace() != b.Trace() {
		t.Fatal("one seed gave two histories")
	}
	if a.Trace() == c.Trace() {
		t.Fatal("two seeds gave one history")
	}
	if n := strings.Count(a.Trace(), "\n"); n < 1000 {
		t.Fatalf("a minute of three busy clients traced only %d lines", n)
	}
}

// Whatever the delays, batches, cuts and breaks, a watch delivers the
// writes of its range in revision order, each once, without a gap, until
// it ends; one cancelled by a compaction says so.
func TestWorldWatchesDeliverInOrder(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		w, seen := busyWorld(seed, 30*time.Second)
		var want []int64 // every revision that wrote under k/, from the whole log
		for _, ev := range w.Etcd.log {
			if strings.HasPrefix(string(ev.Kv.Key), "k/") && (len(want) == 0 || want[len(want)-1] != ev.Kv.ModRevision) {
				want = append(want, ev.Kv.ModRevision)
			}
		}
		for i, got := range seen {
			var revs []int64
			for _, r := range got {
				if r <= 0 {
					break // cancelled or broken: nothing after
				}
				if n := len(revs); n > 0 && r < revs[n-1] {
					t.Fatalf("seed %d, watch %d: revision %d after %d", seed, i, r, revs[n-1])
				}
				if n := len(revs); n == 0 || revs[n-1] != r {
					revs = append(revs, r)
				}
			}
			// What the log still holds (past the last compaction) must
			// have been delivered without a gap.
			for j := 1; j < len(revs); j++ {
				for _, x := range want {
					if x > revs[j-1] && x < revs[j] {
						t.Fatalf("seed %d, watch %d: revision %d skipped between %d and %d", seed, i, x, revs[j-1], revs[j])
					}
				}
			}
		}
	}
}

// A new etcd leader renews every lease (ExtendLeases): a lease then lives
// its TTL from that moment, not from its last keep-alive.
func TestExtendLeases(t *testing.T) {
	t.Parallel()
	w := NewWorld(1, 2)
	g, _ := w.Etcd.LeaseGrant(&etcdserverpb.LeaseGrantRequest{TTL: 4})
	w.RunUntil(3 * time.Second)
	w.Etcd.ExtendLeases()
	w.RunUntil(6 * time.Second) // past the 4 s of the grant
	if r := w.Etcd.LeaseTimeToLive(&etcdserverpb.LeaseTimeToLiveRequest{ID: g.ID}); r.TTL < 0 {
		t.Fatal("the lease expired at its old time")
	}
	w.RunUntil(7*time.Second + time.Millisecond)
	if r := w.Etcd.LeaseTimeToLive(&etcdserverpb.LeaseTimeToLiveRequest{ID: g.ID}); r.TTL >= 0 {
		t.Fatal("the lease outlived its TTL from the renewal")
	}
}
