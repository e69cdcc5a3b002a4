package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"

	"github.com/rink-go/rink"
)

// libraryDriver runs each member as a rink.Rink in this process, with an
// etcd client of its own through a proxy of its own. The app is a Watch
// handler: it acts on a role from Assigned until the role's context ends
// (or Revoked, if sooner).
type libraryDriver struct{}

func (libraryDriver) Name() string { return "library" }

type libMember struct {
	name  string
	cfg   Config
	p     proxy.Server
	cli   *clientv3.Client
	r     *rink.Rink
	set   *rink.RoleSet
	hist  *History
	opts  []rink.Option
	clean sync.Once
	cut   atomic.Bool // crashed: cut off etcd

	mu        sync.Mutex
	holding   map[string]*libHolding
	secondary map[string]int // role -> Secondary calls running
}

type libHolding struct {
	role  string
	token int64
	once  sync.Once
}

// libErr maps the library's exported errors to the suite's.
func libErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rink.ErrInvalidRole), errors.Is(err, rink.ErrInvalidOption), errors.Is(err, rink.ErrInvalidName):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, rink.ErrShutdown):
		return fmt.Errorf("%w: %w", ErrGone, err)
	case errors.Is(err, rink.ErrMemberExists):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

func libOptions(cfg Config) []rink.Option {
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = rink.MinSessionTTL
	}
	replicas := cfg.Replicas
	if replicas == 0 {
		replicas = 1
	}
	return []rink.Option{rink.WithMemberName(cfg.Member), rink.WithSessionTTL(ttl),
		rink.WithRebalanceDelay(cfg.RebalanceDelay), rink.WithReplicas(replicas), rink.WithLoadInterval(loadInterval), rink.WithLogger(testLogger(cfg.Member))}
}

func (libraryDriver) Join(ctx context.Context, tb TB, cfg Config) (Member, error) {
	tb.Helper()
	p, err := newProxy(tb)
	if err != nil {
		return nil, err
	}
	cli, err := proxyClient(p)
	if err != nil {
		return nil, err
	}
	m := &libMember{name: cfg.Member, cfg: cfg, p: p, cli: cli, hist: cfg.History, holding: map[string]*libHolding{},
		secondary: map[string]int{}}
	// The drain timeout makes the heir wait for Revoked, where the app
	// records that it stopped (it stops when the role's context ends).
	m.opts = append(libOptions(cfg), rink.WithDrainTimeout(max(cfg.TTL, rink.MinSessionTTL)))
	r, err := rink.NewContext(ctx, cli, cfg.Rink, m.opts...)
	if err != nil {
		cli.Close()
		return nil, libErr(err)
	}
	m.r = r
	tb.Cleanup(m.cleanup)
	set, err := r.Watch(rink.Handler{Assigned: m.assigned, Revoked: m.revoked, Secondary: m.asSecondary}, cfg.Roles...)
	if err != nil {
		return nil, libErr(err)
	}
	m.set = set
	return m, nil
}

func (m *libMember) assigned(ctx context.Context, role string) {
	token, _ := rink.Token(ctx)
	h := &libHolding{role: role, token: token}
	m.mu.Lock()
	m.holding[role] = h
	m.hist.Acquire(role, m.name, token)
	m.mu.Unlock()
	context.AfterFunc(ctx, func() { m.stop(h, "role context ended: "+fmt.Sprint(context.Cause(ctx))) })
}

func (m *libMember) asSecondary(ctx context.Context, role string) {
	m.mu.Lock()
	m.secondary[role]++
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	if m.secondary[role]--; m.secondary[role] == 0 {
		delete(m.secondary, role)
	}
	m.mu.Unlock()
}

func (m *libMember) Secondaries() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for r := range m.secondary {
		out = append(out, r)
	}
	return out
}

func (m *libMember) revoked(role string) {
	m.mu.Lock()
	h := m.holding[role]
	m.mu.Unlock()
	m.stop(h, "revoked")
}

func (m *libMember) stop(h *libHolding, why string) {
	if h == nil {
		return
	}
	h.once.Do(func() {
		m.mu.Lock()
		if m.holding[h.role] == h {
			delete(m.holding, h.role)
		}
		m.hist.Release(h.role, m.name, h.token, why)
		m.mu.Unlock()
	})
}

func (m *libMember) cleanup() {
	m.clean.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if m.cut.Load() {
			m.cli.Close() // nothing to hand over: stop at once
		}
		_ = m.r.Shutdown(ctx)
		if m.set != nil {
			m.set.Close()
		}
		m.cli.Close()
		<-m.r.Done()
	})
}

func (m *libMember) Name() string { return m.name }

func (m *libMember) Await(roles ...string) error { return libErr(m.set.Add(roles...)) }

func (m *libMember) Holding() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for r := range m.holding {
		out = append(out, r)
	}
	return out
}

func (m *libMember) Owners(role string) ([]string, bool, error) {
	o, ok := m.r.Owners(role)
	return o, ok, nil
}

func (m *libMember) Rank() (Rank, error) {
	rk := m.r.Rank()
	return Rank{Index: rk.Index, Size: rk.Size, Waiting: rk.Waiting, Settled: rk.Settled, Leader: rk.Leader}, nil
}

func (m *libMember) Ready() (bool, error) { return m.r.Ready(), nil }

func (m *libMember) Ended() bool {
	select {
	case <-m.r.Done():
		return true
	default:
		return false
	}
}

func (m *libMember) Leave(ctx context.Context) error { return m.r.Shutdown(ctx) }

// Crash cuts the member off etcd and leaves it running: a partition, which
// asks more of it than a kill (its app acts until its role contexts end).
func (m *libMember) Crash() {
	m.cut.Store(true)
	blackhole(m.p)
}

// Partition is Crash: the app, in the member's process, learns that its
// holdings ended from the role contexts, which the member cancels by
// itself (ErrFenced) when it cannot renew its lease.
func (m *libMember) Partition() { m.Crash() }

func (m *libMember) Isolate() { pause(m.p) }

func (m *libMember) Heal() { unpause(m.p) }

func (m *libMember) CrashApp() error {
	return fmt.Errorf("%w: the app and the member are one process: an app crash is a member crash (crash-failover)", ErrUnsupported)
}

func (m *libMember) RestartApp(context.Context) error {
	return fmt.Errorf("%w: the app and the member are one process", ErrUnsupported)
}

func (m *libMember) JoinAgain(ctx context.Context) error {
	cli, err := proxyClient(m.p)
	if err != nil {
		return err
	}
	defer cli.Close()
	r, err := rink.NewContext(ctx, cli, m.cfg.Rink, append(libOptions(m.cfg), rink.WithJoinTimeout(3*time.Second))...)
	if err == nil {
		_ = r.Shutdown(ctx)
		return nil
	}
	return libErr(err)
}

func (m *libMember) Release(string, int64) error {
	return fmt.Errorf("%w: the library has no release call: a holding ends with its role context", ErrUnsupported)
}

func (m *libMember) ReportLoad(role string, units float64) error {
	if role == "" {
		return fmt.Errorf("%w: AddLoad ignores an empty role, by its contract", ErrUnsupported)
	}
	m.r.AddLoad(role, units)
	if m.Ended() {
		return fmt.Errorf("%w: AddLoad returns no error: it ignores load once the rink has stopped, by its contract", ErrUnsupported)
	}
	if math.IsNaN(units) || math.IsInf(units, 0) || units <= 0 {
		return fmt.Errorf("%w: AddLoad returns no error: it ignores units that are not positive and finite, by its contract", ErrUnsupported)
	}
	return nil
}
