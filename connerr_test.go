package rink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/embedetcd"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// The errors of a join that cannot reach etcd, or may not use it (see
// contact). Each test logs how long the join took to fail.

// wantFast checks that err came within limit and mentions every one of
// words.
func wantFast(t *testing.T, what string, err error, took, limit time.Duration, words ...string) {
	t.Helper()
	t.Logf("%s: after %v: %v", what, took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if took > limit {
		t.Errorf("%s: returned after %v, want under %v", what, took, limit)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not mention %q", what, err, w)
		}
	}
}

func TestNewRefusedSaysWhy(t *testing.T) {
	t.Parallel()
	dead := freeURL() // nothing listens here
	cli := newClient(t, dead.Host)
	began := time.Now()
	r, err := New(cli, rinkName(t)) // the default join timeout: 15 s
	if r != nil {
		t.Fatal("joined a dead etcd")
	}
	wantFast(t, "New", err, time.Since(began), 5*time.Second, dead.Host, "connection refused")
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("New: %v does not wrap ErrUnreachable", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("New: %v wraps context.DeadlineExceeded before its deadline", err)
	}

	began = time.Now()
	_, err = NewContext(context.Background(), cli, rinkName(t))
	wantFast(t, "NewContext", err, time.Since(began), 5*time.Second, dead.Host, "connection refused")

	began = time.Now()
	_, err = NewObserver(cli, rinkName(t))
	wantFast(t, "NewObserver", err, time.Since(began), 5*time.Second, dead.Host, "connection refused")
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("NewObserver: %v does not wrap ErrUnreachable", err)
	}
}

// TestJoinTimeoutSaysWhy: a join timeout shorter than the grace still
// returns a deadline error, now with the cause.
func TestJoinTimeoutSaysWhy(t *testing.T) {
	dead := freeURL()
	cli := newClient(t, dead.Host)
	began := time.Now()
	_, err := New(cli, rinkName(t), WithJoinTimeout(time.Second))
	wantFast(t, "New", err, time.Since(began), 5*time.Second, dead.Host, "connection refused")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnreachable) {
		t.Errorf("%v: want context.DeadlineExceeded and ErrUnreachable", err)
	}
}

// TestNewWaitsForARestartingEtcd: an endpoint that refuses for less than
// the grace, then serves, is joined.
func TestNewWaitsForARestartingEtcd(t *testing.T) {
	from := freeURL()
	up := make(chan proxy.Server, 1)
	// (Cleanups run last first: the proxy closes after the client. The
	// other way round, its Close waits for connections the client still
	// holds, for ever: the README's test command hung here once in five.)
	t.Cleanup(func() { (<-up).Close() })
	cli := newClient(t, from.Host)
	time.AfterFunc(refusedGrace/2, func() {
		from.Scheme = "tcp"
		up <- proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: url.URL{Scheme: "tcp", Host: testEndpoint}})
	})
	began := time.Now()
	r := join(t, cli, rinkName(t))
	t.Logf("joined after %v", time.Since(began).Round(time.Millisecond))
	_ = r
}

// TestNewWaitsForASlowEtcd: an endpoint that accepts connections but
// answers nothing fails the join at its timeout, not before.
func TestNewWaitsForASlowEtcd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-accepted
		for _, c := range conns {
			c.Close()
		}
	})
	cli := newClient(t, l.Addr().String())
	const timeout = 3 * time.Second
	began := time.Now()
	_, err = New(cli, rinkName(t), WithJoinTimeout(timeout))
	took := time.Since(began)
	wantFast(t, "New", err, took, timeout+2*time.Second, l.Addr().String())
	if took < timeout {
		t.Errorf("gave up after %v, before the join timeout %v", took, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: want context.DeadlineExceeded", err)
	}
	// No connection completed (as behind a firewall that drops packets):
	// a caller that retries on ErrUnreachable retries this too.
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("%v: want ErrUnreachable (no connection to etcd completed)", err)
	}
}

// secureEtcd is an embedded etcd that serves clients over TLS with client
// certificates, with auth enabled: user "root" (password rootPassword)
// and user rinkUser (password rinkPassword), whose role may read and write
// the keys under rink/<rinkPrefix>.
type secureEtcd struct {
	srv   *embedetcd.Server
	certs embedetcd.Certs
}

const (
	rootPassword = "root-secret"
	rinkUser     = "orders-svc"
	rinkPassword = "orders-secret"
	// viewUser's role may only read the keys under rink/<rinkPrefix>: what
	// an Observer needs (docs/operations.md).
	viewUser     = "orders-router"
	viewPassword = "router-secret"
)

func startSecureEtcd(t *testing.T, rinkPrefix string) *secureEtcd {
	t.Helper()
	certs, err := embedetcd.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true, TLS: &certs.Server, BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s := &secureEtcd{srv: srv, certs: certs}
	root := s.client(t, s.tls(t), "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "rink-orders"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "rink-orders", rinkPrefix, clientv3.GetPrefixRangeEnd(rinkPrefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, rinkUser, rinkPassword); return err },
		func() error { _, err := root.UserGrantRole(ctx, rinkUser, "rink-orders"); return err },
		func() error { _, err := root.RoleAdd(ctx, "rink-orders-read"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "rink-orders-read", rinkPrefix, clientv3.GetPrefixRangeEnd(rinkPrefix), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, viewUser, viewPassword); return err },
		func() error { _, err := root.UserGrantRole(ctx, viewUser, "rink-orders-read"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// tls returns the client TLS configuration: the client certificate and
// the CA that signed the server's.
func (s *secureEtcd) tls(t *testing.T) *tls.Config {
	t.Helper()
	c, err := transport.TLSInfo{CertFile: s.certs.Client.Cert, KeyFile: s.certs.Client.Key, TrustedCAFile: s.certs.Client.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client connects to s as user (none: ""), closed when the test ends.
func (s *secureEtcd) client(t *testing.T, tc *tls.Config, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"https://" + s.srv.Endpoint()},
		TLS:         tc,
		Username:    user,
		Password:    password,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestNewTLSMismatchSaysWhy(t *testing.T) {
	s := startSecureEtcd(t, "rink/orders/")
	ep := s.srv.Endpoint()
	good := s.tls(t)

	noCert := good.Clone()
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	other, err := embedetcd.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrongCA, err := transport.TLSInfo{CertFile: s.certs.Client.Cert, KeyFile: s.certs.Client.Key, TrustedCAFile: other.Client.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		cli  *clientv3.Client
	}{
		{"no client certificate", s.client(t, noCert, "", "")},
		{"unknown authority", s.client(t, wrongCA, "", "")},
		{"plaintext", newClient(t, ep)},
	} {
		began := time.Now()
		_, err := New(c.cli, "orders")
		wantFast(t, c.what, err, time.Since(began), 5*time.Second, ep, "TLS")
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("%s: %v does not wrap ErrUnreachable", c.what, err)
		}
	}
}

func TestNewAuthSaysWhy(t *testing.T) {
	s := startSecureEtcd(t, "rink/orders/")

	// A user whose role covers another rink's keys.
	began := time.Now()
	_, err := New(s.client(t, s.tls(t), rinkUser, rinkPassword), "payments")
	wantFast(t, "another rink", err, time.Since(began), 5*time.Second, s.srv.Endpoint(), rinkUser, "permission denied", `"rink/payments/"`)
	began = time.Now()
	_, err = NewObserver(s.client(t, s.tls(t), rinkUser, rinkPassword), "payments")
	wantFast(t, "observer of another rink", err, time.Since(began), 5*time.Second, rinkUser, "permission denied", `"rink/payments/"`)

	// A password changed under a running client: its token goes stale,
	// and the old password fails.
	rotated := s.client(t, s.tls(t), rinkUser, rinkPassword)
	root := s.client(t, s.tls(t), "root", rootPassword)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := root.UserChangePassword(ctx, rinkUser, "new-secret"); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	_, err = New(rotated, "orders")
	wantFast(t, "changed password", err, time.Since(began), 5*time.Second, rinkUser, "authentication failed")
}

// TestSecureRink runs a rink against an etcd that serves TLS with client
// certificates and has auth enabled, as a user whose role may read and
// write rink/orders/ and nothing else: members join, hold roles, hand
// them over when one leaves, and an Observer follows them. (Permission
// to the rink's own prefix is all that a member and an Observer need:
// see docs/operations.md.)
func TestSecureRink(t *testing.T) {
	s := startSecureEtcd(t, "rink/orders/")
	h := &history{}
	var ms []*Rink
	for i := 0; i < 3; i++ {
		cli := s.client(t, s.tls(t), rinkUser, rinkPassword)
		ms = append(ms, join(t, cli, "orders", WithMemberName(fmt.Sprintf("m%d", i)), h.hook()))
	}
	waitSettled(t, ms...)
	// The observer reads as a user that may only read the rink's keys.
	viewer := s.client(t, s.tls(t), viewUser, viewPassword)
	ob, err := NewObserver(viewer, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if _, err := New(viewer, "orders", WithMemberName("viewer")); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a member joined as a user that may only read: %v", err)
	}

	role := roleOf(t, ms[0])
	ctx0, err := ms[0].AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the observer sees m0 own "+role, func() bool {
		o, ok := ob.Owner(role)
		return ok && o == "m0"
	})

	// m0 leaves: the role moves to another member, and the observer
	// follows.
	if err := ms[0].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(ctx0), ErrShutdown) {
		t.Fatalf("m0's role context: %v", context.Cause(ctx0))
	}
	var heir *Rink
	eventually(t, 10*time.Second, role+" handed over", func() bool {
		for _, m := range ms[1:] {
			if o, ok := m.Owner(role); ok && o == m.Member() {
				heir = m
				return true
			}
		}
		return false
	})
	ctx1, err := heir.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	if ta, tb := must(Token(ctx0)), must(Token(ctx1)); tb <= ta {
		t.Errorf("token went from %d to %d", ta, tb)
	}
	eventually(t, 10*time.Second, "the observer sees the heir", func() bool {
		o, ok := ob.Owner(role)
		return ok && o == heir.Member()
	})
	h.check(t)
}

func must[T any](v T, _ bool) T { return v }

// TestNewObserverContextEnds: NewObserverContext gives up when its
// context ends, with the context's error and what the probes saw; a nil
// context is refused, by it and by NewContext, rather than a panic.
func TestNewObserverContextEnds(t *testing.T) {
	addr := freeURL().Host // nothing listens here
	cli := newClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := NewObserverContext(ctx, cli, rinkName(t))
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("returned after %v; its context ended after 500ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
		t.Errorf("NewObserverContext: %v; want context.DeadlineExceeded naming %s", err, addr)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := NewObserverContext(nil, cli, rinkName(t)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewObserverContext(nil, ...): %v; want ErrInvalidOption", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := NewContext(nil, cli, rinkName(t)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewContext(nil, ...): %v; want ErrInvalidOption", err)
	}
}
