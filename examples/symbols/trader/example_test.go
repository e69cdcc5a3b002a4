package trader

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A replica of an exchange in production. Orders that reach it for a pair
// it does not hold are forwarded to Owner(pair).
func ExampleStart() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	t, err := Start(cli, Config{Rink: "exchange", Pairs: []string{"BTC/ETH", "ETH/USDT", "BTC/USDT"}},
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithSessionTTL(10*time.Second),        // a crashed member's pairs move after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits to inherit a leaving member's pairs
	)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Shutdown(context.Background()) // hands every pair over at once

	// For each order that reaches this replica:
	book, err := t.Order(context.TODO(), "BTC/ETH", 1.5)
	switch {
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrStale):
		owner, _ := t.Rink().Owner("BTC/ETH")
		log.Printf("forward the order to %s", owner)
	case err != nil:
		log.Printf("order failed, not acknowledged: %v", err)
	default:
		log.Printf("order acknowledged: %d orders on the book", book.Orders)
	}
}
