package holder

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A member of a service in production: the TTL and rebalance delay are
// rink's defaults, written out (the demo shortens them to tell its story in
// seconds).
func ExampleStart() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	m, err := Start(cli, Config{
		Rink:     "orders",
		Roles:    []string{"partition:0", "partition:1", "partition:2", "partition:3"},
		Acquired: func(role string, token int64) { log.Printf("holding %s, token %d", role, token) },
		Released: func(role string, cause error) { log.Printf("released %s: %v", role, cause) },
	},
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithSessionTTL(10*time.Second),        // a crashed member's roles move after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits to inherit a leaving member's rank
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := m.Shutdown(context.Background()); err != nil { // hands every role over at once
		log.Print(err)
	}
}
