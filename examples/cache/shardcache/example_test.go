package shardcache

import (
	"context"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A replica of a cache service in production. Its shards drain before they
// move (requests in flight are answered first), and planned moves give the
// heir time to read the shard's hottest keys while this replica still
// serves them. Both fit well within the pod's termination grace period.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	r, err := rink.New(cli, "cache",
		rink.WithMemberName(os.Getenv("POD_NAME")),
		rink.WithRebalanceDelay(30*time.Second), // above a newcomer's start plus the warm-up
		rink.WithDrainTimeout(2*time.Second),    // the longest request the store may take
		rink.WithWarmup(5*time.Second))          // reading a shard's hottest keys
	if err != nil {
		log.Fatal(err)
	}
	var store Store // the database behind the cache
	c, err := New(r, store, Config{Shards: 256, Preload: 100})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// On SIGTERM: hand the shards over (drained, and warmed by their
	// heirs) within the grace period, less a margin.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = r.Shutdown(ctx)
	}()
	// For each request: route it to the owner of ShardOf(key, 256)
	// (r.Owner, or an Observer's), which calls c.Get(ctx, key); on
	// ErrNotOwner route it again.
}
