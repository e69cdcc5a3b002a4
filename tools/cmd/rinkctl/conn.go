package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// reach dials every endpoint of cfg at once, and for those that speak TLS
// completes the handshake; with readBack it then waits briefly for the
// server to speak, so that a server that refuses our certificate after a
// TLS 1.3 handshake says so. It returns nil when some endpoint answered,
// else an error that names each endpoint and why it could not be reached
// (refused, timed out, no such host, TLS): an unreachable etcd is reported
// as soon as the cause is known, not when a request's deadline passes.
func reach(ctx context.Context, cfg clientv3.Config, readBack bool) error {
	causes := make([]error, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			causes[i] = dialOne(ctx, ep, cfg.TLS, cfg.DialTimeout, readBack)
		}()
	}
	wg.Wait()
	var out []string
	for i, err := range causes {
		if err == nil {
			return nil
		}
		out = append(out, fmt.Sprintf("%s: %v", cfg.Endpoints[i], err))
	}
	if len(out) == 0 {
		return errors.New("no endpoints")
	}
	return errors.New(strings.Join(out, "; "))
}

// dialOne dials one endpoint ("host:port", "http://host:port",
// "https://host:port", "unix://path", "unix:path", or the same with
// unixs) as the etcd client
// would: over TLS when its scheme says so, or when it names none and tc is
// set.
func dialOne(ctx context.Context, ep string, tc *tls.Config, timeout time.Duration, readBack bool) error {
	network, addr, secure := "tcp", ep, tc != nil
	if rest, ok := strings.CutPrefix(ep, "unix:"); ok && !strings.HasPrefix(rest, "//") {
		network, addr = "unix", rest // ("unix:path", as clientv3 takes it)
	} else if rest, ok := strings.CutPrefix(ep, "unixs:"); ok && !strings.HasPrefix(rest, "//") {
		network, addr, secure = "unix", rest, true
	} else if i := strings.Index(ep, "://"); i >= 0 {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		switch u.Scheme {
		case "http", "https":
			addr, secure = u.Host, u.Scheme == "https"
		case "unix", "unixs":
			network, addr, secure = "unix", u.Host+u.Path, u.Scheme == "unixs"
		default:
			return fmt.Errorf("unknown scheme %q", u.Scheme)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("dial %s %s: timed out after %v", network, addr, timeout)
		}
		return err
	}
	defer conn.Close()
	if !secure {
		return nil
	}
	c := &tls.Config{}
	if tc != nil {
		c = tc.Clone()
	}
	if c.ServerName == "" && network == "tcp" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	c.NextProtos = []string{"h2"}
	tconn := tls.Client(conn, c)
	if err := tconn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS: %w", err)
	}
	if !readBack {
		return nil
	}
	_ = tconn.SetReadDeadline(time.Now().Add(min(timeout, 300*time.Millisecond)))
	var b [1]byte
	if _, err := tconn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("TLS: %w", err)
	}
	return nil
}
