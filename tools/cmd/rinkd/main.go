// Command rinkd is the rink sidecar: it runs beside an app written in any
// language and is one rink member on its behalf. The app reaches it on
// localhost through gRPC or HTTP/JSON (docs/sidecar.md).
//
//	rinkd -rink orders -endpoints etcd:2379        # beside the app
//	rinkd -rink demo                               # on an etcd of its own, to try it
//	rinkd drain -http 127.0.0.1:7071               # preStop: hand the roles over, leave
//
// SIGTERM or SIGINT drains (the app's roles are revoked and handed over once
// it releases them) and stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/tools/rinkd"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "drain" {
		return drainCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("rinkd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		endpoints = fs.String("endpoints", os.Getenv("RINKD_ENDPOINTS"), "etcd endpoints, comma-separated (empty: start an embedded etcd, for trying rinkd out)")
		cacert    = fs.String("cacert", "", "CA bundle of the etcd servers (TLS)")
		cert      = fs.String("cert", "", "client certificate for etcd (TLS)")
		key       = fs.String("key", "", "client key for etcd (TLS)")
		rinkName  = fs.String("rink", os.Getenv("RINKD_RINK"), "the rink's name (required)")
		member    = fs.String("member", defaultMember(), "this member's name (default: $RINKD_MEMBER, $POD_NAME or the host name)")
		grpcAddr  = fs.String("grpc", "127.0.0.1:7070", "gRPC address to serve the app on")
		httpAddr  = fs.String("http", "127.0.0.1:7071", "HTTP/JSON address to serve the app on (with /healthz and /readyz)")
		probeAddr = fs.String("probe", "", "address to serve /healthz and /readyz alone on, for the kubelet (e.g. :7072)")
		ttl       = fs.Duration("ttl", rink.DefaultSessionTTL, "session TTL: a killed rinkd's roles move after it")
		replicas  = fs.Int("replicas", 1, "replicas per slot (rink.WithReplicas): every member must agree")
		slots     = fs.Int("slots", rink.DefaultSlots, "slots of the rink (rink.WithSlots): every member must agree")
		zone      = fs.String("zone", os.Getenv("RINKD_ZONE"), "failure domain of this member (rink.WithZone)")
		capacity  = fs.Float64("capacity", 1, "capacity of this member (rink.WithCapacity)")
		rebalance = fs.Duration("rebalance-delay", rink.DefaultRebalanceDelay, "how long a newcomer waits for a departure before it is ranked")
		warmup    = fs.Duration("warmup", 0, "warm-up time of planned moves (rink.WithWarmup)")
		verbose   = fs.Bool("v", false, "log at debug level")
	)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *rinkName == "" {
		fmt.Fprintln(stderr, "rinkd: -rink is required: the name of the rink to join")
		return exitUsage
	}
	zc := zap.NewProductionConfig()
	if *verbose {
		zc.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	log, err := zc.Build()
	if err != nil {
		fmt.Fprintln(stderr, "rinkd:", err)
		return exitError
	}
	defer func() { _ = log.Sync() }()

	cli, closeCli, err := connect(*endpoints, *cacert, *cert, *key, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "rinkd:", err)
		return exitError
	}
	defer closeCli()

	opts := []rink.Option{rink.WithReplicas(*replicas), rink.WithSlots(*slots), rink.WithCapacity(*capacity),
		rink.WithRebalanceDelay(*rebalance), rink.WithWarmup(*warmup)}
	if *zone != "" {
		opts = append(opts, rink.WithZone(*zone))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := rinkd.New(ctx, rinkd.Config{Client: cli, Rink: *rinkName, Member: *member, TTL: *ttl, Options: opts, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "rinkd:", err)
		return exitError
	}
	addrs, err := srv.Start(*grpcAddr, *httpAddr, *probeAddr)
	if err != nil {
		fmt.Fprintln(stderr, "rinkd:", err)
		_ = srv.Shutdown(context.Background())
		return exitError
	}
	fmt.Fprintf(stdout, "rinkd: member %s of rink %s: gRPC on %s, HTTP on %s\n", *member, *rinkName, addrs.GRPC, addrs.HTTP)
	<-ctx.Done()
	fmt.Fprintln(stdout, "rinkd: draining")
	sctx, cancel := context.WithTimeout(context.Background(), 2**ttl+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintln(stderr, "rinkd: shutdown:", err)
		return exitError
	}
	return exitOK
}

func defaultMember() string {
	for _, v := range []string{"RINKD_MEMBER", "POD_NAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	h, _ := os.Hostname()
	return h
}

// connect returns a client of endpoints, or of an embedded etcd it starts
// when endpoints is empty.
func connect(endpoints, cacert, cert, key string, out io.Writer) (*clientv3.Client, func(), error) {
	if cacert == "" && cert == "" && key == "" {
		return embedetcd.Connect(endpoints, out)
	}
	tlsInfo := transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: key}
	tc, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: tc,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	return cli, func() { cli.Close() }, nil
}

// drainCmd asks a running rinkd to drain: for a preStop hook.
func drainCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rinkd drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", "127.0.0.1:7071", "the HTTP address of the rinkd to drain")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the drain")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+*httpAddr+"/v1/drain", strings.NewReader("{}"))
	if err != nil {
		fmt.Fprintln(stderr, "rinkd drain:", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "rinkd drain:", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "rinkd drain: %s: %s\n", resp.Status, strings.TrimSpace(string(body)))
		return exitError
	}
	fmt.Fprintln(stdout, "rinkd: drained")
	return exitOK
}
