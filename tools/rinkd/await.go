package rinkd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grant is one holding of a role handed to the app through one await
// stream.
type grant struct {
	role  string
	token int64
	ctx   context.Context // the member's role context

	released chan struct{} // closed by ReleaseRole (or when the app is gone)
	relOnce  sync.Once

	mu    sync.Mutex
	until time.Time // the latest validity sent (or queued) to the app
}

func (g *grant) release() { g.relOnce.Do(func() { close(g.released) }) }

func (g *grant) validUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.until
}

// outbox queues a stream's events so that the member's callbacks never
// block on a slow (or stopped) app. Renewals of one holding coalesce: a
// queued RENEWED is replaced by the newer one.
type outbox struct {
	mu     sync.Mutex
	queue  []queued
	notify chan struct{} // has a value while the queue may hold events
}

// queued is an event and, for a grant or renewal, the validity it gives
// (on the monotonic clock): valid_for_ms is computed as it is sent, so an
// event that waited in the queue promises no more than it did.
type queued struct {
	ev    *rinkv1.RoleEvent
	until time.Time
}

func newOutbox() *outbox { return &outbox{notify: make(chan struct{}, 1)} }

func (o *outbox) put(ev *rinkv1.RoleEvent) { o.putUntil(ev, time.Time{}) }

func (o *outbox) putUntil(ev *rinkv1.RoleEvent, until time.Time) {
	o.mu.Lock()
	if n := len(o.queue); n > 0 && ev.Kind == rinkv1.RoleEvent_RENEWED {
		if q := o.queue[n-1].ev; q.Kind == rinkv1.RoleEvent_RENEWED && q.Token == ev.Token {
			o.queue[n-1] = queued{ev, until}
			o.mu.Unlock()
			return
		}
	}
	o.queue = append(o.queue, queued{ev, until})
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) take() []queued {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}

// stamp sets a grant's or renewal's valid_for_ms from now.
func (q queued) stamp() *rinkv1.RoleEvent {
	if !q.until.IsZero() {
		q.ev.ValidForMs = max(time.Until(q.until).Milliseconds(), 0)
	}
	return q.ev
}

// AwaitRole implements rinkv1.RinkServer.
func (s *Server) AwaitRole(req *rinkv1.AwaitRoleRequest, stream rinkv1.Rink_AwaitRoleServer) error {
	ss, err := s.session(req.GetSession())
	if err != nil {
		return err
	}
	role := req.GetRole()
	if role == "" {
		return status.Error(codes.InvalidArgument, "rinkd: empty role")
	}
	ctx := stream.Context()
	out := newOutbox()
	out.put(&rinkv1.RoleEvent{Kind: rinkv1.RoleEvent_WAITING, Role: role})
	a := &awaiter{s: s, ss: ss, role: role, ctx: ctx, out: out}
	set, err := ss.r.Watch(rink.Handler{Assigned: a.assigned, Revoked: a.revoked, Secondary: a.secondary}, role)
	if err != nil {
		return statusOf(err)
	}
	sendErr := make(chan error, 1)
	senderDone := make(chan struct{})
	stopSender := make(chan struct{})
	go func() {
		defer close(senderDone)
		for {
			for _, q := range out.take() {
				if err := stream.Send(q.stamp()); err != nil {
					sendErr <- err
					return
				}
			}
			select {
			case <-out.notify:
			case <-stopSender:
				for _, q := range out.take() { // what the end queued
					if stream.Send(q.stamp()) != nil {
						return
					}
				}
				return
			}
		}
	}()
	var end error
	select {
	case <-ctx.Done():
		end = status.FromContextError(ctx.Err()).Err()
	case err := <-sendErr:
		end = err
	case <-ss.ended:
		end = status.Errorf(codes.Aborted, "rinkd: session ended (%s)", ss.endReason())
	case <-s.ctx.Done():
		end = status.Error(codes.Unavailable, "rinkd: stopped")
	}
	a.closing()
	set.Close()
	a.wg.Wait()
	close(stopSender)
	<-senderDone
	return end
}

// awaiter runs the member's callbacks for one await stream.
type awaiter struct {
	s    *Server
	ss   *session
	role string
	ctx  context.Context // the stream's
	out  *outbox
	wg   sync.WaitGroup // renewal goroutines

	mu     sync.Mutex
	cur    *grant
	stopRn chan struct{} // stops cur's renewals
	closed bool          // the stream is ending: the app has stopped
	second bool          // SECONDARY was sent and SECONDARY_ENDED not yet
}

// closing marks the stream as ending: the app stopped acting on the role
// (it ended the stream, or its session ended), so a revocation need not
// wait for it.
func (a *awaiter) closing() {
	a.mu.Lock()
	a.closed = true
	g := a.cur
	a.mu.Unlock()
	if g != nil && a.ctx.Err() != nil {
		g.release()
	}
}

func (a *awaiter) assigned(ctx context.Context, role string) {
	token, _ := rink.Token(ctx)
	left, ok := rink.ValidFor(ctx)
	if !ok || left <= a.s.cfg.Slack {
		return // lost already: Revoked follows
	}
	// A promotion: Secondary's context has ended, but its goroutine may
	// not have said so yet. The app hears of it before the grant.
	a.endSecondary(role, "promoted")
	g := &grant{role: role, token: token, ctx: ctx, released: make(chan struct{})}
	now := time.Now()
	g.until = now.Add(left - a.s.cfg.Slack)
	stop := make(chan struct{})
	a.mu.Lock()
	a.cur, a.stopRn = g, stop
	a.mu.Unlock()
	a.ss.mu.Lock()
	if a.ss.grants[role] == nil {
		a.ss.grants[role] = map[*grant]bool{}
	}
	a.ss.grants[role][g] = true
	a.ss.mu.Unlock()
	a.out.putUntil(a.event(rinkv1.RoleEvent_GRANTED, g, now), g.until)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.renew(g, stop)
	}()
}

// renewEvery is how often a holding's validity is read for renewal.
func (a *awaiter) renewEvery() time.Duration { return max(a.s.cfg.TTL/10, 100*time.Millisecond) }

// renew sends RENEWED whenever the member's confirmed lease renewals have
// moved the holding's validity on by more than half a renewal period.
func (a *awaiter) renew(g *grant, stop chan struct{}) {
	every := a.renewEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		case <-g.ctx.Done():
			return
		}
		left, ok := rink.ValidFor(g.ctx)
		if !ok {
			return
		}
		now := time.Now()
		u := now.Add(left - a.s.cfg.Slack)
		if u.Sub(g.validUntil()) < every/2 {
			continue
		}
		g.mu.Lock()
		// Check and queue under the lock: revoked reads until after
		// stopping this goroutine, so a renewal is either counted or
		// never sent.
		select {
		case <-stop:
			g.mu.Unlock()
			return
		default:
		}
		if u.After(g.until) {
			g.until = u
			a.out.putUntil(a.event(rinkv1.RoleEvent_RENEWED, g, now), u)
		}
		g.mu.Unlock()
	}
}

func (a *awaiter) event(kind rinkv1.RoleEvent_Kind, g *grant, now time.Time) *rinkv1.RoleEvent {
	u := g.until
	return &rinkv1.RoleEvent{Kind: kind, Role: g.role, Token: g.token, ValidUntilUnixMs: u.UnixMilli(),
		ValidForMs: max(u.Sub(now).Milliseconds(), 0)}
}

// revoked tells the app and waits until it has let go: its release, the
// end of its streams, or the validity of the last grant it was sent. The
// member's heir starts once this returns (rinkd sets a drain timeout longer
// than any validity).
func (a *awaiter) revoked(role string) {
	a.mu.Lock()
	g, stop, closed := a.cur, a.stopRn, a.closed
	a.cur, a.stopRn = nil, nil
	a.mu.Unlock()
	if g == nil {
		return
	}
	g.mu.Lock()
	close(stop) // under g.mu: no renewal is queued after this
	until := g.until
	g.mu.Unlock()
	defer func() {
		a.ss.mu.Lock()
		delete(a.ss.grants[role], g)
		if len(a.ss.grants[role]) == 0 {
			delete(a.ss.grants, role)
		}
		a.ss.mu.Unlock()
	}()
	reason, owner := a.reason(g.ctx)
	ev := &rinkv1.RoleEvent{Kind: rinkv1.RoleEvent_REVOKED, Role: role, Token: g.token, Reason: reason, Owner: owner,
		ValidUntilUnixMs: until.UnixMilli()}
	a.out.put(ev)
	if closed && a.ctx.Err() != nil {
		return // the app ended the stream: it stopped
	}
	wait := time.NewTimer(time.Until(until) + time.Millisecond)
	defer wait.Stop()
	select {
	case <-g.released:
	case <-a.ss.appGone:
	case <-a.ctx.Done():
	case <-wait.C:
		a.s.log.Info("rinkd: the app did not release a revoked role: its grant has lapsed",
			zap.String("role", role), zap.Int64("token", g.token))
	}
}

// reason names why a holding ended, and who owns the role now if known.
func (a *awaiter) reason(ctx context.Context) (string, string) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, rink.ErrRoleMoved):
		owner, _ := a.ss.r.Owner(a.role)
		return "moved", owner
	case errors.Is(cause, rink.ErrFenced):
		return "fenced", ""
	case errors.Is(cause, rink.ErrShutdown):
		if r := a.ss.endReason(); r != "" {
			return r, ""
		}
		return "stopped", ""
	case cause == nil:
		return "released", ""
	}
	return cause.Error(), ""
}

func (a *awaiter) secondary(ctx context.Context, role string) {
	a.mu.Lock()
	a.second = true
	a.out.put(&rinkv1.RoleEvent{Kind: rinkv1.RoleEvent_SECONDARY, Role: role})
	a.mu.Unlock()
	<-ctx.Done()
	reason := "moved"
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, rink.ErrPromoted):
		reason = "promoted"
	case errors.Is(cause, rink.ErrRoleMoved):
	case errors.Is(cause, rink.ErrFenced):
		reason = "fenced"
	case errors.Is(cause, rink.ErrShutdown):
		reason = "stopped"
		if r := a.ss.endReason(); r != "" {
			reason = r
		}
	case cause != nil:
		reason = cause.Error()
	}
	a.endSecondary(role, reason)
}

// endSecondary sends SECONDARY_ENDED once per SECONDARY.
func (a *awaiter) endSecondary(role, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.second {
		a.second = false
		a.out.put(&rinkv1.RoleEvent{Kind: rinkv1.RoleEvent_SECONDARY_ENDED, Role: role, Reason: reason})
	}
}
