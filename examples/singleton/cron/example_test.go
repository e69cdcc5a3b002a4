package cron

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

// A replica of a service in production: every replica runs this, and one
// of them runs the job every minute.
func ExampleRun() {
	logger, _ := zap.NewProduction()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = Run(ctx, cli, "reports", Job{
		Every: time.Minute,
		Act: func(ctx context.Context) error {
			token, _ := rink.Token(ctx) // fence the job's writes with it
			logger.Info("sending the report", zap.Int64("token", token))
			return nil
		},
		Log: logger,
	},
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithSessionTTL(10*time.Second),        // a crashed leader's job moves after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits before it may take the job over
		rink.WithLogger(logger),
	)
	if err != nil {
		log.Print(err)
	}
}
