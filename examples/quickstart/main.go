// Command quickstart is a service of its own that holds roles in the rink
// "quickstart": each copy holds some of four jobs, says when it acquires
// and releases one, and hands its jobs over when stopped (Ctrl-C).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

func main() {
	endpoints := os.Getenv("ETCDCTL_ENDPOINTS") // as rinkctl etcd prints it
	if endpoints == "" {
		endpoints = "127.0.0.1:2379"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, strings.Split(endpoints, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run joins the rink, holds what jobs it is given until ctx ends, then
// leaves, handing its jobs over at once.
func run(ctx context.Context, out io.Writer, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	// A newcomer waits 5 s (default 30 s) before it takes roles over.
	r, err := rink.NewContext(ctx, cli, "quickstart", rink.WithRebalanceDelay(5*time.Second))
	if err != nil {
		return err
	}
	defer r.Shutdown(context.Background())
	fmt.Fprintln(out, "joined the rink quickstart")
	jobs, err := r.Watch(rink.Handler{
		// roleCtx ends the moment the role moves away: do the job's
		// work under it.
		Assigned: func(roleCtx context.Context, role string) { fmt.Fprintln(out, "acquired", role) },
		Revoked:  func(role string) { fmt.Fprintln(out, "released", role) },
	}, "job-1", "job-2", "job-3", "job-4")
	if err != nil {
		return err
	}
	defer jobs.Close()
	<-ctx.Done()
	return nil
}
