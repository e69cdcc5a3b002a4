package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd"
)

// rinkdDriver runs each member as a rinkd.Server in this process, with an
// etcd client of its own through a proxy of its own, and its app as an App
// that speaks HTTP/JSON to it.
type rinkdDriver struct{}

func (rinkdDriver) Name() string { return "rinkd-http" }

type rinkdMember struct {
	cfg   Config
	p     proxy.Server
	cli   *clientv3.Client
	srv   *rinkd.Server
	addr  string
	mu    sync.Mutex
	app   *App   // the current app
	apps  []*App // every app started, for the cleanup
	cut   atomic.Bool
	clean sync.Once
}

func (rinkdDriver) Join(ctx context.Context, tb TB, cfg Config) (Member, error) {
	tb.Helper()
	p, err := newProxy(tb)
	if err != nil {
		return nil, err
	}
	cli, err := proxyClient(p)
	if err != nil {
		return nil, err
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = rink.MinSessionTTL
	}
	opts := []rink.Option{rink.WithRebalanceDelay(cfg.RebalanceDelay), rink.WithLoadInterval(loadInterval)}
	if cfg.Replicas != 0 {
		opts = append(opts, rink.WithReplicas(cfg.Replicas))
	}
	srv, err := rinkd.New(ctx, rinkd.Config{Client: cli, Rink: cfg.Rink, Member: cfg.Member, TTL: ttl, Options: opts,
		Logger: testLogger(cfg.Member)})
	if err != nil {
		cli.Close()
		if errors.Is(err, rinkd.ErrInvalidConfig) { // the sidecar's own settings (flags), not its API
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nil, err
	}
	m := &rinkdMember{cfg: cfg, p: p, cli: cli, srv: srv}
	addrs, err := srv.Start("127.0.0.1:0", "127.0.0.1:0", "")
	if err != nil {
		_ = srv.Shutdown(context.Background())
		cli.Close()
		return nil, err
	}
	m.addr = addrs.HTTP
	m.app = NewApp(addrs.HTTP, cfg.History)
	m.apps = []*App{m.app}
	tb.Cleanup(m.cleanup)
	if err := m.cur().Open(ctx); err != nil {
		return nil, err
	}
	if len(cfg.Roles) > 0 {
		if err := m.cur().Await(cfg.Roles...); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *rinkdMember) cleanup() {
	m.clean.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.mu.Lock()
		apps := m.apps
		m.mu.Unlock()
		if m.cut.Load() {
			m.cli.Close() // nothing to hand over: stop at once
			for _, a := range apps {
				a.Close()
			}
		}
		_ = m.srv.Shutdown(ctx)
		for _, a := range apps {
			a.Close()
		}
		m.cli.Close()
	})
}

func (m *rinkdMember) Name() string { return m.cfg.Member }

func (m *rinkdMember) Await(roles ...string) error { return m.cur().Await(roles...) }

func (m *rinkdMember) Holding() []string { return m.cur().Holding() }

func (m *rinkdMember) Secondaries() []string { return m.cur().Secondaries() }

func (m *rinkdMember) Owners(role string) ([]string, bool, error) { return m.cur().Owners(role) }

func (m *rinkdMember) Rank() (Rank, error) { return m.cur().Rank() }

func (m *rinkdMember) Ready() (bool, error) { return m.cur().Ready() }

func (m *rinkdMember) Ended() bool {
	ended, _ := m.cur().Ended()
	return ended
}

// Leave is a pod's stop: the preStop hook drains (rinkd revokes the app's
// roles, waits for its releases and leaves); the sidecar itself stays up
// until the test ends.
func (m *rinkdMember) Leave(ctx context.Context) error {
	if err := m.cur().Drain(); err != nil {
		return err
	}
	select {
	case <-m.cur().EndedC():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the session did not end after the drain: %w", ctx.Err())
	}
}

// Crash is a SIGKILL of the sidecar: cut off etcd, its connections to the
// app closed (the app sees its streams end), the Server abandoned.
func (m *rinkdMember) Crash() {
	m.cut.Store(true)
	blackhole(m.p)
	m.cur().Cut()
}

// Partition cuts the sidecar off etcd and makes it silent to the app: the
// app sees no REVOKED and no end of stream, and must stop when its grants'
// validity lapses.
func (m *rinkdMember) Partition() {
	m.cut.Store(true)
	blackhole(m.p)
	m.cur().Freeze()
}

func (m *rinkdMember) Isolate() { pause(m.p) }

func (m *rinkdMember) Heal() { unpause(m.p) }

func (m *rinkdMember) CrashApp() error {
	m.cur().Kill()
	return nil
}

// RestartApp opens a session anew, as an app restarted beside its sidecar
// does: it retries while rinkd still answers 409 (the dead app's session
// is still closing).
func (m *rinkdMember) RestartApp(ctx context.Context) error {
	for {
		a := NewApp(m.addr, m.cfg.History)
		m.mu.Lock()
		m.apps = append(m.apps, a)
		m.mu.Unlock()
		err := a.Open(ctx)
		if err == nil {
			m.mu.Lock()
			m.app = a
			m.mu.Unlock()
			if len(m.cfg.Roles) > 0 {
				return a.Await(m.cfg.Roles...)
			}
			return nil
		}
		a.Close()
		if !errors.Is(err, ErrConflict) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (m *rinkdMember) JoinAgain(ctx context.Context) error {
	a := NewApp(m.addr, m.cfg.History)
	defer a.Close()
	return a.Open(ctx)
}

func (m *rinkdMember) Release(role string, token int64) error { return m.cur().Release(role, token) }

func (m *rinkdMember) ReportLoad(role string, units float64) error {
	return m.cur().ReportLoad(role, units)
}

// cur returns the current app.
func (m *rinkdMember) cur() *App {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.app
}
