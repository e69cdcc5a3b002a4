package conformance

import (
	"flag"
	"fmt"
	"github.com/rink-go/rink/internal/testutil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rink-go/rink/internal/embedetcd"
)

// The tests share one embedded etcd, started by TestMain on loopback ports
// chosen at run time; each behaviour runs for each driver in a rink of its
// own name. Every member reaches etcd through a proxy of its own, so that a
// crash cuts it off (BlackholeTx/Rx) while the others carry on.
var testEndpoint string

func TestMain(m *testing.M) {
	flag.Parse()
	testutil.Parallel(6) // (the behaviours wait on etcd and timers; they hardly compute)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting etcd:", err)
		os.Exit(2)
	}
	testEndpoint = srv.Endpoint()
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newProxy starts a proxy to the test etcd, closed when tb ends.
func newProxy(tb TB) (proxy.Server, error) {
	from, err := embedetcd.FreeURL()
	if err != nil {
		return nil, err
	}
	from.Scheme = "tcp"
	to := url.URL{Scheme: "tcp", Host: testEndpoint}
	p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: to})
	select {
	case <-p.Ready():
	case err := <-p.Error():
		p.Close()
		return nil, err
	}
	tb.Cleanup(func() { p.Close() })
	return p, nil
}

// proxyClient connects to etcd through p, with keep-alives that notice a
// cut connection within seconds. The caller closes it.
func proxyClient(p proxy.Server) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            []string{strings.TrimPrefix(p.From(), "tcp://")},
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
}

// blackhole cuts p both ways: the member behind it is cut off etcd.
func blackhole(p proxy.Server) {
	p.BlackholeTx()
	p.BlackholeRx()
}

// pause holds p's traffic both ways, to be healed (unpause): bytes are
// held, not dropped, as in a partition of a live TCP connection. (A
// blackhole drops bytes mid-frame: the HTTP/2 connection that outlives a
// short one is corrupt, its header compression out of step, and every new
// stream on it fails with PROTOCOL_ERROR until it is closed. No network
// does that to a TCP connection; a crashed member is never healed, so its
// cut is a blackhole.)
func pause(p proxy.Server) {
	p.PauseTx()
	p.PauseRx()
}

// unpause lets p's traffic through again.
func unpause(p proxy.Server) {
	p.UnpauseTx()
	p.UnpauseRx()
}

// testLogger is the members' logger: none, unless CONFORMANCE_LOG names a
// level (warn, info, debug), to debug a failure.
func testLogger(member string) *zap.Logger {
	lvl, err := zapcore.ParseLevel(os.Getenv("CONFORMANCE_LOG"))
	if err != nil || os.Getenv("CONFORMANCE_LOG") == "" {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l.Named(member)
}
