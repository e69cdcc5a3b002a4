package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// App is an app of rinkd written by hand against its HTTP/JSON API, as an
// app in any language would be: it opens a session, awaits roles, acts on
// a role from its GRANTED event until the first of its REVOKED event (it
// then calls release), the lapse of the grant's validity (RENEWED events
// extend it; one that comes after the lapse revives the holding, with its
// token), and the end of its await or session stream. Every acquire
// and release goes into a History.
//
// Its connections go through a transport whose connections Kill closes at
// once: what rinkd sees when the app is SIGKILLed.
type App struct {
	base   string // http://host:port
	hist   *History
	tr     *http.Transport
	cl     *http.Client
	ctx    context.Context // the app's life
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	dead      bool // killed: dials no more
	frozen    bool // the sidecar went silent: reads get nothing more
	session   string
	member    string
	replicas  int           // as the opened event said
	over      bool          // the session is over: no holding starts
	ended     chan struct{} // closed when the session stream ends
	endReason string
	rank      Rank
	holding   map[string]*holding // role -> the holding the app acts on
	secondary map[string]bool     // roles rinkd says it keeps a warm copy of
}

type holding struct {
	role  string
	token int64
	once  sync.Once
}

// NewApp returns an app of the rinkd serving HTTP at addr (host:port).
func NewApp(addr string, hist *History) *App {
	a := &App{base: "http://" + addr, hist: hist, conns: map[net.Conn]struct{}{}, ended: make(chan struct{}),
		holding: map[string]*holding{}, secondary: map[string]bool{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	d := &net.Dialer{Timeout: 2 * time.Second}
	a.tr = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			a.mu.Lock()
			dead := a.dead
			a.mu.Unlock()
			if dead {
				return nil, errors.New("conformance: the app was killed")
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &trackedConn{Conn: c, a: a, closed: make(chan struct{})}
			a.mu.Lock()
			if a.dead {
				a.mu.Unlock()
				c.Close()
				return nil, errors.New("conformance: the app was killed")
			}
			a.conns[tc] = struct{}{}
			a.mu.Unlock()
			return tc, nil
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
	}
	a.cl = &http.Client{Transport: a.tr}
	return a
}

type trackedConn struct {
	net.Conn
	a      *App
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.a.mu.Lock()
		delete(c.a.conns, c)
		c.a.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}

// Read reads nothing once the app is frozen (Freeze): it blocks until the
// connection is closed, as a read from a host that vanished does.
func (c *trackedConn) Read(p []byte) (int, error) {
	if !c.a.isFrozen() {
		n, err := c.Conn.Read(p)
		if !c.a.isFrozen() {
			return n, err
		}
	}
	<-c.closed
	return 0, net.ErrClosed
}

func (a *App) isFrozen() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.frozen
}

// Member is the member's name the session was opened with.
func (a *App) Member() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.member
}

// Replicas is the replicas per slot the opened event named.
func (a *App) Replicas() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.replicas
}

// Session is the open session's id.
func (a *App) Session() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session
}

// StatusError is an HTTP error of rinkd's API.
type StatusError struct {
	Status  int
	Code    int
	Message string
	kind    error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d (gRPC code %d): %s", e.Status, e.Code, e.Message)
}

func (e *StatusError) Unwrap() error { return e.kind }

// statusError maps an HTTP status to the suite's errors: 400 ErrInvalid,
// 404 ErrGone, 409 ErrConflict, nothing else.
func statusError(status int, body []byte) error {
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &st)
	var env struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil { // a stream's error chunk
		st.Code, st.Message = env.Error.Code, env.Error.Message
	}
	e := &StatusError{Status: status, Code: st.Code, Message: st.Message}
	if e.Message == "" {
		e.Message = string(bytes.TrimSpace(body))
	}
	switch status {
	case http.StatusBadRequest:
		e.kind = ErrInvalid
	case http.StatusNotFound:
		e.kind = ErrGone
	case http.StatusConflict:
		e.kind = ErrConflict
	}
	return e
}

func (a *App) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.cl.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, statusError(resp.StatusCode, b)
	}
	return resp, nil
}

// call makes a unary call and decodes its answer into out (if not nil).
func (a *App) call(method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	resp, err := a.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// streamLine is one line of a server stream.
type streamLine struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// lines reads the lines of body into a channel, closed at the end.
func (a *App) lines(body io.ReadCloser) <-chan streamLine {
	ch := make(chan streamLine)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(ch)
		defer body.Close()
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var ln streamLine
			if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
				ln.Error = &struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}{Message: fmt.Sprintf("undecodable line %q: %v", sc.Bytes(), err)}
			}
			select {
			case ch <- ln:
			case <-a.ctx.Done():
				return
			}
		}
	}()
	return ch
}

type rankJSON struct {
	Member  string `json:"member"`
	Index   int    `json:"index"`
	Size    int    `json:"size"`
	Waiting bool   `json:"waiting"`
	Version int64  `json:"version,string"`
	Leader  string `json:"leader"`
	Settled bool   `json:"settled"`
}

func (r rankJSON) rank() Rank {
	return Rank{Index: r.Index, Size: r.Size, Waiting: r.Waiting, Settled: r.Settled, Leader: r.Leader}
}

// Open opens the session: it returns once rinkd says it is open (its
// member has joined), or the error that refused it.
func (a *App) Open(ctx context.Context) error {
	sctx, scancel := context.WithCancel(a.ctx)
	stop := context.AfterFunc(ctx, scancel) // ctx bounds the opening only
	resp, err := a.do(sctx, http.MethodPost, "/v1/session", struct{}{})
	if err != nil {
		stop()
		scancel()
		return err
	}
	lines := a.lines(resp.Body)
	var first streamLine
	var ok bool
	select {
	case first, ok = <-lines:
	case <-ctx.Done():
	}
	if !stop() || !ok || first.Error != nil {
		scancel()
		for range lines {
		}
		if first.Error != nil {
			return fmt.Errorf("session: %s", first.Error.Message)
		}
		return fmt.Errorf("session: no opened event: %w", context.Cause(ctx))
	}
	var ev struct {
		Opened *struct {
			Session  string `json:"session"`
			Member   string `json:"member"`
			Replicas int    `json:"replicas"`
		} `json:"opened"`
	}
	if err := json.Unmarshal(first.Result, &ev); err != nil || ev.Opened == nil {
		scancel()
		for range lines {
		}
		return fmt.Errorf("session: first event %s is not opened", first.Result)
	}
	a.mu.Lock()
	a.session, a.member, a.replicas = ev.Opened.Session, ev.Opened.Member, ev.Opened.Replicas
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer scancel()
		reason := "session stream ended"
		for ln := range lines {
			if ln.Error != nil {
				reason = "session stream error: " + ln.Error.Message
				continue
			}
			var ev struct {
				Rank  *rankJSON `json:"rank"`
				Ended *struct {
					Reason string `json:"reason"`
				} `json:"ended"`
			}
			if json.Unmarshal(ln.Result, &ev) != nil {
				continue
			}
			if ev.Rank != nil {
				a.mu.Lock()
				a.rank = ev.Rank.rank()
				a.mu.Unlock()
			}
			if ev.Ended != nil {
				reason = "session ended: " + ev.Ended.Reason
			}
		}
		// The end of the session is the end of every holding.
		a.stopAll(reason)
		a.mu.Lock()
		a.endReason = reason
		a.mu.Unlock()
		close(a.ended)
	}()
	return nil
}

// Ended reports whether the session stream has ended, and why.
func (a *App) Ended() (bool, string) {
	select {
	case <-a.ended:
		a.mu.Lock()
		defer a.mu.Unlock()
		return true, a.endReason
	default:
		return false, ""
	}
}

// EndedC is closed when the session stream has ended.
func (a *App) EndedC() <-chan struct{} { return a.ended }

// stopAll stops every holding and lets none start.
func (a *App) stopAll(why string) {
	a.mu.Lock()
	a.over = true
	var hs []*holding
	for _, h := range a.holding {
		hs = append(hs, h)
	}
	a.mu.Unlock()
	for _, h := range hs {
		a.stop(h, why)
	}
}

// start records a grant the app acts on, unless the session is over.
func (a *App) start(role string, token int64) *holding {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.over {
		return nil
	}
	h := &holding{role: role, token: token}
	a.holding[role] = h
	a.hist.Acquire(role, a.member, token)
	return h
}

// stop records that the app stopped acting on h (once).
func (a *App) stop(h *holding, why string) {
	if h == nil {
		return
	}
	h.once.Do(func() {
		a.mu.Lock()
		if a.holding[h.role] == h {
			delete(a.holding, h.role)
		}
		a.mu.Unlock()
		a.hist.Release(h.role, a.Member(), h.token, why)
	})
}

// Holding lists the roles the app acts on.
func (a *App) Holding() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for r := range a.holding {
		out = append(out, r)
	}
	return out
}

// Secondaries lists the roles rinkd says this member keeps a warm copy of.
func (a *App) Secondaries() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for r := range a.secondary {
		out = append(out, r)
	}
	return out
}

// acceptWait is how long Await waits for rinkd to refuse an await stream:
// rinkd answers a refusal at once, and an accepted stream only with its
// first event.
const acceptWait = 300 * time.Millisecond

// Await awaits roles, each on a stream of its own. It returns the first
// refusal, or nil once no refusal came in time.
func (a *App) Await(roles ...string) error {
	var errs []error
	accepted := make([]chan error, len(roles))
	for i, role := range roles {
		accepted[i] = make(chan error, 1)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.await(role, accepted[i])
		}()
	}
	deadline := time.NewTimer(acceptWait)
	defer deadline.Stop()
	for _, ch := range accepted {
		select {
		case err := <-ch:
			errs = append(errs, err)
		case <-deadline.C:
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

type roleEventJSON struct {
	Kind             string `json:"kind"`
	Role             string `json:"role"`
	Token            int64  `json:"token,string"`
	ValidUntilUnixMs int64  `json:"valid_until_unix_ms,string"`
	ValidForMs       int64  `json:"valid_for_ms,string"`
	Reason           string `json:"reason"`
	Owner            string `json:"owner"`
}

// await runs one role's stream: the app's holdings of role.
func (a *App) await(role string, accepted chan<- error) {
	resp, err := a.do(a.ctx, http.MethodPost, "/v1/await", map[string]string{"session": a.Session(), "role": role})
	if err != nil {
		accepted <- err
		return
	}
	accepted <- nil
	lines := a.lines(resp.Body)
	var (
		cur      *holding
		lapsed   int64 // the token of a grant whose validity lapsed, which a RENEWED revives
		deadline time.Time
		timer    = time.NewTimer(time.Hour)
		ended    = a.ended
	)
	timer.Stop()
	defer timer.Stop()
	setDeadline := func(ev roleEventJSON, now time.Time) {
		d := now.Add(time.Duration(ev.ValidForMs) * time.Millisecond)
		if u := time.UnixMilli(ev.ValidUntilUnixMs); u.Before(d) {
			d = u
		}
		deadline = d
		timer.Reset(time.Until(d))
	}
	for {
		select {
		case ln, ok := <-lines:
			if !ok {
				a.stop(cur, "await stream ended")
				a.mu.Lock()
				delete(a.secondary, role)
				a.mu.Unlock()
				return
			}
			if ln.Error != nil {
				a.stop(cur, "await stream error: "+ln.Error.Message)
				cur = nil
				continue
			}
			var ev roleEventJSON
			if json.Unmarshal(ln.Result, &ev) != nil {
				continue
			}
			now := time.Now()
			switch ev.Kind {
			case "GRANTED":
				a.stop(cur, "granted anew")
				cur, lapsed = nil, 0
				setDeadline(ev, now)
				if !deadline.After(now) {
					timer.Stop()
					continue // lapsed on arrival: not acted on
				}
				cur = a.start(role, ev.Token)
			case "SECONDARY", "SECONDARY_ENDED":
				a.mu.Lock()
				if ev.Kind == "SECONDARY" {
					a.secondary[role] = true
				} else {
					delete(a.secondary, role)
				}
				a.mu.Unlock()
			case "RENEWED":
				switch {
				case cur != nil && cur.token == ev.Token:
					setDeadline(ev, now)
				case lapsed != 0 && lapsed == ev.Token:
					// The grant lapsed before this renewal came (a slow
					// lease renewal): the holding is still the member's,
					// valid again until the new deadline. Act again.
					setDeadline(ev, now)
					if deadline.After(now) {
						cur, lapsed = a.start(role, ev.Token), 0
					} else {
						timer.Stop()
					}
				}
			case "REVOKED":
				if lapsed == ev.Token {
					lapsed = 0
				}
				if cur != nil && cur.token == ev.Token {
					a.stop(cur, "revoked: "+ev.Reason)
					cur = nil
					timer.Stop()
				}
				_ = a.Release(role, ev.Token)
			}
		case <-timer.C:
			if cur != nil {
				a.stop(cur, "validity lapsed")
				cur, lapsed = nil, cur.token
			}
		case <-ended:
			ended = nil
			a.stop(cur, "session ended")
			cur, lapsed = nil, 0
			timer.Stop()
		}
	}
}

// Release tells rinkd that the app stopped acting on its holding of role
// with token.
func (a *App) Release(role string, token int64) error {
	return a.call(http.MethodPost, "/v1/release", map[string]string{"session": a.Session(), "role": role,
		"token": fmt.Sprint(token)}, nil)
}

// ReportLoad reports units of work for role.
func (a *App) ReportLoad(role string, units float64) error {
	return a.call(http.MethodPost, "/v1/load", map[string]any{"session": a.Session(), "role": role, "units": units}, nil)
}

// Rank asks rinkd for the session's rank.
func (a *App) Rank() (Rank, error) {
	var r rankJSON
	if err := a.call(http.MethodGet, "/v1/rank?session="+url.QueryEscape(a.Session()), nil, &r); err != nil {
		return Rank{}, err
	}
	return r.rank(), nil
}

// Ready asks rinkd whether the session's member is ready.
func (a *App) Ready() (bool, error) {
	var r struct {
		Ready bool `json:"ready"`
	}
	err := a.call(http.MethodGet, "/v1/ready", nil, &r)
	return r.Ready, err
}

// Owners asks rinkd for role's owners, primary first.
func (a *App) Owners(role string) ([]string, bool, error) {
	var r struct {
		Owner  string   `json:"owner"`
		Owners []string `json:"owners"`
		Found  bool     `json:"found"`
	}
	if err := a.call(http.MethodGet, "/v1/owners?role="+url.QueryEscape(role), nil, &r); err != nil {
		return nil, false, err
	}
	return r.Owners, r.Found, nil
}

// Drain asks rinkd to drain (a preStop hook) and waits for the answer.
func (a *App) Drain() error {
	return a.call(http.MethodPost, "/v1/drain", struct{}{}, nil)
}

// Kill is a SIGKILL of the app: it acts no more, and its connections close
// at once.
func (a *App) Kill() {
	a.mu.Lock()
	a.dead = true
	a.mu.Unlock()
	a.stopAll("app killed")
	a.cutConns()
}

// Freeze makes the sidecar silent to the app, as when its host vanishes
// without closing a connection: reads get nothing more (no event, no end
// of stream) and dials fail. The app has only its grants' validity to go
// by.
func (a *App) Freeze() {
	a.mu.Lock()
	a.frozen, a.dead = true, true
	a.mu.Unlock()
}

// Cut closes the app's connections (its sidecar died) and dials no more:
// the app sees its streams end.
func (a *App) Cut() {
	a.mu.Lock()
	a.dead = true
	a.mu.Unlock()
	a.cutConns()
}

func (a *App) cutConns() {
	a.mu.Lock()
	var cs []net.Conn
	for c := range a.conns {
		cs = append(cs, c)
	}
	a.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Close stops the app and waits for its goroutines.
func (a *App) Close() {
	a.cancel()
	a.Cut()
	a.wg.Wait()
	a.tr.CloseIdleConnections()
}
