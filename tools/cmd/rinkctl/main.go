// Command rinkctl inspects rinks from a terminal: who is ranked, who waits,
// who leads, who owns a role (with replicas, who holds it as a secondary,
// and in which zones the members are), and what changes. It only reads; it
// never joins a rink. Flags follow etcdctl: --endpoints (or
// ETCDCTL_ENDPOINTS), --cacert/--cert/--key, --user, --dial-timeout,
// -w table|json.
//
//	rinkctl list
//	rinkctl status orders
//	rinkctl owner orders BTC/ETH partition:42
//	rinkctl watch orders
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the etcdctl-style flags every command takes.
type globals struct {
	endpoints   []string
	cacert      string
	cert, key   string
	user        string
	dialTimeout time.Duration
	output      string
}

// Exit codes, as etcdctl's.
const (
	exitError         = 1   // something failed (an unknown rink, an unusable answer)
	exitBadConnection = 2   // etcd could not be reached, or refused us (TLS, auth)
	exitBadArgs       = 128 // rinkctl was called wrongly
)

var (
	// errUsage marks errors in how rinkctl was called.
	errUsage = errors.New("usage")
	// errConnection marks failures to reach etcd.
	errConnection = errors.New("cannot reach etcd")
)

// run executes rinkctl with args and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	g := &globals{}
	root := &cobra.Command{
		Use:           "rinkctl",
		Short:         "Inspect rinks (sticky ranked rings) stored in etcd",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetContext(ctx)
	defaultEndpoints := []string{"127.0.0.1:2379"}
	if env := os.Getenv("ETCDCTL_ENDPOINTS"); env != "" {
		defaultEndpoints = strings.Split(env, ",")
	}
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", defaultEndpoints, "etcd endpoints (default from ETCDCTL_ENDPOINTS)")
	pf.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle")
	pf.StringVar(&g.cert, "cert", "", "client certificate for TLS")
	pf.StringVar(&g.key, "key", "", "client key for TLS")
	pf.StringVar(&g.user, "user", "", "username[:password] for authentication")
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for etcd to answer")
	pf.StringVarP(&g.output, "write-out", "w", "table", "output format: table or json")

	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddCommand(listCmd(g), statusCmd(g), ownerCmd(g), watchCmd(g))
	cmd, err := root.ExecuteC()
	if err != nil {
		fmt.Fprintln(errOut, "Error:", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		switch {
		case errors.Is(err, errConnection):
			return exitBadConnection
		case errors.Is(err, errUsage) || cmd == root || strings.Contains(err.Error(), "arg(s)"):
			// cobra reports unknown commands and wrong argument counts
			// without a way to tell them apart other than by text.
			return exitBadArgs
		}
		return exitError
	}
	return 0
}

// usage wraps a mistake in how rinkctl was called.
func usage(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// client connects to etcd as the global flags say.
func (g *globals) client() (*clientv3.Client, error) {
	if g.output != "table" && g.output != "json" {
		return nil, usage("-w %q: want table or json", g.output)
	}
	if g.dialTimeout <= 0 {
		return nil, usage("--dial-timeout %v: want > 0", g.dialTimeout)
	}
	cfg := clientv3.Config{
		Endpoints:   g.endpoints,
		DialTimeout: g.dialTimeout,
		Logger:      zap.NewNop(),
	}
	if g.cacert != "" || g.cert != "" || g.key != "" {
		if (g.cert == "") != (g.key == "") {
			return nil, usage("--cert and --key go together")
		}
		info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
		var tc *tls.Config
		var err error
		if tc, err = info.ClientConfig(); err != nil {
			return nil, usage("reading TLS files: %v", err)
		}
		cfg.TLS = tc
	}
	if g.user != "" {
		name, pass, _ := strings.Cut(g.user, ":")
		cfg.Username, cfg.Password = name, pass
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", errConnection, strings.Join(g.endpoints, ","), err)
	}
	return cli, nil
}

// probe makes one small read so that an unreachable etcd, a TLS mismatch or
// a refused login is reported as itself rather than as a timeout later.
func (g *globals) probe(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("%w at %s: %v", errConnection, strings.Join(g.endpoints, ","), err)
	}
	return resp.Count, nil
}

// observe connects and follows one rink; it fails for a rink with no keys
// unless allowEmpty.
func (g *globals) observe(ctx context.Context, name string, allowEmpty bool) (*rink.Observer, func(), error) {
	if strings.TrimSpace(name) == "" {
		return nil, nil, usage("an empty rink name")
	}
	cli, err := g.client()
	if err != nil {
		return nil, nil, err
	}
	keys, err := g.probe(ctx, cli, "rink/"+name+"/")
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	ob, err := rink.NewObserver(cli, name, rink.WithJoinTimeout(g.dialTimeout))
	if err != nil {
		cli.Close()
		if errors.Is(err, rink.ErrInvalidName) {
			return nil, nil, usage("%v", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("%w at %s: no answer within %v (--dial-timeout)", errConnection, strings.Join(g.endpoints, ","), g.dialTimeout)
		}
		return nil, nil, err
	}
	if keys == 0 && !allowEmpty {
		ob.Close()
		cli.Close()
		return nil, nil, fmt.Errorf("no rink named %q (see rinkctl list)", name)
	}
	return ob, func() { ob.Close(); cli.Close() }, nil
}

func (g *globals) json(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
