// Command rinkctl inspects rinks from a terminal: who is ranked, who waits,
// who leads, who owns a role (with replicas, who holds it as a secondary,
// and in which zones the members are), and what changes. It never joins a
// rink; it writes only to retire a rink that no live member is in (rm). It
// also runs a single-node etcd to try rink with (etcd). Flags follow
// etcdctl, and so do the ETCDCTL_* variables that stand in for them:
// --endpoints, --cacert/--cert/--key, --user (name:password, or a name
// with --password), --insecure-skip-tls-verify, --dial-timeout,
// -w table|json.
//
//	rinkctl etcd
//	rinkctl list
//	rinkctl status orders
//	rinkctl owner orders BTC/ETH partition:42
//	rinkctl watch orders
//	rinkctl rm orders
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rink-go/rink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the etcdctl-style flags every command takes.
type globals struct {
	flags       *pflag.FlagSet
	endpoints   []string
	cacert      string
	cert, key   string
	user        string
	password    string
	insecure    bool // --insecure-skip-tls-verify
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
		Use:               "rinkctl",
		Short:             "Inspect rinks (sticky ranked rings) stored in etcd, retire dead ones, or run an etcd to try rink with",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(*cobra.Command, []string) error { return g.fromEnv() },
	}
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetContext(ctx)
	pf := root.PersistentFlags()
	g.flags = pf
	pf.StringSliceVar(&g.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints (default from ETCDCTL_ENDPOINTS)")
	pf.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle (default from ETCDCTL_CACERT)")
	pf.StringVar(&g.cert, "cert", "", "client certificate for TLS (default from ETCDCTL_CERT)")
	pf.StringVar(&g.key, "key", "", "client key for TLS (default from ETCDCTL_KEY)")
	pf.StringVar(&g.user, "user", "", "name:password, or a name with --password, for authentication (default from ETCDCTL_USER)")
	pf.StringVar(&g.password, "password", "", "password for authentication; --user is then the name alone (default from ETCDCTL_PASSWORD)")
	pf.BoolVar(&g.insecure, "insecure-skip-tls-verify", false, "accept any server certificate (default from ETCDCTL_INSECURE_SKIP_TLS_VERIFY)")
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for etcd to answer (default from ETCDCTL_DIAL_TIMEOUT)")
	pf.StringVarP(&g.output, "write-out", "w", "table", "output format: table or json")

	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddCommand(listCmd(g), statusCmd(g), ownerCmd(g), watchCmd(g), rmCmd(g), etcdCmd(g))
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

// fromEnv takes, for each connection flag not given, its value from the
// environment variable etcdctl reads (a flag wins over its variable).
func (g *globals) fromEnv() error {
	strs := []struct {
		flag, env string
		to        *string
	}{
		{"cacert", "ETCDCTL_CACERT", &g.cacert},
		{"cert", "ETCDCTL_CERT", &g.cert},
		{"key", "ETCDCTL_KEY", &g.key},
		{"user", "ETCDCTL_USER", &g.user},
		{"password", "ETCDCTL_PASSWORD", &g.password},
	}
	for _, s := range strs {
		if v, ok := os.LookupEnv(s.env); ok && !g.flags.Changed(s.flag) {
			*s.to = v
		}
	}
	if v := os.Getenv("ETCDCTL_ENDPOINTS"); v != "" && !g.flags.Changed("endpoints") {
		g.endpoints = strings.Split(v, ",")
	}
	if v := os.Getenv("ETCDCTL_DIAL_TIMEOUT"); v != "" && !g.flags.Changed("dial-timeout") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usage("ETCDCTL_DIAL_TIMEOUT=%q: want a duration such as 2s", v)
		}
		g.dialTimeout = d
	}
	if v := os.Getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY"); v != "" && !g.flags.Changed("insecure-skip-tls-verify") {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return usage("ETCDCTL_INSECURE_SKIP_TLS_VERIFY=%q: want true or false", v)
		}
		g.insecure = b
	}
	return nil
}

// where names the endpoints in messages.
func (g *globals) where() string { return strings.Join(g.endpoints, ",") }

// config returns the etcd client's configuration, as the global flags say.
func (g *globals) config() (clientv3.Config, error) {
	if g.output != "table" && g.output != "json" {
		return clientv3.Config{}, usage("-w %q: want table or json", g.output)
	}
	if g.dialTimeout <= 0 {
		return clientv3.Config{}, usage("--dial-timeout %v: want > 0", g.dialTimeout)
	}
	cfg := clientv3.Config{
		Endpoints:   g.endpoints,
		DialTimeout: g.dialTimeout,
		Logger:      zap.NewNop(),
	}
	if g.cacert != "" || g.cert != "" || g.key != "" || g.insecure {
		if (g.cert == "") != (g.key == "") {
			return clientv3.Config{}, usage("--cert and --key go together")
		}
		tc := &tls.Config{}
		if g.cacert != "" || g.cert != "" {
			info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
			var err error
			if tc, err = info.ClientConfig(); err != nil {
				return clientv3.Config{}, usage("reading TLS files: %v", err)
			}
		}
		tc.InsecureSkipVerify = g.insecure
		cfg.TLS = tc
	}
	switch name, pass, colon := strings.Cut(g.user, ":"); {
	case g.user == "" && g.password != "":
		return clientv3.Config{}, usage("--password without --user")
	case g.password != "":
		cfg.Username, cfg.Password = g.user, g.password // (as etcdctl: --user is the name alone)
	case g.user != "" && !colon:
		return clientv3.Config{}, usage("--user %s: give name:password, or the password with --password", g.user)
	case g.user != "":
		cfg.Username, cfg.Password = name, pass
	}
	return cfg, nil
}

// client connects to etcd as the global flags say. It first dials every
// endpoint (see reach): when none can be reached it says why at once,
// rather than when the first request times out.
func (g *globals) client(ctx context.Context) (*clientv3.Client, error) {
	cfg, err := g.config()
	if err != nil {
		return nil, err
	}
	if err := reach(ctx, cfg, false); err != nil {
		return nil, fmt.Errorf("%w at %s: %v", errConnection, g.where(), err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", errConnection, g.where(), err)
	}
	return cli, nil
}

// failed wraps the error of a request to etcd: it names the endpoints and
// etcd's answer, and when the request timed out, what dialing the
// endpoints again says (a server that refuses our certificate says so
// only after the handshake).
func (g *globals) failed(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		cfg, _ := g.config()
		if why := reach(ctx, cfg, true); why != nil {
			return fmt.Errorf("%w at %s: no answer within %v (--dial-timeout): %v", errConnection, g.where(), g.dialTimeout, why)
		}
		return fmt.Errorf("%w at %s: no answer within %v (--dial-timeout)", errConnection, g.where(), g.dialTimeout)
	}
	return fmt.Errorf("%w at %s: %v", errConnection, g.where(), err)
}

// probe makes one small read so that an unreachable etcd, a TLS mismatch or
// a refused login is reported as itself rather than as a timeout later.
func (g *globals) probe(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	resp, err := cli.Get(rctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, g.failed(ctx, err)
	}
	return resp.Count, nil
}

// observe connects and follows one rink; it fails for a rink with no keys
// of its own unless allowEmpty.
func (g *globals) observe(ctx context.Context, name string, allowEmpty bool) (*rink.Observer, *clientv3.Client, func(), error) {
	if strings.TrimSpace(name) == "" {
		return nil, nil, nil, usage("an empty rink name")
	}
	if err := rink.ValidRinkName(name); err != nil {
		return nil, nil, nil, usage("%v", err)
	}
	cli, err := g.client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	exists, nested, err := g.lookUp(ctx, cli, name)
	if err != nil {
		cli.Close()
		return nil, nil, nil, err
	}
	if !exists && !allowEmpty {
		cli.Close()
		return nil, nil, nil, noSuchRink(name, nested)
	}
	ob, err := rink.NewObserver(cli, name, rink.WithJoinTimeout(g.dialTimeout))
	if err != nil {
		cli.Close()
		if errors.Is(err, rink.ErrInvalidName) {
			return nil, nil, nil, usage("%v", err)
		}
		return nil, nil, nil, g.failed(ctx, err)
	}
	return ob, cli, func() { ob.Close(); cli.Close() }, nil
}

func (g *globals) json(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
