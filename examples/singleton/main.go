// Command singleton runs a cron-like job on exactly one replica: every copy
// joins the rink and runs cron.Run; the copy that holds the "leader" role
// runs the job at every tick until it loses the role, and then another copy
// takes over. Package cron is the code to copy into a service (see
// README.md); this command wires it to an embedded etcd for a demonstration.
//
//	go run ./examples/singleton                       # starts an embedded etcd and prints its address
//	go run ./examples/singleton -endpoints 127.0.0.1:PORT -name b
//	go run ./examples/singleton -endpoints 127.0.0.1:PORT -name c
//
// Stop the copy that prints ticks (Ctrl-C) and watch another take over.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/singleton/cron"
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
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "session TTL: how soon a crashed holder's job moves (in production: 10s)")
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
	// The rebalance delay is rink's default, 30 s: a newcomer waits that
	// long before it may take the job over from a running holder.
	opts := []rink.Option{rink.WithSessionTTL(cfg.ttl)}
	if cfg.name != "" {
		opts = append(opts, rink.WithMemberName(cfg.name))
	}
	n := 0
	return cron.Run(ctx, cli, "singleton", cron.Job{
		Every: cfg.every,
		Act: func(ctx context.Context) error {
			n++
			token, _ := rink.Token(ctx)
			fmt.Fprintf(out, "tick %d (token %d)\n", n, token)
			return nil
		},
		Log: lineLogger(out),
	}, opts...)
}

// lineLogger writes one plain line per entry: the message and its fields.
func lineLogger(out io.Writer) *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", ConsoleSeparator: " "})
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(out), zapcore.InfoLevel))
}
