// Package rinkd is the rink sidecar: one rink member run on behalf of an app
// written in any language, which reaches it on localhost through gRPC or
// HTTP/JSON (the API is proto/rink/v1/rink.proto; docs/sidecar.md explains
// it). tools/cmd/rinkd is the program; tests, rinkbench and rink-chaos run
// a Server in their own process.
//
// # The promise across the boundary
//
// The app holds a role from a GRANTED event until the first of: a REVOKED
// event, the end of its session stream, the end of the role's await stream,
// and the grant's validity (RENEWED events extend it). rinkd lets the role's
// heir start only after the first of: the app's ReleaseRole, the end of the
// app's session or await stream (the app ended it, or died), and the
// validity of every grant it sent. Each validity ends a slack before the
// member's own fence deadline (rink.ValidFor), which ends a fencing margin
// before its lease can expire on the etcd server; so even when rinkd is
// cut off, stopped or killed, the app's grant has lapsed before another
// member can be granted the role.
package rinkd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Errors of New.
var (
	// ErrInvalidConfig is returned by New for a missing or unusable setting.
	ErrInvalidConfig = errors.New("rinkd: invalid config")
)

// Config configures a Server.
type Config struct {
	// Client is the etcd client the member and the Observer use. Required.
	Client *clientv3.Client
	// Rink is the rink's name; Member this member's name in it. Required.
	Rink, Member string
	// TTL is the member's session TTL (rink.WithSessionTTL); 0 means
	// rink.DefaultSessionTTL.
	TTL time.Duration
	// Options are further options of the member (rink.WithReplicas,
	// WithZone, WithCapacity, WithRebalanceDelay, ...). rinkd sets the
	// session TTL, the logger and the drain timeout itself.
	Options []rink.Option
	// Slack is how long before the member's fence deadline each grant's
	// validity ends (room for the event's trip to the app); 0 means a
	// sixteenth of the TTL, at least 50 ms.
	Slack time.Duration
	// Logger receives rinkd's logs; nil discards them.
	Logger *zap.Logger
}

// Server serves the rinkd API for one member. Its methods are the gRPC
// service's; Start serves them on listeners, Shutdown stops.
type Server struct {
	rinkv1.UnimplementedRinkServer

	cfg    Config
	log    *zap.Logger
	obs    *rink.Observer
	hist   *history
	health *health.Server

	ctx    context.Context // the server's life: ends in Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // the history follower and the servers' goroutines

	mu       sync.Mutex
	sess     *session           // the open session (nil: none)
	opening  bool               // a session is joining: no other may start
	joined   chan struct{}      // while opening: closed once the join is over (s.sess set, or not)
	stopJoin context.CancelFunc // while opening: abandons the join (Drain)
	draining bool               // Drain was called: no session may start
	grpcSrv  *grpc.Server
	httpSrvs []*http.Server
	addrs    Addrs
}

// Addrs are the addresses a started Server listens on.
type Addrs struct {
	GRPC, HTTP, Probe string
}

// New validates cfg and starts following the rink (for owner lookups and
// the assignment watch). It joins no rink: a session does.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: no etcd client", ErrInvalidConfig)
	}
	if err := rink.ValidRinkName(cfg.Rink); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := rink.ValidMemberName(cfg.Member); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.TTL == 0 {
		cfg.TTL = rink.DefaultSessionTTL
	}
	if cfg.TTL < rink.MinSessionTTL {
		return nil, fmt.Errorf("%w: TTL %v below %v", ErrInvalidConfig, cfg.TTL, rink.MinSessionTTL)
	}
	if cfg.Slack == 0 {
		cfg.Slack = max(cfg.TTL/16, 50*time.Millisecond)
	}
	if cfg.Slack < 0 || cfg.Slack >= cfg.TTL/2 {
		return nil, fmt.Errorf("%w: slack %v: want (0, TTL/2)", ErrInvalidConfig, cfg.Slack)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	obs, err := rink.NewObserverContext(ctx, cfg.Client, cfg.Rink, rink.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, obs: obs, health: health.NewServer()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hist = newHistory(obs.State())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.hist.follow(s.ctx, obs)
	}()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rinkv1.Rink_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// memberOptions are the options the session's member joins with.
func (s *Server) memberOptions() []rink.Option {
	opts := append([]rink.Option(nil), s.cfg.Options...)
	// The heir of a role waits for the app's release or the validity of
	// its grant, which is shorter than a TTL: the drain timeout must not
	// cut that wait short.
	return append(opts, rink.WithSessionTTL(s.cfg.TTL), rink.WithDrainTimeout(s.cfg.TTL+time.Second),
		rink.WithLogger(s.log), rink.WithMemberName(s.cfg.Member))
}

// Start serves gRPC on grpcAddr and the HTTP/JSON API on httpAddr (with
// /healthz and /readyz), and, unless probeAddr is empty, the probes alone on
// probeAddr. Ports 0 pick free ones: Addrs tells which.
func (s *Server) Start(grpcAddr, httpAddr, probeAddr string) (Addrs, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return Addrs{}, err
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		gl.Close()
		return Addrs{}, err
	}
	var pl net.Listener
	if probeAddr != "" {
		if pl, err = net.Listen("tcp", probeAddr); err != nil {
			gl.Close()
			hl.Close()
			return Addrs{}, err
		}
	}
	g := grpc.NewServer()
	rinkv1.RegisterRinkServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	// The HTTP/JSON API calls the Server's methods directly, with no gRPC
	// hop: the unary calls through the gateway's routes (ReleaseRole is on
	// the path of every drained handover), the streams through
	// serveStream, in the gateway's format.
	marshaler := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler))
	if err := rinkv1.RegisterRinkHandlerServer(s.ctx, gw, s); err != nil {
		gl.Close()
		hl.Close()
		if pl != nil {
			pl.Close()
		}
		return Addrs{}, err
	}
	api := http.NewServeMux()
	api.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := streamRoutes[r.URL.Path]; ok {
			s.serveStream(marshaler, w, r)
			return
		}
		gw.ServeHTTP(w, r)
	}))
	s.probes(api)
	servers := []*http.Server{{Handler: api, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{hl}
	addrs := Addrs{GRPC: gl.Addr().String(), HTTP: hl.Addr().String()}
	if pl != nil {
		pm := http.NewServeMux()
		s.probes(pm)
		servers = append(servers, &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, pl)
		addrs.Probe = pl.Addr().String()
	}
	s.mu.Lock()
	s.grpcSrv, s.httpSrvs, s.addrs = g, servers, addrs
	s.mu.Unlock()
	s.wg.Add(1 + len(servers))
	go func() {
		defer s.wg.Done()
		if err := g.Serve(gl); err != nil {
			s.log.Warn("rinkd: gRPC server stopped", zap.Error(err))
		}
	}()
	for i, srv := range servers {
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("rinkd: HTTP server stopped", zap.Error(err))
			}
		}()
	}
	return addrs, nil
}

// Addrs returns the addresses Start listens on.
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs
}

// probes adds /healthz (rinkd runs) and /readyz (rinkd follows the rink and
// is not draining) to mux: the sidecar's own probes. The app's readiness is
// GET /v1/ready's ready field.
func (s *Server) probes(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ri := s.readyInfo()
		if !ri.Following || ri.Draining {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "following=%v draining=%v\n", ri.Following, ri.Draining)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// Shutdown ends the session as Drain does (bounded by ctx), then stops
// serving and following the rink. If ctx ends first, it stops serving all
// the same and returns ctx's error; the streams it ends that way release
// nothing: the member leaves once the app has released its revoked roles
// or their grants have lapsed (or, if the process exits first, once its
// lease expires).
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.drain(ctx, "stopped")
	s.mu.Lock()
	g, servers := s.grpcSrv, s.httpSrvs
	s.grpcSrv, s.httpSrvs = nil, nil
	s.mu.Unlock()
	s.health.Shutdown()
	s.cancel() // ends every stream's wait
	for _, srv := range servers {
		srv.Close()
	}
	if g != nil {
		g.Stop()
	}
	s.obs.Close()
	s.wg.Wait()
	return err
}

// drain refuses new sessions and ends the open one with reason: its
// member revokes every role, waits for the app's releases and leaves.
func (s *Server) drain(ctx context.Context, reason string) error {
	s.mu.Lock()
	s.draining = true
	sess := s.sess
	joined, stopJoin := s.joined, s.stopJoin
	s.mu.Unlock()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(rinkv1.Rink_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	if joined != nil {
		// A session is joining: abandon the join, and end the session if
		// it joined all the same (OpenSession ends it, seeing draining).
		stopJoin()
		select {
		case <-joined:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		sess = s.sess
		s.mu.Unlock()
	}
	if sess == nil {
		return nil
	}
	sess.end(reason)
	select {
	case <-sess.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// session is the app's session: one incarnation of the member.
type session struct {
	id string
	r  *rink.Rink

	appGone chan struct{} // closed when the app ended its session stream (or died): it holds nothing
	stop    chan struct{} // closed by end: rinkd ends the session
	ended   chan struct{} // closed once the member has left
	once    sync.Once

	mu     sync.Mutex
	reason string                     // why the session ends (set before stop or appGone is closed)
	grants map[string]map[*grant]bool // current grants by role, for ReleaseRole
}

func (ss *session) end(reason string) {
	ss.once.Do(func() {
		ss.mu.Lock()
		ss.reason = reason
		ss.mu.Unlock()
		close(ss.stop)
	})
}

// ending reports whether the session is ending (or has ended).
func (ss *session) ending() bool {
	select {
	case <-ss.stop:
		return true
	case <-ss.appGone:
		return true
	default:
		return false
	}
}

func (ss *session) endReason() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.reason
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// OpenSession implements rinkv1.RinkServer.
func (s *Server) OpenSession(_ *rinkv1.OpenSessionRequest, stream rinkv1.Rink_OpenSessionServer) error {
	s.mu.Lock()
	switch {
	case s.draining:
		s.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "rinkd: draining, no new session")
	case s.sess != nil || s.opening:
		s.mu.Unlock()
		return status.Error(codes.AlreadyExists, "rinkd: a session is open already (one per sidecar)")
	}
	ctx := stream.Context()
	jctx, stopJoin := context.WithCancel(ctx) // (bounds the join only)
	defer stopJoin()
	joined := make(chan struct{})
	s.opening, s.joined, s.stopJoin = true, joined, stopJoin
	s.mu.Unlock()

	r, err := rink.NewContext(jctx, s.cfg.Client, s.cfg.Rink, s.memberOptions()...)
	if err != nil {
		s.mu.Lock()
		s.opening, s.joined, s.stopJoin = false, nil, nil
		draining := s.draining
		s.mu.Unlock()
		close(joined)
		if draining && ctx.Err() == nil {
			return status.Error(codes.FailedPrecondition, "rinkd: draining, no new session")
		}
		return statusOf(err)
	}
	ss := &session{id: newSessionID(), r: r, appGone: make(chan struct{}), stop: make(chan struct{}),
		ended: make(chan struct{}), grants: map[string]map[*grant]bool{}}
	s.mu.Lock()
	s.opening, s.joined, s.stopJoin = false, nil, nil
	draining := s.draining
	s.sess = ss
	s.mu.Unlock()
	close(joined)
	if draining { // Drain ran while we joined
		ss.end("drained")
	}
	s.log.Info("rinkd: session opened", zap.String("session", ss.id), zap.String("member", r.Member()))

	err = stream.Send(&rinkv1.SessionEvent{Event: &rinkv1.SessionEvent_Opened{Opened: &rinkv1.SessionOpened{
		Session: ss.id, Member: r.Member(), Rink: r.Name(), Replicas: int32(s.joinedReplicas(ctx, r)),
	}}})
	var last *rinkv1.RankInfo
	for err == nil {
		rk := r.Rank()
		if ri := rankInfo(rk); last == nil || !sameRank(last, ri) {
			last = ri
			if err = stream.Send(&rinkv1.SessionEvent{Event: &rinkv1.SessionEvent_Rank{Rank: ri}}); err != nil {
				break
			}
		}
		select {
		case <-rk.Changed():
			continue
		case <-ctx.Done():
			err = ctx.Err()
		case <-ss.stop:
			err = errStop
		case <-r.Done():
			err = r.Err()
			ss.end(err.Error())
		case <-s.ctx.Done():
			err = errStop
			ss.end("stopped")
		}
	}
	if !errors.Is(err, errStop) && ss.endReason() == "" && s.ctx.Err() != nil {
		// rinkd stopped serving, which ended the stream: that is no
		// sign of the app's (see awaiter.appEnded).
		ss.end("stopped")
	}
	if !errors.Is(err, errStop) && ss.endReason() == "" {
		// The app ended the stream, or died: it holds nothing now, so
		// nothing waits for its releases.
		ss.mu.Lock()
		ss.reason = "session-ended"
		ss.mu.Unlock()
		close(ss.appGone)
		ss.end("session-ended")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.TTL+2*time.Second)
	serr := r.Shutdown(sctx)
	cancel()
	reason := ss.endReason()
	if serr != nil && !errors.Is(serr, rink.ErrShutdown) {
		s.log.Warn("rinkd: leaving the rink failed", zap.String("session", ss.id), zap.Error(serr))
	}
	s.mu.Lock()
	s.sess = nil
	s.mu.Unlock()
	// (Logged first: Drain and Shutdown return once ended is closed.)
	s.log.Info("rinkd: session ended", zap.String("session", ss.id), zap.String("reason", reason))
	close(ss.ended)
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	_ = stream.Send(&rinkv1.SessionEvent{Event: &rinkv1.SessionEvent_Ended{Ended: &rinkv1.SessionEnded{Reason: reason}}})
	return nil
}

var errStop = errors.New("rinkd: session ended by rinkd")

// joinedReplicas returns the replicas per slot of the rink r joined, as
// the Observer reads them from the map: it waits (at most a TTL) until the
// Observer has read a map as new as r's, for a member that founds a rink
// returns from its join before its first map is proclaimed, and the
// Observer's state before that names no replicas.
func (s *Server) joinedReplicas(ctx context.Context, r *rink.Rink) int {
	deadline := time.NewTimer(s.cfg.TTL)
	defer deadline.Stop()
	for {
		rk, st := r.Rank(), s.obs.State()
		if st.Version > 0 && st.Version >= rk.Version {
			return replicasOf(st)
		}
		select {
		case <-rk.Changed():
		case <-st.Changed():
		case <-r.Done():
			return replicasOf(st)
		case <-ctx.Done():
			return replicasOf(st)
		case <-deadline.C:
			return replicasOf(st)
		}
	}
}

func replicasOf(st rink.State) int {
	if st.Replicas == 0 {
		return 1
	}
	return st.Replicas
}

func rankInfo(rk rink.Rank) *rinkv1.RankInfo {
	return &rinkv1.RankInfo{Member: rk.Member, Index: int32(rk.Index), Size: int32(rk.Size), Waiting: rk.Waiting,
		Version: rk.Version, Leader: rk.Leader, Settled: rk.Settled}
}

// sameRank compares all but the version: a new map that changes nothing
// of this member's rank sends no event.
func sameRank(a, b *rinkv1.RankInfo) bool {
	return a.Index == b.Index && a.Size == b.Size && a.Waiting == b.Waiting && a.Leader == b.Leader && a.Settled == b.Settled
}

// statusOf maps rink's errors to gRPC status codes.
func statusOf(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if errors.Is(err, rink.ErrUnreachable) {
			return status.Error(codes.Unavailable, err.Error())
		}
		return status.FromContextError(err).Err()
	case errors.Is(err, rink.ErrInvalidRole), errors.Is(err, rink.ErrInvalidName), errors.Is(err, rink.ErrInvalidOption):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, rink.ErrMemberExists), errors.Is(err, rink.ErrUnreachable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, rink.ErrIncompatible):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, rink.ErrShutdown):
		return status.Error(codes.Aborted, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// session returns the open session named id.
func (s *Server) session(id string) (*session, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "rinkd: no session named: open one with OpenSession")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil || s.sess.id != id {
		return nil, status.Errorf(codes.NotFound, "rinkd: session %q is not open", id)
	}
	return s.sess, nil
}

// GetRank implements rinkv1.RinkServer.
func (s *Server) GetRank(_ context.Context, req *rinkv1.GetRankRequest) (*rinkv1.RankInfo, error) {
	ss, err := s.session(req.GetSession())
	if err != nil {
		return nil, err
	}
	return rankInfo(ss.r.Rank()), nil
}

// GetOwners implements rinkv1.RinkServer.
func (s *Server) GetOwners(_ context.Context, req *rinkv1.GetOwnersRequest) (*rinkv1.GetOwnersResponse, error) {
	if req.GetRole() == "" {
		return nil, status.Error(codes.InvalidArgument, "rinkd: empty role")
	}
	st := s.obs.State()
	owners, ok := st.Owners(req.GetRole())
	resp := &rinkv1.GetOwnersResponse{Role: req.GetRole(), Found: ok, Owners: owners, Version: st.Version}
	if ok && len(owners) > 0 {
		resp.Owner = owners[0]
	}
	return resp, nil
}

// GetReady implements rinkv1.RinkServer.
func (s *Server) GetReady(context.Context, *rinkv1.GetReadyRequest) (*rinkv1.ReadyInfo, error) {
	return s.readyInfo(), nil
}

func (s *Server) readyInfo() *rinkv1.ReadyInfo {
	st := s.obs.State()
	s.mu.Lock()
	defer s.mu.Unlock()
	ri := &rinkv1.ReadyInfo{Following: st.Revision > 0 && !st.Closed, Draining: s.draining, Session: s.sess != nil}
	if s.sess != nil {
		ri.Ready = s.sess.r.Ready()
	}
	return ri
}

// Drain implements rinkv1.RinkServer.
func (s *Server) Drain(ctx context.Context, _ *rinkv1.DrainRequest) (*rinkv1.DrainResponse, error) {
	if err := s.drain(ctx, "drained"); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &rinkv1.DrainResponse{}, nil
}

// ReportLoad implements rinkv1.RinkServer.
func (s *Server) ReportLoad(_ context.Context, req *rinkv1.ReportLoadRequest) (*rinkv1.ReportLoadResponse, error) {
	ss, err := s.session(req.GetSession())
	if err != nil {
		return nil, err
	}
	if req.GetRole() == "" {
		return nil, status.Error(codes.InvalidArgument, "rinkd: empty role")
	}
	if u := req.GetUnits(); math.IsNaN(u) || math.IsInf(u, 0) || u <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "rinkd: units %v: want a positive finite number", u)
	}
	ss.r.AddLoad(req.GetRole(), req.GetUnits())
	return &rinkv1.ReportLoadResponse{}, nil
}

// ReleaseRole implements rinkv1.RinkServer.
func (s *Server) ReleaseRole(_ context.Context, req *rinkv1.ReleaseRoleRequest) (*rinkv1.ReleaseRoleResponse, error) {
	ss, err := s.session(req.GetSession())
	if err != nil {
		return nil, err
	}
	if req.GetRole() == "" {
		return nil, status.Error(codes.InvalidArgument, "rinkd: empty role")
	}
	if req.GetToken() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "rinkd: release names no token: give the grant's")
	}
	ss.mu.Lock()
	for g := range ss.grants[req.GetRole()] {
		if g.token == req.GetToken() {
			g.release()
		}
	}
	ss.mu.Unlock()
	return &rinkv1.ReleaseRoleResponse{}, nil
}
