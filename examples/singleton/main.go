// Command singleton runs a cron-like job on exactly one replica: every copy
// joins the rink and loops on AwaitRole("leader"); the copy that holds the
// role runs the job until it loses the role, and then another copy takes
// over.
//
//	go run ./examples/singleton                       # starts an embedded etcd and prints its address
//	go run ./examples/singleton -endpoints 127.0.0.1:PORT -name b
//	go run ./examples/singleton -endpoints 127.0.0.1:PORT -name c
//
// Stop the copy that prints ticks (Ctrl-C) and watch another take over.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

type config struct {
	endpoints string
	name      string
	every     time.Duration
	ttl       time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.StringVar(&cfg.name, "name", "", "member name (default: host name and a random suffix)")
	flag.DurationVar(&cfg.every, "every", time.Second, "how often the job runs")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL: how soon a crashed holder's job moves")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "singleton:", err)
		os.Exit(1)
	}
}

// run joins the rink and runs the job whenever this copy leads, until ctx
// ends; then it leaves, handing the job over at once.
func run(ctx context.Context, out io.Writer, cfg config) error {
	if cfg.every <= 0 {
		return fmt.Errorf("-every %v: want > 0", cfg.every)
	}
	cli, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return err
	}
	defer closeAll()
	if cfg.endpoints == "" {
		fmt.Fprintf(out, "run more copies with: go run ./examples/singleton -endpoints %s\n", cli.Endpoints()[0])
	}
	opts := []rink.Option{rink.WithSessionTTL(cfg.ttl)}
	if cfg.name != "" {
		opts = append(opts, rink.WithMemberName(cfg.name))
	}
	r, err := rink.New(cli, "singleton", opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s joined; waiting for the leader role\n", r.Member())

	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			roleCtx := r.AwaitRole("leader")
			if errors.Is(context.Cause(roleCtx), rink.ErrShutdown) {
				return
			}
			job(roleCtx, out, r.Member(), cfg.every)
		}
	}()

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.Shutdown(sctx) // cancels the job's context and hands the role over
	<-done
	fmt.Fprintf(out, "%s left\n", r.Member())
	return err
}

// job is the work that must run on one replica only. It returns when its
// context ends: the role moved, this member lost its session, or shutdown.
func job(ctx context.Context, out io.Writer, member string, every time.Duration) {
	token, _ := rink.Token(ctx)
	fmt.Fprintf(out, "%s leads (fencing token %d)\n", member, token)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-t.C:
			fmt.Fprintf(out, "%s: tick %d\n", member, n)
		case <-ctx.Done():
			fmt.Fprintf(out, "%s stops leading: %v\n", member, context.Cause(ctx))
			return
		}
	}
}
