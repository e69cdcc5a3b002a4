package shard

import (
	"context"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A member of a service whose keys carry very different loads: the leader
// moves keys so that no member carries more than 10 % above the mean.
func ExampleStart() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	s, err := Start(cli, Config{Rink: "tenants", Tolerance: 0.1},
		rink.WithMemberName(os.Getenv("POD_NAME")), rink.WithRebalanceDelay(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	// For each request: route it to the key's owner (s.Owner(key)), which
	// calls Serve(key, cost) with what the request cost it.
}
