package worker

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// A worker process in production. Producers put tasks with
// cli.Put(ctx, TaskKey(id%256, id), payload).
func ExampleStart() {
	logger, _ := zap.NewProduction()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	w, err := Start(cli, Config{Rink: "queue", Partitions: 256, Log: logger},
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithSessionTTL(10*time.Second),        // a crashed worker's partitions move after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits to inherit a leaving worker's partitions
		rink.WithLogger(logger),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := w.Stop(context.Background()); err != nil { // hands every partition over at once
		log.Print(err)
	}
}
