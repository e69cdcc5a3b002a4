package peer

import (
	"context"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A replica in production: it logs its rank as it changes, and runs the
// jobs whose shard it holds.
func ExampleJoin() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	p, err := Join(cli, "indexer", func(rk rink.Rank) {
		log.Printf("I am %d of %d", rk.Index, rk.Size) // -1 while waiting to be ranked
	},
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithSessionTTL(10*time.Second),        // a crashed replica's shards move after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits to inherit a leaving replica's index
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(context.Background()) // hands every shard over at once

	for id := 0; id < 1000; id++ {
		p.Do(id, func(ctx context.Context) {
			token, _ := rink.Token(ctx) // fence the job's writes with it
			log.Printf("job %d, token %d", id, token)
		})
	}
}
