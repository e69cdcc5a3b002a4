// Package embedetcd starts a single-node etcd inside the process, on
// loopback ports chosen at run time, for rink's tests, examples and demo.
package embedetcd

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	dir  string
	own  bool
}

// Options tune Start.
type Options struct {
	// Dir holds the data; empty means a new temporary directory, removed by
	// Close.
	Dir string
	// NoFsync trades durability for speed (tests).
	NoFsync bool
	// Logger receives etcd's own logs; nil discards them.
	Logger *zap.Logger
	// TLS, when set, serves clients over TLS and requires client
	// certificates signed by TLS.CA.
	TLS *TLSFiles
	// BcryptCost is the cost of hashing the passwords of etcd's auth
	// (0: etcd's default, 10). A client with a user name and password
	// has the server check the password each time it opens a stream (a
	// watch, or a lease renewal), so tests with auth set it low
	// (bcrypt.MinCost is 4).
	BcryptCost uint
	// ClientAddr is the host:port clients connect to; empty means a free
	// loopback port. Start fails if the address is in use.
	ClientAddr string
	// ElectionMs is etcd's election timeout (0: etcd's default, 1000 ms).
	// etcd grants no lease a TTL below 1.5 election timeouts, so a larger
	// one makes leases outlive the TTL their members asked for.
	ElectionMs uint
}

// TLSFiles names PEM files.
type TLSFiles struct{ Cert, Key, CA string }

// Start runs etcd and waits until it serves clients.
func Start(o Options) (*Server, error) {
	s := &Server{dir: o.Dir}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "rink-etcd-")
		if err != nil {
			return nil, err
		}
		s.dir, s.own = dir, true
	}
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg := embed.NewConfig()
	cfg.Dir = s.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.UnsafeNoFsync = o.NoFsync
	if o.ElectionMs != 0 {
		cfg.ElectionMs = o.ElectionMs
	}
	if o.BcryptCost > 0 {
		cfg.BcryptCost = o.BcryptCost
	}
	// No HTTP/JSON gateway: nothing here uses it, and the goroutine that
	// builds it reads os.Stderr (logrus.New) after Start has returned. Under
	// 'go test -json', testing.M.Run assigns os.Stderr, so an etcd started
	// in TestMain raced with M.Run ("race detected outside of test
	// execution"). Clients speak gRPC only.
	cfg.EnableGRPCGateway = false
	cu, err := FreeURL()
	if o.ClientAddr != "" {
		cu, err = url.URL{Scheme: "http", Host: o.ClientAddr}, nil
	}
	if err != nil {
		return nil, s.cleanup(err)
	}
	pu, err := FreeURL()
	if err != nil {
		return nil, s.cleanup(err)
	}
	if o.TLS != nil {
		cu.Scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, TrustedCAFile: o.TLS.CA, ClientCertAuth: true}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, s.cleanup(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, s.cleanup(fmt.Errorf("embedded etcd not ready after 30s"))
	}
	s.etcd = e
	return s, nil
}

func (s *Server) cleanup(err error) error {
	if s.own {
		os.RemoveAll(s.dir)
	}
	return err
}

// Dir is the directory that holds the data.
func (s *Server) Dir() string { return s.dir }

// Endpoint is the client address, host:port.
func (s *Server) Endpoint() string { return s.etcd.Clients[0].Addr().String() }

// Stopped is closed when etcd stops by itself (a fatal error: Err says
// which), not by Close.
func (s *Server) Stopped() <-chan struct{} { return s.etcd.Server.StopNotify() }

// Err returns the error etcd stopped with, if any: it is read once etcd
// has stopped (see Stopped).
func (s *Server) Err() error {
	select {
	case err := <-s.etcd.Err():
		return err
	default:
		return nil
	}
}

// Close stops etcd and removes a temporary data directory.
func (s *Server) Close() {
	s.etcd.Close()
	_ = s.cleanup(nil)
}

// FreeURL returns a loopback URL on a port that was free a moment ago.
func FreeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}
