package rink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// ErrUnreachable means that New, NewContext or NewObserver could not reach
// etcd: every endpoint of the client refused the connection, failed its
// TLS handshake, or named a host that does not resolve. The error that
// wraps it names each endpoint and what went wrong there. New returns it
// as soon as the cause is known (a TLS failure at once, refusals once
// every endpoint has refused for a couple of seconds, which an etcd that
// restarts or elects a leader does not) or, when the join timeout runs out
// first, wrapped with context.DeadlineExceeded. An etcd that accepts the
// connection but answers slowly is waited for until the join timeout.
var ErrUnreachable = errors.New("rink: etcd unreachable")

// How the first request of a join (or an observer) is watched (see
// contact).
const (
	// probeAfter is how long the first request runs before its
	// endpoints are probed: a healthy etcd has answered by then, and
	// costs no probe.
	probeAfter = 200 * time.Millisecond
	// probeEvery is the pause between two rounds of probes while every
	// endpoint fails; while one connects, the pause doubles up to
	// probeEveryAlive.
	probeEvery      = 250 * time.Millisecond
	probeEveryAlive = 2 * time.Second
	// probeTimeout bounds one endpoint's probe: an endpoint that has
	// neither connected nor failed by then is merely slow.
	probeTimeout = time.Second
	// refusedGrace is how long every endpoint must have failed before a
	// refusal counts as the answer: an etcd restarting, or a proxy in
	// front of it coming up, refuses for a moment.
	refusedGrace = 2 * time.Second
)

// probeKind is what a probe learnt of an endpoint.
type probeKind int

const (
	probeUp      probeKind = iota // it connected
	probeSlow                     // it neither connected nor failed within probeTimeout
	probeRefused                  // connection refused
	probeNoHost                   // its host name does not resolve
	probeTLS                      // the TLS handshake failed
	probeOther                    // another connection error (a timeout, a reset)
)

// definite reports whether a failure of this kind will not go away by
// itself within a join: wrong TLS settings at once, the others once they
// have lasted refusedGrace.
func (k probeKind) definite() bool { return k == probeRefused || k == probeNoHost || k == probeTLS }

func (k probeKind) String() string {
	switch k {
	case probeUp:
		return "connected"
	case probeSlow:
		return "no connection yet"
	case probeRefused:
		return "connection refused"
	case probeNoHost:
		return "host not found"
	case probeTLS:
		return "TLS handshake failed"
	}
	return "connection failed"
}

// epProbe is one endpoint's state, as one probe found it.
type epProbe struct {
	ep   string
	kind probeKind
	err  error  // the connection's error (nil: probeUp or probeSlow)
	note string // what else the probe found out
}

// unreachableError says, endpoint by endpoint, why etcd could not be
// reached. It wraps ErrUnreachable, each endpoint's connection error, and,
// when the request ran out of time first, the context's error.
type unreachableError struct {
	probes  []epProbe
	lasted  time.Duration // how long every endpoint had been failing
	timeout error         // the context's error, when time ran out first (nil: the failure was definite)
}

func (e *unreachableError) Error() string {
	var b strings.Builder
	b.WriteString("etcd unreachable")
	if d := e.lasted.Round(100 * time.Millisecond); e.timeout == nil && d > 0 {
		fmt.Fprintf(&b, " (every endpoint failing for %v)", d)
	}
	for i, p := range e.probes {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s: %s", sep, p.ep, p.kind)
		if p.err != nil {
			fmt.Fprintf(&b, " (%s)", connMessage(p.err))
		}
		if p.note != "" {
			fmt.Fprintf(&b, ": %s", p.note)
		}
	}
	if e.timeout != nil {
		fmt.Fprintf(&b, ": %v", e.timeout)
	}
	return b.String()
}

func (e *unreachableError) Unwrap() []error {
	errs := []error{ErrUnreachable}
	if e.timeout != nil {
		errs = append(errs, e.timeout)
	}
	for _, p := range e.probes {
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}
	return errs
}

// connMessage is the text of a connection error gRPC reports, without its
// wrapping.
func connMessage(err error) string {
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	msg = strings.TrimPrefix(msg, "connection error: desc = ")
	return strings.Trim(msg, `"`)
}

// classify tells what kind of connection failure err is. gRPC reports a
// connection's failure as text only.
func classify(err error) probeKind {
	msg := strings.ToLower(connMessage(err))
	switch {
	case strings.Contains(msg, "authentication handshake failed"), strings.Contains(msg, "tls:"),
		strings.Contains(msg, "x509:"), strings.Contains(msg, "certificate"):
		return probeTLS
	case strings.Contains(msg, "connection refused"):
		return probeRefused
	case strings.Contains(msg, "no such host"):
		return probeNoHost
	}
	return probeOther
}

// authErrors are etcd's answers to a client whose credentials do not let
// it do what rink asks: they come at once, and a retry meets them again.
var authErrors = []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed,
	rpctypes.ErrInvalidAuthToken, rpctypes.ErrUserNotFound, rpctypes.ErrAuthOldRevision}

func isAuthError(err error) bool {
	for _, e := range authErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// contact runs req, the first etcd request of a join or of an observer,
// bounded by ctx, and returns its error explained. clientv3 waits for a
// connection until ctx ends and then reports only ctx's error, whatever
// kept it from connecting; so while req runs, contact probes each of the
// client's endpoints on a connection of its own (see probeEndpoint), and:
//   - once every endpoint has failed definitely (see probeKind.definite),
//     it cancels req and returns an error wrapping ErrUnreachable that
//     says why, endpoint by endpoint;
//   - if ctx ends first, it returns req's error wrapped with what the
//     last probes found;
//   - an error of etcd's own about credentials or permissions (see
//     authErrors), it returns naming the endpoints, the user, and need,
//     the permission rink needs.
func contact(ctx context.Context, cli *clientv3.Client, need string, req func(context.Context) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var last atomic.Pointer[[]epProbe]
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchEndpoints(rctx, cli, &last, cancel)
	}()
	err := req(rctx)
	verdict := context.Cause(rctx)
	cancel(nil)
	wg.Wait()
	if err == nil {
		return nil
	}
	var unreachable *unreachableError
	if errors.As(verdict, &unreachable) && ctx.Err() == nil {
		return verdict
	}
	if isAuthError(err) {
		who := "the client (no user name: a client certificate's common name, if any, is its user)"
		if cli.Username != "" {
			who = fmt.Sprintf("user %q", cli.Username)
		}
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return fmt.Errorf("etcd at %s refused %s: %w (rink needs %s: see docs/operations.md)", strings.Join(cli.Endpoints(), ","), who, err, need)
		}
		return fmt.Errorf("etcd at %s refused %s: %w", strings.Join(cli.Endpoints(), ","), who, err)
	}
	if ctx.Err() == nil {
		return err
	}
	if !errors.Is(err, ctx.Err()) {
		err = ctx.Err() // (the probes' verdict canceled req as ctx ended: ctx's error is the answer)
	}
	// Out of time: say what the probes last saw.
	ps := last.Load()
	if ps == nil {
		return err
	}
	down := true // (no endpoint connected: refused, unresolved, TLS, or packets dropped)
	for _, p := range *ps {
		down = down && p.kind != probeUp
	}
	if down {
		return &unreachableError{probes: *ps, timeout: err}
	}
	var up []string
	for _, p := range *ps {
		if p.kind == probeUp {
			up = append(up, p.ep)
		}
	}
	if len(up) > 0 {
		return fmt.Errorf("%w (etcd at %s accepted the connection but did not answer in time: is it slow, or without quorum?)", err, strings.Join(up, ","))
	}
	return fmt.Errorf("%w (no connection to etcd at %s completed in time)", err, strings.Join(cli.Endpoints(), ","))
}

// watchEndpoints probes the client's endpoints in rounds, from probeAfter
// on, until ctx ends, and keeps the newest round in last; once every
// endpoint has failed definitely (for refusedGrace, unless each failed its
// TLS handshake), it cancels ctx with an unreachableError.
func watchEndpoints(ctx context.Context, cli *clientv3.Client, last *atomic.Pointer[[]epProbe], fail context.CancelCauseFunc) {
	if !sleep(ctx, probeAfter) {
		return
	}
	var since time.Time // since when every endpoint has failed definitely
	pause := probeEvery / 2
	for ctx.Err() == nil && cli.Ctx().Err() == nil {
		eps := cli.Endpoints()
		round := make([]epProbe, len(eps))
		var wg sync.WaitGroup
		for i, ep := range eps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				round[i] = probeEndpoint(ctx, cli, ep)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		last.Store(&round)
		allDefinite, allTLS := len(round) > 0, true
		for _, p := range round {
			allDefinite = allDefinite && p.kind.definite()
			allTLS = allTLS && p.kind == probeTLS
		}
		switch {
		case !allDefinite:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		if allDefinite && (allTLS || time.Since(since) >= refusedGrace) {
			fail(&unreachableError{probes: round, lasted: time.Since(since)})
			return
		}
		if allDefinite {
			pause = probeEvery
		} else {
			// An endpoint connected, or is slow to: etcd is there, and
			// may be without quorum or busy, or may yet refuse the
			// client (TLS 1.3 says so after the handshake). Probe less
			// and less often (a fleet that restarts against such an
			// etcd would otherwise open a connection per member and
			// endpoint four times a second).
			pause = min(2*pause, probeEveryAlive)
		}
		sleep(ctx, pause)
	}
}

// probeEndpoint connects to ep with the client's settings (its TLS
// configuration and credentials) on a connection of its own, and reports
// whether it connected, failed (and why: gRPC says so to a request that
// does not wait for the connection), or neither within probeTimeout.
func probeEndpoint(ctx context.Context, cli *clientv3.Client, ep string) epProbe {
	conn, err := cli.Dial(ep)
	if err != nil {
		return epProbe{ep: ep, kind: classify(err), err: err}
	}
	defer conn.Close()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn.Connect()
	for {
		switch s := conn.GetState(); s {
		case connectivity.Ready:
			return epProbe{ep: ep, kind: probeUp}
		case connectivity.TransientFailure:
			_, err := etcdserverpb.NewMaintenanceClient(conn).Status(pctx, &etcdserverpb.StatusRequest{}, grpc.WaitForReady(false))
			if err == nil {
				return epProbe{ep: ep, kind: probeUp}
			}
			if pctx.Err() != nil {
				return epProbe{ep: ep, kind: probeSlow}
			}
			var etcdErr rpctypes.EtcdError
			if errors.As(rpctypes.Error(err), &etcdErr) {
				return epProbe{ep: ep, kind: probeUp} // (etcd answered)
			}
			kind := classify(err)
			if kind == probeOther && servesTLS(pctx, ep) {
				// A client without TLS settings, at an etcd that serves
				// TLS only: gRPC sees the connection close.
				return epProbe{ep: ep, kind: probeTLS, err: err, note: "the endpoint serves TLS, and the client has no TLS configuration (clientv3.Config.TLS)"}
			}
			return epProbe{ep: ep, kind: kind, err: err}
		default:
			if !conn.WaitForStateChange(pctx, s) {
				return epProbe{ep: ep, kind: probeSlow}
			}
		}
	}
}

// ancestorKeys names the keys outside its own prefix that a member of
// rink name reads (see nestingOps): the map key and the member keys of
// the rink each ancestor of name would be.
func ancestorKeys(name string) string {
	var ks []string
	segs := strings.Split(name, "/")
	for i := 1; i < len(segs); i++ {
		k := newKeys(strings.Join(segs[:i], "/"))
		ks = append(ks, fmt.Sprintf("%q", k.Map()), fmt.Sprintf("the keys under %q", k.Members()))
	}
	return strings.Join(ks, ", ")
}

// servesTLS reports whether the plaintext endpoint ep (host:port, or
// http://host:port) answers a TLS handshake: a client without TLS
// settings, at an etcd that serves TLS only, sees the connection close
// and no more. (It dials directly, without the client's dial options.)
func servesTLS(ctx context.Context, ep string) bool {
	host, ok := strings.CutPrefix(ep, "http://")
	if !ok && strings.Contains(ep, "://") || strings.HasPrefix(ep, "unix") {
		return false
	}
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // (it only asks whether the endpoint speaks TLS; nothing is sent over it)
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		// A server that asks for a client certificate may fail the
		// handshake after sending its own: that is TLS too.
		var alert tls.AlertError
		return errors.As(err, &alert)
	}
	conn.Close()
	return true
}
