package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/internal/rinkdhttp"
	"github.com/rink-go/rink/tools/rinkd"
)

// Ways a sidecar worker stops when told to (WorkerConfig.SidecarStop).
const (
	// SidecarDrain: its sidecar is drained (POST /v1/drain, as a preStop
	// hook would): the app stops on each REVOKED and releases the role.
	SidecarDrain = "drain"
	// SidecarClose: the app stops acting on its roles and closes its
	// session.
	SidecarClose = "close"
)

// runSidecarWorker is RunWorker for WorkerConfig.Sidecar: the member is a
// rinkd.Server in this process, serving on loopback ports, and the app is
// an HTTP/JSON client of it (rinkdhttp). The app, not the member, writes
// the records: an acquisition when it reads GRANTED, its actions while its
// holding lives by what rinkd told it (no REVOKED, its session and await
// streams open, the grant's validity not past), and a release once it has
// stopped. It opens its session again whenever rinkd ends it, until ctx
// ends; then it stops as cfg.SidecarStop says.
func runSidecarWorker(ctx context.Context, cfg WorkerConfig, log *Log, cli *clientv3.Client, logger *zap.Logger) error {
	opts := []rink.Option{rink.WithRebalanceDelay(cfg.Delay), rink.WithImbalanceTolerance(0)}
	rcfg := rinkd.Config{Client: cli, Rink: cfg.Rink, Member: cfg.Name, TTL: cfg.TTL, Options: opts, Logger: logger}
	var srv *rinkd.Server
	var err error
	for {
		srv, err = rinkd.New(ctx, rcfg)
		if err == nil || !cfg.RetryJoin || ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "worker %s: rinkd.New: %v (trying again)\n", cfg.Name, err)
		if !sleepOrDone(ctx, 500*time.Millisecond) {
			return nil
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.TTL+2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			fmt.Fprintf(os.Stderr, "worker %s: rinkd Shutdown: %v\n", cfg.Name, err)
		}
	}()
	addrs, err := srv.Start("127.0.0.1:0", "127.0.0.1:0", "")
	if err != nil {
		return err
	}
	app := &sidecarApp{cfg: cfg, log: log, http: rinkdhttp.New(addrs.HTTP), hearing: make(chan struct{})}
	close(app.hearing)
	defer app.http.Close()
	// The storm's app-deaf: SIGUSR1 stops the app reading its await
	// streams, SIGUSR2 lets it read again.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case sig := <-sigs:
				app.setDeaf(sig == syscall.SIGUSR1)
			case <-ctx.Done():
				return
			}
		}
	}()
	roles := []string{"leader"}
	for i := 0; i < cfg.Roles; i++ {
		roles = append(roles, fmt.Sprint("partition:", i))
	}
	joined := false
	for ctx.Err() == nil {
		// The session outlives ctx: the app ends it itself, once it has
		// stopped acting on its roles (or has its sidecar drained).
		sess, err := app.http.Open(context.WithoutCancel(ctx))
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %s: opening a session: %v (trying again)\n", cfg.Name, err)
			if !sleepOrDone(ctx, 500*time.Millisecond) {
				break
			}
			continue
		}
		if !joined {
			joined = true
			if err := log.Write(cfg.Name, Joined, "-", 0); err != nil {
				sess.Close()
				return err
			}
			if cfg.Announce {
				fmt.Println(JoinedLine)
			}
		}
		stop, err := app.serve(ctx, sess, roles)
		if err != nil {
			return err
		}
		if stop {
			return nil
		}
		fmt.Fprintf(os.Stderr, "worker %s: session ended (%s): opening another\n", cfg.Name, sess.Reason())
	}
	return nil
}

func sleepOrDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sidecarApp is the app beside a sidecar worker's rinkd.
type sidecarApp struct {
	cfg  WorkerConfig
	log  *Log
	http *rinkdhttp.Client

	mu      sync.Mutex
	hearing chan struct{} // closed while the app reads its await streams
}

// setDeaf stops (or resumes) the app's reading of its await streams.
func (a *sidecarApp) setDeaf(deaf bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.hearing:
		if deaf {
			a.hearing = make(chan struct{})
			fmt.Fprintf(os.Stderr, "worker %s: deaf\n", a.cfg.Name)
		}
	default:
		if !deaf {
			close(a.hearing)
			fmt.Fprintf(os.Stderr, "worker %s: hearing again\n", a.cfg.Name)
		}
	}
}

// events returns aw's events while the app hears, else nil and a channel
// closed when it hears again.
func (a *sidecarApp) events(aw *rinkdhttp.Await) (<-chan rinkdhttp.RoleEvent, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.hearing:
		return aw.Events(), nil
	default:
		return nil, a.hearing
	}
}

// serve holds roles in one session until rinkd ends it (false) or ctx
// ends and the app has stopped as cfg.SidecarStop says (true).
func (a *sidecarApp) serve(ctx context.Context, sess *rinkdhttp.Session, roles []string) (bool, error) {
	// hctx is the app's holdings: it ends when the session's stream does,
	// or when the app stops.
	hctx, stopHolding := context.WithCancel(context.Background())
	defer stopHolding()
	go func() {
		select {
		case <-sess.Done():
			stopHolding()
		case <-hctx.Done():
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, len(roles))
	for _, role := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.holdRole(hctx, sess, role); err != nil {
				errs <- err
			}
		}()
	}
	var err error
	stopping := false
	select {
	case <-sess.Done():
	case err = <-errs:
	case <-ctx.Done():
		stopping = true
		if a.cfg.SidecarStop == SidecarDrain {
			// rinkd revokes every role; the holdings stop on REVOKED and
			// release; the session ends once the member has left.
			dctx, cancel := context.WithTimeout(context.Background(), 2*a.cfg.TTL+2*time.Second)
			if derr := a.http.Drain(dctx); derr != nil {
				fmt.Fprintf(os.Stderr, "worker %s: drain: %v\n", a.cfg.Name, derr)
			}
			cancel()
		}
	}
	stopHolding() // (the holdings record their releases before they return)
	wg.Wait()
	sess.Close()
	return stopping, err
}

// holdRole awaits role in the session, again each time its stream ends,
// until hctx ends.
func (a *sidecarApp) holdRole(hctx context.Context, sess *rinkdhttp.Session, role string) error {
	for hctx.Err() == nil {
		aw, err := a.http.Await(hctx, sess.ID, role)
		if err != nil {
			if !sleepOrDone(hctx, 200*time.Millisecond) {
				return nil
			}
			continue
		}
		err = a.holdStream(hctx, sess, aw, role)
		aw.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// holdStream follows one await stream: a holding from each GRANTED until
// its REVOKED, the stream's end, the app's stop or its validity's end.
// It returns when the stream ends, hctx ends, or a holding lapsed (the
// caller awaits again: a new stream GRANTs anew what the member holds).
func (a *sidecarApp) holdStream(hctx context.Context, sess *rinkdhttp.Session, aw *rinkdhttp.Await, role string) error {
	var h *appHolding
	end := func() error {
		if h == nil {
			return nil
		}
		hh := h
		h = nil
		return hh.stop(a.log, a.cfg.Name)
	}
	release := func(token int64) {
		// Told after the app stopped: the heir may start now.
		ctx, cancel := context.WithTimeout(hctx, a.cfg.TTL)
		defer cancel()
		_ = a.http.Release(ctx, sess.ID, role, token)
	}
	for {
		var lapsed <-chan struct{}
		if h != nil {
			lapsed = h.lapsed
		}
		evs, heard := a.events(aw)
		select {
		case <-heard:
		case ev, ok := <-evs:
			if !ok {
				return end()
			}
			switch ev.Kind {
			case rinkdhttp.Granted:
				if err := end(); err != nil {
					return err
				}
				var err error
				if h, err = a.startHolding(role, ev); err != nil {
					return err
				}
			case rinkdhttp.Renewed:
				if h != nil && ev.Token == h.token {
					h.extend(ev.Deadline())
				}
			case rinkdhttp.Revoked:
				if h != nil && ev.Token == h.token {
					if err := end(); err != nil {
						return err
					}
				}
				release(ev.Token)
			}
		case <-lapsed:
			// Its validity passed with no renewal read: the holding is
			// over. End the stream, and await anew.
			return end()
		case <-hctx.Done():
			return end()
		}
	}
}

// startHolding records the acquisition of a GRANTED holding and starts
// acting on it.
func (a *sidecarApp) startHolding(role string, ev rinkdhttp.RoleEvent) (*appHolding, error) {
	h := newAppHolding(role, ev.Token, ev.Deadline())
	if !h.valid() {
		// Lapsed on its way (the app was slow to read it): never held.
		h.cancel()
		close(h.acted)
		return h, nil
	}
	if err := a.log.Write(a.cfg.Name, Acquire, role, ev.Token); err != nil {
		h.cancel()
		close(h.acted)
		return nil, err
	}
	h.recorded = true
	go h.act(a.log, a.cfg)
	return h, nil
}

// appHolding is the app's holding of a role from one GRANTED: live until
// stopped or until its validity (extended by RENEWED) passes.
type appHolding struct {
	context.Context // ends when stopped; Err also reports the validity's end
	cancel          context.CancelFunc
	role            string
	token           int64
	recorded        bool          // its acquisition was recorded
	lapsed          chan struct{} // closed when act found the validity past
	acted           chan struct{} // closed when act returned
	lapseOnce       sync.Once

	mu       sync.Mutex
	deadline time.Time // with a monotonic reading
}

func newAppHolding(role string, token int64, deadline time.Time) *appHolding {
	ctx, cancel := context.WithCancel(context.Background())
	return &appHolding{Context: ctx, cancel: cancel, role: role, token: token, deadline: deadline,
		lapsed: make(chan struct{}), acted: make(chan struct{})}
}

// Err is the holding's end: stopped, or its validity past.
func (h *appHolding) Err() error {
	if err := h.Context.Err(); err != nil {
		return err
	}
	if !h.valid() {
		return context.DeadlineExceeded
	}
	return nil
}

func (h *appHolding) valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().Before(h.deadline)
}

// extend takes a RENEWED's later deadline, unless the validity has
// already passed: a lapsed holding stays over.
func (h *appHolding) extend(d time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Now().Before(h.deadline) && d.After(h.deadline) {
		h.deadline = d
	}
}

func (h *appHolding) until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// act acts every cfg.Every while the holding lives, each action recorded
// by Log.WriteHeld against the holding (stamped before its check), and
// tells when the validity passed.
func (h *appHolding) act(log *Log, cfg WorkerConfig) {
	defer close(h.acted)
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for {
		// Wake for the next action or the validity's end, whichever first.
		lapse := time.NewTimer(time.Until(h.until()))
		select {
		case <-t.C:
		case <-lapse.C:
		case <-h.Done():
		}
		lapse.Stop()
		if h.Context.Err() != nil {
			return
		}
		if !h.valid() {
			h.lapseOnce.Do(func() { close(h.lapsed) })
			return
		}
		held, err := log.WriteHeld(h, cfg.Name, h.role, h.token)
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %s: writing an action: %v\n", cfg.Name, err)
			return
		}
		if !held {
			if h.Context.Err() == nil {
				h.lapseOnce.Do(func() { close(h.lapsed) })
			}
			return
		}
	}
}

// stop ends the holding: no action after it returns; its release is
// recorded.
func (h *appHolding) stop(log *Log, name string) error {
	h.cancel()
	<-h.acted
	if !h.recorded {
		return nil
	}
	if err := log.Write(name, Release, h.role, h.token); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
