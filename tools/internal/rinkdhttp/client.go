// Package rinkdhttp is an app's side of rinkd, spoken as any language
// would: plain HTTP/1.1 and JSON (proto/rink/v1/rink_http.yaml), with no
// generated code. A server stream arrives as one JSON object per line,
// {"result":{...}} or, when it fails, {"error":{...}}; int64 fields are
// JSON strings; fields carry their proto names. rinkbench and rink-chaos
// use it as the apps beside their rinkd.Servers.
package rinkdhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Client talks to one rinkd's HTTP/JSON API.
type Client struct {
	base string
	tr   *http.Transport
	hc   *http.Client
}

// New returns a client of the rinkd serving HTTP at addr (host:port).
func New(addr string) *Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	return &Client{base: "http://" + addr, tr: tr, hc: &http.Client{Transport: tr}}
}

// Close closes the client's idle connections (streams end with their
// contexts, or Close).
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// StatusError is a failed call's answer: the HTTP status and the gRPC
// status rinkd's gateway put in the body.
type StatusError struct {
	HTTP    int
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rinkd: HTTP %d: code %d: %s", e.HTTP, e.Code, e.Message)
}

// ErrStream is the error of a stream that ended with an error object.
var ErrStream = errors.New("rinkd: stream error")

// call makes one unary call and decodes the result into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// do sends a request and returns the response if its status is 200.
func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		se := &StatusError{HTTP: resp.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var wrapped struct {
			Error *StatusError `json:"error"`
		}
		if json.Unmarshal(data, &wrapped) == nil && wrapped.Error != nil { // a stream's error line
			se.Code, se.Message = wrapped.Error.Code, wrapped.Error.Message
		} else if json.Unmarshal(data, se) != nil {
			se.Message = string(data)
		}
		return nil, se
	}
	return resp, nil
}

// stream reads a server stream's lines, stamping each result with the
// time its line was read, and sends them to fn until the stream ends; it
// returns ErrStream (wrapped) for an error object, nil at the end.
func stream(body io.Reader, fn func(result json.RawMessage, at time.Time) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		at := time.Now()
		var line struct {
			Result json.RawMessage `json:"result"`
			Error  *StatusError    `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("rinkd: stream line %q: %w", sc.Text(), err)
		}
		if line.Error != nil {
			return fmt.Errorf("%w: code %d: %s", ErrStream, line.Error.Code, line.Error.Message)
		}
		if !fn(line.Result, at) {
			return nil
		}
	}
	return sc.Err()
}

// RankInfo is rink.v1.RankInfo.
type RankInfo struct {
	Member  string `json:"member"`
	Index   int    `json:"index"`
	Size    int    `json:"size"`
	Waiting bool   `json:"waiting"`
	Version int64  `json:"version,string"`
	Leader  string `json:"leader"`
	Settled bool   `json:"settled"`
}

// Session is an open session: its stream is the app's liveness.
type Session struct {
	ID, Member, Rink string

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	rank   RankInfo
	reason string // the ended event's reason, or why the stream ended
	err    error
}

// Open opens a session and returns once rinkd says it is open (the
// member has joined). The session lasts until Close, ctx's end, or
// rinkd ending it (Done).
func (c *Client) Open(ctx context.Context) (*Session, error) {
	sctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(sctx, http.MethodPost, "/v1/session", struct{}{})
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Session{cancel: cancel, done: make(chan struct{})}
	opened := make(chan struct{})
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		var once sync.Once
		err := stream(resp.Body, func(res json.RawMessage, _ time.Time) bool {
			var ev struct {
				Opened *struct {
					Session, Member, Rink string
				} `json:"opened"`
				Rank  *RankInfo `json:"rank"`
				Ended *struct {
					Reason string `json:"reason"`
				} `json:"ended"`
			}
			if err := json.Unmarshal(res, &ev); err != nil {
				return false
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case ev.Opened != nil:
				s.ID, s.Member, s.Rink = ev.Opened.Session, ev.Opened.Member, ev.Opened.Rink
				once.Do(func() { close(opened) })
			case ev.Rank != nil:
				s.rank = *ev.Rank
			case ev.Ended != nil:
				s.reason = ev.Ended.Reason
			}
			return true
		})
		s.mu.Lock()
		if err == nil {
			err = io.EOF
		}
		s.err = err
		if s.reason == "" {
			s.reason = err.Error()
		}
		s.mu.Unlock()
	}()
	select {
	case <-opened:
		return s, nil
	case <-s.done:
		cancel()
		return nil, fmt.Errorf("rinkd: session stream ended before it opened: %w", s.Err())
	}
}

// Done is closed when the session's stream has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close ends the session's stream (rinkd leaves the rink at once: the app
// must have stopped acting on its roles) and waits for its reader.
func (s *Session) Close() {
	s.cancel()
	<-s.done
}

// Rank returns the newest rank the session stream told.
func (s *Session) Rank() RankInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rank
}

// Reason says why the session ended ("" while it lives).
func (s *Session) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Err is why the session's stream ended (io.EOF: rinkd ended it).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Event kinds of RoleEvent.
const (
	Granted        = "GRANTED"
	Renewed        = "RENEWED"
	Revoked        = "REVOKED"
	Secondary      = "SECONDARY"
	SecondaryEnded = "SECONDARY_ENDED"
	// Waiting opens every await stream: the await is in place.
	Waiting = "WAITING"
)

// RoleEvent is rink.v1.RoleEvent, with the time the app read it.
type RoleEvent struct {
	Kind             string `json:"kind"`
	Role             string `json:"role"`
	Token            int64  `json:"token,string"`
	ValidUntilUnixMs int64  `json:"valid_until_unix_ms,string"`
	ValidForMs       int64  `json:"valid_for_ms,string"`
	Reason           string `json:"reason"`
	Owner            string `json:"owner"`
	// Read is when the app read the event's line.
	Read time.Time `json:"-"`
}

// Deadline is when a GRANTED or RENEWED event's validity ends, as the API
// says: at valid_until, or valid_for_ms after the event was read,
// whichever comes first. (It carries a monotonic reading.)
func (e RoleEvent) Deadline() time.Time {
	d := time.Duration(e.ValidForMs) * time.Millisecond
	if u := time.UnixMilli(e.ValidUntilUnixMs).Sub(e.Read.Round(0)); u < d {
		d = u
	}
	return e.Read.Add(d)
}

// Await is one AwaitRole stream.
type Await struct {
	events chan RoleEvent
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Await opens the AwaitRole stream of role in session and returns once
// rinkd has answered with the response's headers, which come with the
// stream's first event, WAITING: the await is in place. The events, that
// one first, arrive on Events until the stream ends.
func (c *Client) Await(ctx context.Context, session, role string) (*Await, error) {
	actx, cancel := context.WithCancel(ctx)
	resp, err := c.do(actx, http.MethodPost, "/v1/await", map[string]string{"session": session, "role": role})
	if err != nil {
		cancel()
		return nil, err
	}
	a := &Await{events: make(chan RoleEvent), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer close(a.events)
		defer resp.Body.Close()
		a.err = stream(resp.Body, func(res json.RawMessage, at time.Time) bool {
			ev := RoleEvent{Read: at}
			if err := json.Unmarshal(res, &ev); err != nil {
				return false
			}
			select {
			case a.events <- ev:
				return true
			case <-actx.Done():
				return false
			}
		})
	}()
	return a, nil
}

// Events delivers the stream's events; it is closed when the stream ends.
func (a *Await) Events() <-chan RoleEvent { return a.events }

// Close ends the stream (rinkd takes it that the app has stopped acting
// on the role) and waits for its reader.
func (a *Await) Close() {
	a.cancel()
	<-a.done
}

// Err is why the stream ended, once Events is closed (nil: rinkd ended
// it cleanly).
func (a *Await) Err() error {
	<-a.done
	return a.err
}

// Release tells rinkd that the app stopped acting on the holding of role
// with token.
func (c *Client) Release(ctx context.Context, session, role string, token int64) error {
	return c.call(ctx, http.MethodPost, "/v1/release", map[string]string{"session": session, "role": role,
		"token": strconv.FormatInt(token, 10)}, nil)
}

// Drain asks rinkd to revoke every role, wait for the app's releases and
// leave (a preStop hook's call); it returns once rinkd has.
func (c *Client) Drain(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/drain", struct{}{}, nil)
}

// Rank returns the session's rank.
func (c *Client) Rank(ctx context.Context, session string) (RankInfo, error) {
	var ri RankInfo
	err := c.call(ctx, http.MethodGet, "/v1/rank?session="+url.QueryEscape(session), nil, &ri)
	return ri, err
}

// Owners is rink.v1.GetOwnersResponse.
type Owners struct {
	Role    string   `json:"role"`
	Owner   string   `json:"owner"`
	Owners  []string `json:"owners"`
	Found   bool     `json:"found"`
	Version int64    `json:"version,string"`
}

// Owners returns the owners of role from rinkd's newest map.
func (c *Client) Owners(ctx context.Context, role string) (Owners, error) {
	var o Owners
	err := c.call(ctx, http.MethodGet, "/v1/owners?role="+url.QueryEscape(role), nil, &o)
	return o, err
}
