package shardcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

const shards = 16

// testStore answers at once, counts reads, and blocks the reads of the key
// in block until it is closed.
type testStore struct {
	reads   atomic.Int64
	block   string
	blocked chan struct{} // closed when a read of block has started
	release chan struct{}
	once    sync.Once
}

func newTestStore() *testStore {
	return &testStore{blocked: make(chan struct{}), release: make(chan struct{})}
}

func (s *testStore) Get(ctx context.Context, key string) (string, error) {
	s.reads.Add(1)
	if key == s.block && s.block != "" {
		s.once.Do(func() { close(s.blocked) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return "v:" + key, nil
}

// Hot lists the shard's keys among key-0 .. key-99, in that order.
func (s *testStore) Hot(_ context.Context, shard string, n int) ([]string, error) {
	var keys []string
	for i := 0; i < 100 && len(keys) < n; i++ {
		if k := fmt.Sprint("key-", i); ShardOf(k, shards) == shard {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

type testMember struct {
	r *rink.Rink
	c *Cache
}

func (m *testMember) stop() {
	_ = m.r.Shutdown(context.Background())
	m.c.Close()
}

func join(t *testing.T, cli *clientv3.Client, name, member string, store Store, opts ...rink.Option) *testMember {
	t.Helper()
	r, err := rink.New(cli, name, append([]rink.Option{rink.WithMemberName(member), rink.WithRebalanceDelay(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(r, store, Config{Shards: shards, Preload: 5})
	if err != nil {
		_ = r.Shutdown(context.Background())
		t.Fatal(err)
	}
	return &testMember{r, c}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// servedOnce reports whether every member is ranked and every shard is
// served by exactly one of ms.
func servedOnce(ms ...*testMember) func() bool {
	return func() bool {
		for _, m := range ms {
			if rk := m.r.Rank(); rk.Index < 0 || rk.Size != len(ms) {
				return false
			}
		}
		for _, role := range Roles(shards) {
			n := 0
			for _, m := range ms {
				if m.c.Serves(role) {
					n++
				}
			}
			if n != 1 {
				return false
			}
		}
		return true
	}
}

func owner(ms []*testMember, key string) (own, other *testMember) {
	if ms[0].c.Serves(ShardOf(key, shards)) {
		return ms[0], ms[1]
	}
	return ms[1], ms[0]
}

// TestReadThroughAndMove: the owner of a key's shard misses once and then
// hits; the other member refuses the key; when the owner leaves, the heir
// serves the shard with an empty cache.
func TestReadThroughAndMove(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	store := newTestStore()
	a := join(t, cli, "move", "a", store)
	defer a.stop()
	b := join(t, cli, "move", "b", store)
	defer b.stop()
	eventually(t, "every shard served once", servedOnce(a, b))
	// A key of a shard each member serves.
	var keys [2]string
	for i := 0; i < 10000 && (keys[0] == "" || keys[1] == ""); i++ {
		k := fmt.Sprint("key-", i)
		if a.c.Serves(ShardOf(k, shards)) {
			keys[0] = k
		} else {
			keys[1] = k
		}
	}
	if keys[0] == "" || keys[1] == "" {
		t.Fatalf("a member serves no shard: %v", keys)
	}
	ctx := context.Background()
	for _, k := range keys {
		own, other := owner([]*testMember{a, b}, k)
		if v, hit, err := own.c.Get(ctx, k); err != nil || hit || v != "v:"+k {
			t.Fatalf("first Get(%s) = %q, %v, %v; want a miss", k, v, hit, err)
		}
		if v, hit, err := own.c.Get(ctx, k); err != nil || !hit || v != "v:"+k {
			t.Fatalf("second Get(%s) = %q, %v, %v; want a hit", k, v, hit, err)
		}
		if _, _, err := other.c.Get(ctx, k); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Get(%s) on the other member: %v; want ErrNotOwner", k, err)
		}
	}
	if s := a.c.Stats(); s.Hits != 1 || s.Misses != 1 || s.Preloaded != 0 {
		t.Errorf("a's stats %+v", s)
	}
	a.stop()
	if _, _, err := a.c.Get(ctx, keys[0]); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Get on a member that left: %v; want ErrNotOwner", err)
	}
	eventually(t, "b serves every shard", servedOnce(b))
	if _, hit, err := b.c.Get(ctx, keys[0]); err != nil || hit {
		t.Fatalf("Get(%s) on the heir = %v, %v; want a miss (nothing was preloaded)", keys[0], hit, err)
	}
}

// TestPreloadThenAssigned: keys preloaded for a shard before it moves here
// are hits once it is assigned, without another read; keys preloaded for a
// shard never assigned are dropped after KeepWarm.
func TestPreloadThenAssigned(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	store := newTestStore()
	a := join(t, cli, "preload", "a", store)
	defer a.stop()
	b := join(t, cli, "preload", "b", store)
	defer b.stop()
	eventually(t, "every shard served once", servedOnce(a, b))
	role := ""
	for _, r := range Roles(shards) {
		if a.c.Serves(r) {
			role = r
			break
		}
	}
	// Called as rink calls Handler.Warm when a planned move is announced.
	b.c.preload(context.Background(), role)
	hot, _ := store.Hot(context.Background(), role, 5)
	if got := b.c.Stats().Preloaded; got != int64(len(hot)) {
		t.Fatalf("preloaded %d keys; want %d", got, len(hot))
	}
	if _, _, err := b.c.Get(context.Background(), hot[0]); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a preloaded shard is served before it is assigned: %v", err)
	}
	a.stop()
	eventually(t, "b serves every shard", servedOnce(b))
	reads := store.reads.Load()
	for _, k := range hot {
		if _, hit, err := b.c.Get(context.Background(), k); err != nil || !hit {
			t.Fatalf("Get(%s) = %v, %v; want a hit", k, hit, err)
		}
	}
	if n := store.reads.Load(); n != reads {
		t.Errorf("%d store reads for preloaded keys", n-reads)
	}

	// A shard preloaded, never assigned: gone after KeepWarm.
	c := &Cache{store: store, cfg: Config{Shards: shards, Preload: 5, KeepWarm: 20 * time.Millisecond}, served: map[string]*shard{}, warm: map[string]*shard{}}
	c.preload(context.Background(), role)
	eventually(t, "the preloaded shard dropped", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.warm) == 0
	})
}

// TestRevokedDrains: a shard's heir starts serving it only once the request
// in flight on the old holder has been answered (WithDrainTimeout).
func TestRevokedDrains(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	store := newTestStore()
	opt := rink.WithDrainTimeout(time.Minute)
	a := join(t, cli, "drain", "a", store, opt)
	defer a.stop()
	b := join(t, cli, "drain", "b", store, opt)
	defer b.stop()
	eventually(t, "every shard served once", servedOnce(a, b))
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("key-", i); a.c.Serves(ShardOf(k, shards)) {
			key = k
		}
	}
	store.block = key
	release := sync.OnceFunc(func() { close(store.release) })
	defer release() // before the members stop: their caches wait for the read
	got := make(chan error, 1)
	go func() {
		v, _, err := a.c.Get(context.Background(), key)
		if err == nil && v != "v:"+key {
			err = fmt.Errorf("value %q", v)
		}
		got <- err
	}()
	<-store.blocked
	left := make(chan error, 1)
	go func() { left <- a.r.Shutdown(context.Background()) }()
	// While the read runs, the heir does not serve the shard.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if b.c.Serves(ShardOf(key, shards)) {
			t.Fatal("the heir serves the shard while the old holder answers a request for it")
		}
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	if err := <-left; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	eventually(t, "the heir serves the shard", func() bool { return b.c.Serves(ShardOf(key, shards)) })
}
