package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/simhook"
)

// Production's API against the settled rink. After each step of the
// script (see playScript), both worlds settled on the same shape; then
// checkAPI asks production's members what a service asks — Get, Token,
// AwaitRole, AwaitRoleContext, Run, Rank, Ready, a role set's Held, Add
// and Remove, and the events WithEvents recorded — and requires answers
// that agree with the state settled on: the owners both worlds agree on.
// checkStopped asks a member that left or crashed, and checkRefusals
// requires production and the simulator to refuse the same options and
// names with the same errors.

// runCall is one call of a function Run runs (see prodWorld.work).
type runCall struct {
	member string
	ctx    context.Context
	token  int64
}

// holding is a role's holder and token, as a check saw it.
type holding struct {
	member string
	token  int64
}

// fault records what a member's goroutine saw go wrong, for the next
// check to report (p.mu held).
func (p *prodWorld) fault(format string, args ...any) {
	p.faults = append(p.faults, fmt.Sprintf(format, args...))
}

// reportFaults fails t with the faults recorded since the last call.
func (p *prodWorld) reportFaults(t *testing.T, what string) {
	t.Helper()
	p.mu.Lock()
	faults := p.faults
	p.faults = nil
	p.mu.Unlock()
	for _, f := range faults {
		t.Errorf("by %s: %s", what, f)
	}
}

func tokenOf(ctx context.Context) int64 {
	tok, _ := rink.Token(ctx)
	return tok
}

// work is the function m's Run runs on role: it requires that nobody
// else runs it with a live context (with a drain timeout: at all), that
// its token is above theirs, and that Get agrees it is held here; then it
// works until its context ends (and drainWork more, with a drain timeout).
func (p *prodWorld) work(m *prodMember, role string, ctx context.Context) error {
	tok, ok := rink.Token(ctx)
	c := &runCall{member: m.name, ctx: ctx, token: tok}
	p.mu.Lock()
	if !ok || tok <= 0 {
		p.fault("%s: Run's function for role %s has token %d (%v)", m.name, role, tok, ok)
	}
	for _, o := range p.running[role] {
		if o.ctx.Err() == nil || p.cfg.Drain > 0 {
			p.fault("role %s: Run's function starts on %s (token %d) while %s's (token %d, context ended: %v) still runs",
				role, m.name, tok, o.member, o.token, o.ctx.Err() != nil)
		}
		if o.token >= tok {
			p.fault("role %s: Run's function on %s has token %d, not above %s's %d", role, m.name, tok, o.member, o.token)
		}
	}
	p.running[role] = append(p.running[role], c)
	p.mu.Unlock()
	if g, ok := m.r.Get(role); (!ok || tokenOf(g) != tok) && ctx.Err() == nil {
		p.mu.Lock()
		p.fault("%s: Run's function runs on role %s with token %d, where Get says %v (token %d)", m.name, role, tok, ok, tokenOf(g))
		p.mu.Unlock()
	}
	<-ctx.Done()
	if ctx.Err() == nil {
		p.mu.Lock()
		p.fault("%s: Run's function for role %s: Done closed, Err nil", m.name, role)
		p.mu.Unlock()
	}
	if p.cfg.Drain > 0 {
		time.Sleep(drainWork) // (work it finishes after its context ended: the heir waits for it)
	}
	p.mu.Lock()
	p.running[role] = slices.DeleteFunc(p.running[role], func(o *runCall) bool { return o == c })
	p.mu.Unlock()
	return context.Cause(ctx) // (as a function cut short says why: Run logs it)
}

// checkAPI checks production's API after a step, what, once live have
// settled on st.
func (p *prodWorld) checkAPI(t *testing.T, what string, live []string, st *settledState) {
	t.Helper()
	p.reportFaults(t, what)
	// What follows the settled state by a moment: Run's functions start
	// on their own goroutines, events are read as they come.
	var lag []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lag = p.lagging(live, st); len(lag) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range lag {
		t.Errorf("after %s: %s", what, l)
	}
	errorf := func(format string, args ...any) { t.Errorf("after %s: "+format, append([]any{what}, args...)...) }

	var awaits sync.WaitGroup
	defer awaits.Wait()
	var version int64
	for k, name := range live {
		m := p.members[name]
		r := m.r
		// The rank, as every member sees it.
		rk := r.Rank()
		if rk.Member != name || rk.Waiting || rk.Version <= 0 || rk.Leader != st.leader || !rk.Settled || k > 0 && rk.Version != version {
			errorf("%s: Rank %+v (want member %s, not waiting, version %d, leader %s, settled)", name, rk, name, version, st.leader)
		}
		version = rk.Version
		if rk.Changed() == nil {
			errorf("%s: Rank's Changed is nil", name)
		}
		if m.rank.Changed() != nil && m.rank.Version < rk.Version {
			select {
			case <-m.rank.Changed():
			default:
				errorf("%s: the Rank of map v%d has not said Changed, and Rank is of v%d", name, m.rank.Version, rk.Version)
			}
		}
		m.rank = rk
		if r.Name() != p.rink || r.Member() != name || r.Err() != nil {
			errorf("%s: Name %q, Member %q, Err %v", name, r.Name(), r.Member(), r.Err())
		}
		// Ready, and its probe.
		if code, body := probe(r); !r.Ready() || code != http.StatusOK || body != "ready\n" {
			errorf("%s: Ready %v, ReadyHandler %d %q", name, r.Ready(), code, body)
		}
		// Get, Token and Owner, role by role.
		var held, elsewhere []string
		for _, role := range p.roles {
			g, ok := r.Get(role)
			if ok != (st.owners[role] == name) {
				errorf("%s: Get(%s) %v, and its owner is %s", name, role, ok, st.owners[role])
				continue
			}
			if o, _ := r.Owner(role); o != st.owners[role] {
				errorf("%s: Owner(%s) %s, settled on %s", name, role, o, st.owners[role])
			}
			if !ok {
				elsewhere = append(elsewhere, role)
				continue
			}
			held = append(held, role)
			tok, tokOK := rink.Token(g)
			m.mu.Lock()
			assigned := m.ctx[role]
			m.mu.Unlock()
			if !tokOK || tok <= 0 || g.Err() != nil || tokenOf(assigned) != tok {
				errorf("%s: Get(%s): token %d (%v), Err %v; Assigned's token %d", name, role, tok, tokOK, g.Err(), tokenOf(assigned))
			}
			was := p.tokens[role]
			if tok < was.token || tok == was.token && was.member != name {
				errorf("role %s: held by %s with token %d, after %s with token %d", role, name, tok, was.member, was.token)
			}
			p.tokens[role] = holding{name, tok}
		}
		if got := m.set.Held(); !slices.Equal(got, slices.Sorted(slices.Values(held))) {
			errorf("%s: RoleSet.Held %v, holds %v", name, got, held)
		}
		// AwaitRole and AwaitRoleContext: at once on a role held, until
		// its context ends on one held elsewhere.
		if len(held) > 0 {
			role := held[0]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ac, err := r.AwaitRoleContext(ctx, role)
			cancel()
			g, _ := r.Get(role)
			if err != nil || ac.Err() != nil || tokenOf(ac) != tokenOf(g) {
				errorf("%s: AwaitRoleContext(%s) on a role held: %v (token %d, Get's %d)", name, role, err, tokenOf(ac), tokenOf(g))
			} else if ac := r.AwaitRole(role); ac.Err() != nil || tokenOf(ac) != tokenOf(g) {
				errorf("%s: AwaitRole(%s) on a role held: %v (token %d, Get's %d)", name, role, ac.Err(), tokenOf(ac), tokenOf(g))
			}
		}
		if len(elsewhere) > 0 {
			role := elsewhere[0]
			awaits.Add(1)
			go func() {
				defer awaits.Done()
				const wait = 50 * time.Millisecond
				began := time.Now() // (before the deadline is set)
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				ac, err := r.AwaitRoleContext(ctx, role)
				if took := time.Since(began); err != context.DeadlineExceeded || ac != nil || took < wait {
					errorf("%s: AwaitRoleContext(%s), a role held by %s, returned %v after %v (want its context's end after %v)", name, role, st.owners[role], err, took, wait)
				}
			}()
		}
		p.checkMisuse(errorf, m)
		m.ready = true
	}
	m := p.members[live[0]]
	held := m.set.Held()
	if len(held) == 0 {
		return
	}
	role := held[0]
	g, _ := m.r.Get(role)
	// Run with a context of its own on a role held: its function runs at
	// once with the holding's token, until that context ends, while the
	// role stays held; Run returns the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan int64, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- m.r.Run(ctx, role, func(fctx context.Context) error {
			started <- tokenOf(fctx)
			<-fctx.Done()
			if !errors.Is(context.Cause(fctx), context.Canceled) {
				errorf("%s: Run(%s)'s function ended by %v, not by its Run's context", m.name, role, context.Cause(fctx))
			}
			return fctx.Err()
		})
	}()
	select {
	case tok := <-started:
		if tok != tokenOf(g) {
			errorf("%s: Run(%s)'s function runs with token %d, Get's is %d", m.name, role, tok, tokenOf(g))
		}
	case err := <-ran:
		errorf("%s: Run(%s) on a role held returned %v before running its function", m.name, role, err)
	case <-time.After(5 * time.Second):
		errorf("%s: Run(%s) on a role held has not run its function in 5 s", m.name, role)
	}
	cancel()
	select {
	case err := <-ran:
		if err != context.Canceled {
			errorf("%s: Run(%s) returned %v once its context ended", m.name, role, err)
		}
	case <-time.After(5 * time.Second):
		errorf("%s: Run(%s) did not return in 5 s once its context ended", m.name, role)
		<-ran
	}
	if g2, ok := m.r.Get(role); !ok || tokenOf(g2) != tokenOf(g) {
		errorf("%s: Get(%s) after a Run's context ended: %v, token %d (was %d)", m.name, role, ok, tokenOf(g2), tokenOf(g))
	}
	// A role set's Remove revokes a role held, which stays held, and Add
	// assigns it again.
	m.set.Remove(role)
	if !p.eventually(func() bool { return !slices.Contains(m.live(ctxs), role) }) {
		errorf("%s: RoleSet.Remove(%s): not revoked", m.name, role)
	}
	if slices.Contains(m.set.Held(), role) {
		errorf("%s: RoleSet.Held has %s after Remove", m.name, role)
	}
	if g2, ok := m.r.Get(role); !ok || tokenOf(g2) != tokenOf(g) || g.Err() != nil {
		errorf("%s: Get(%s) after the set's Remove: %v, token %d (was %d)", m.name, role, ok, tokenOf(g2), tokenOf(g))
	}
	if err := m.set.Add(role); err != nil {
		errorf("%s: RoleSet.Add(%s): %v", m.name, role, err)
	}
	if !p.eventually(func() bool { return slices.Contains(m.live(ctxs), role) }) {
		errorf("%s: RoleSet.Add(%s) of a role held: not assigned", m.name, role)
	}
	m.mu.Lock()
	assigned := m.ctx[role]
	m.mu.Unlock()
	if tokenOf(assigned) != tokenOf(g) || !slices.Contains(m.set.Held(), role) {
		errorf("%s: assigned %s again with token %d (Get's %d), Held %v", m.name, role, tokenOf(assigned), tokenOf(g), m.set.Held())
	}
}

func ctxs(m *prodMember) map[string]context.Context { return m.ctx }
func secs(m *prodMember) map[string]context.Context { return m.sec }

// eventually polls cond for at most 5 s.
func (p *prodWorld) eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// probe asks r's ReadyHandler, as a kubelet does.
func probe(r *rink.Rink) (int, string) {
	rec := httptest.NewRecorder()
	r.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// checkMisuse requires m's refusals of an empty role and a nil function.
func (p *prodWorld) checkMisuse(errorf func(string, ...any), m *prodMember) {
	r := m.r
	var none context.Context
	if tok, ok := rink.Token(none); ok || tok != 0 {
		errorf("Token of no context: %d, %v", tok, ok)
	}
	if tok, ok := rink.Token(context.Background()); ok || tok != 0 {
		errorf("Token of a context not a role's: %d, %v", tok, ok)
	}
	if _, ok := r.Get(""); ok {
		errorf("%s: Get of the empty role ok", m.name)
	}
	if o, ok := r.Owner(""); ok {
		errorf("%s: Owner of the empty role %q", m.name, o)
	}
	if o, ok := r.Owners(""); ok {
		errorf("%s: Owners of the empty role %v", m.name, o)
	}
	if _, err := r.AwaitRoleContext(context.Background(), ""); !errors.Is(err, rink.ErrInvalidRole) {
		errorf("%s: AwaitRoleContext of the empty role: %v", m.name, err)
	}
	if ctx := r.AwaitRole(""); ctx.Err() == nil || !errors.Is(context.Cause(ctx), rink.ErrInvalidRole) {
		errorf("%s: AwaitRole of the empty role: %v", m.name, context.Cause(ctx))
	}
	nop := func(context.Context) error { return nil }
	if err := r.Run(context.Background(), "", nop); !errors.Is(err, rink.ErrInvalidRole) {
		errorf("%s: Run of the empty role: %v", m.name, err)
	}
	if err := r.Run(context.Background(), p.roles[0], nil); !errors.Is(err, rink.ErrNilFunc) {
		errorf("%s: Run of a nil function: %v", m.name, err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ended, p.roles[0], nop); err != context.Canceled {
		errorf("%s: Run with a context ended: %v", m.name, err)
	}
	if s, err := r.Watch(rink.Handler{}, p.roles[0]); !errors.Is(err, rink.ErrNilFunc) || s != nil {
		errorf("%s: Watch without Assigned: %v", m.name, err)
	}
	if s, err := r.Watch(rink.Handler{Assigned: func(context.Context, string) {}}, ""); !errors.Is(err, rink.ErrInvalidRole) || s != nil {
		errorf("%s: Watch of the empty role: %v", m.name, err)
	}
	if err := m.set.Add(""); !errors.Is(err, rink.ErrInvalidRole) {
		errorf("%s: RoleSet.Add of the empty role: %v", m.name, err)
	}
}

// lagging returns what does not agree yet with st on the members live:
// the roles Run's functions run on, and what the events say is held.
func (p *prodWorld) lagging(live []string, st *settledState) []string {
	var lag []string
	for _, name := range live {
		m := p.members[name]
		var owned, secOf []int
		for s, role := range p.roles {
			if st.owners[role] == name {
				owned = append(owned, s)
			}
			if slices.Contains(st.secs[role], name) {
				secOf = append(secOf, s)
			}
		}
		var running []int
		p.mu.Lock()
		for s, role := range p.roles {
			for _, c := range p.running[role] {
				if c.member == name && c.ctx.Err() == nil {
					running = append(running, s)
				}
			}
		}
		p.mu.Unlock()
		if !slices.Equal(running, owned) {
			lag = append(lag, fmt.Sprintf("%s: Run's functions run on slots %v, it owns %v", name, running, owned))
		}
		ev := m.events()
		probs, open, openSec := p.eventProblems(name, ev)
		lag = append(lag, probs...)
		if got := slices.Sorted(maps.Keys(open)); !slices.Equal(got, owned) {
			lag = append(lag, fmt.Sprintf("%s: its events leave slots %v acquired, it owns %v", name, got, owned))
		}
		for s, tok := range open {
			if g, ok := m.r.Get(p.roles[s]); ok && tokenOf(g) != tok {
				lag = append(lag, fmt.Sprintf("%s: slot %d acquired with token %d, and Get(%s)'s is %d", name, s, tok, p.roles[s], tokenOf(g)))
			}
		}
		if got := slices.Sorted(maps.Keys(openSec)); !slices.Equal(got, secOf) {
			lag = append(lag, fmt.Sprintf("%s: its events leave slots %v acquired as a secondary, it is a secondary of %v", name, got, secOf))
		}
		// The last EventRankChanged is Rank's, and an EventSettled
		// followed the last that was not settled.
		rk := m.r.Rank()
		var last *rink.Rank
		settledSince := false
		for _, e := range ev {
			switch e.Kind {
			case rink.EventRankChanged:
				last = &e.Rank
				if !e.Rank.Settled {
					settledSince = false
				}
			case rink.EventSettled:
				settledSince = true
				if e.Version != e.Rank.Version || !e.Rank.Settled {
					lag = append(lag, fmt.Sprintf("%s: EventSettled of v%d with rank %+v", name, e.Version, e.Rank))
				}
			}
		}
		if last == nil || sameRank(*last, rk) != "" {
			lag = append(lag, fmt.Sprintf("%s: Rank %+v, the last EventRankChanged says %v", name, rk, last))
		}
		if rk.Settled && !settledSince {
			lag = append(lag, fmt.Sprintf("%s: settled, with no EventSettled since it was not", name))
		}
	}
	return lag
}

// sameRank says how a and b differ but for Changed, "" if they do not.
func sameRank(a, b rink.Rank) string {
	if a.Member != b.Member || a.Index != b.Index || a.Waiting != b.Waiting || a.Size != b.Size || a.Version != b.Version || a.Leader != b.Leader || a.Settled != b.Settled {
		return fmt.Sprintf("%+v and %+v", a, b)
	}
	return ""
}

func (m *prodMember) events() []rink.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ev)
}

// eventProblems checks the events of member name: each names the rink and
// the member and prints as a line that says so, with a kind that has a
// name; the acquisitions and releases of each slot alternate, first an
// acquisition, with tokens rising, and so do those as a secondary. It
// returns what is wrong and the slots left acquired (with their tokens)
// and acquired as a secondary.
func (p *prodWorld) eventProblems(name string, ev []rink.Event) (probs []string, open map[int]int64, openSec map[int]bool) {
	open, openSec = map[int]int64{}, map[int]bool{}
	top := map[int]int64{}
	prefix := p.rink + "/" + name + ": "
	for i, e := range ev {
		k := e.Kind.String()
		if s := e.String(); e.Rink != p.rink || e.Member != name || e.Time.IsZero() || k == "" || strings.HasPrefix(k, "EventKind(") ||
			!strings.HasPrefix(s, prefix) || len(s) == len(prefix) {
			probs = append(probs, fmt.Sprintf("%s: event %d, kind %q, %+v, prints as %q", name, i, k, e, s))
		}
		switch e.Kind {
		case rink.EventAcquired:
			if _, ok := open[e.Slot]; ok || e.Token <= top[e.Slot] {
				probs = append(probs, fmt.Sprintf("%s: event %d: %v, after an acquisition of token %d (still held: %v)", name, i, e, top[e.Slot], ok))
			}
			open[e.Slot], top[e.Slot] = e.Token, e.Token
		case rink.EventReleased:
			if _, ok := open[e.Slot]; !ok {
				probs = append(probs, fmt.Sprintf("%s: event %d: %v, not acquired", name, i, e))
			}
			delete(open, e.Slot)
		case rink.EventSecondaryAcquired:
			if openSec[e.Slot] {
				probs = append(probs, fmt.Sprintf("%s: event %d: %v, acquired as a secondary already", name, i, e))
			}
			openSec[e.Slot] = true
		case rink.EventSecondaryReleased:
			if !openSec[e.Slot] {
				probs = append(probs, fmt.Sprintf("%s: event %d: %v, not acquired as a secondary", name, i, e))
			}
			delete(openSec, e.Slot)
		}
	}
	return probs, open, openSec
}

// checkStopped checks m once it left (crash false) or its client was
// closed under it (crash true), and Shutdown returned: it answers as a
// stopped rink, and let go of everything.
func (p *prodWorld) checkStopped(m *prodMember, crash bool) {
	t, r := p.t, m.r
	t.Helper()
	errorf := func(format string, args ...any) { t.Errorf("%s, stopped: "+format, append([]any{m.name}, args...)...) }
	want, how := rink.ErrShutdown, "left"
	if crash {
		want, how = rink.ErrClientClosed, "crashed"
	}
	is := func(err error) bool { return errors.Is(err, want) && (crash || !errors.Is(err, rink.ErrClientClosed)) }
	if !is(r.Err()) {
		errorf("%s: Err %v, want %v", how, r.Err(), want)
	}
	if code, body := probe(r); r.Ready() || code != http.StatusServiceUnavailable || body == "" {
		errorf("Ready %v, ReadyHandler %d %q", r.Ready(), code, body)
	}
	for _, role := range p.roles {
		if _, ok := r.Get(role); ok {
			errorf("Get(%s) ok", role)
		}
		if o, ok := r.Owner(role); ok {
			errorf("Owner(%s) %s", role, o)
		}
		if o, ok := r.Owners(role); ok {
			errorf("Owners(%s) %v", role, o)
		}
	}
	role := p.roles[0]
	if _, err := r.AwaitRoleContext(context.Background(), role); !is(err) {
		errorf("AwaitRoleContext: %v, want %v", err, want)
	}
	if ctx := r.AwaitRole(role); ctx.Err() == nil || !is(context.Cause(ctx)) {
		errorf("AwaitRole: %v, want a context ended by %v", context.Cause(ctx), want)
	}
	called := false
	if err := r.Run(context.Background(), role, func(context.Context) error { called = true; return nil }); !is(err) || called {
		errorf("Run: %v (its function called: %v), want %v", err, called, want)
	}
	if s, err := r.Watch(rink.Handler{Assigned: func(context.Context, string) {}}, role); !is(err) || s != nil {
		errorf("Watch: %v, want %v", err, want)
	}
	if err := m.set.Add(role); !errors.Is(err, rink.ErrShutdown) {
		errorf("RoleSet.Add on the set closed: %v", err)
	}
	if rk := r.Rank(); rk.Index != -1 || rk.Size != 0 || rk.Leader != "" || rk.Settled || rk.Waiting || rk.Member != m.name {
		errorf("Rank %+v", rk)
	}
	if r.Name() != p.rink || r.Member() != m.name {
		errorf("Name %q, Member %q", r.Name(), r.Member())
	}
	m.mu.Lock()
	ran := maps.Clone(m.ran)
	m.mu.Unlock()
	for _, role := range p.roles {
		if err, ok := ran[role]; !ok || !is(err) {
			errorf("Run(%s) returned %v (%v), want %v", role, err, ok, want)
		}
	}
	p.mu.Lock()
	for role, calls := range p.running {
		for _, c := range calls {
			if c.member == m.name {
				errorf("Run's function for %s still runs", role)
			}
		}
	}
	p.mu.Unlock()
	m.mu.Lock()
	assigned := slices.Sorted(maps.Keys(m.ctx))
	m.mu.Unlock()
	if len(assigned) > 0 {
		errorf("roles assigned and not revoked after its role set's Close: %v", assigned)
	}
	if got := m.live(secs); len(got) > 0 {
		errorf("secondaries live: %v", got)
	}
	probs, open, openSec := p.eventProblems(m.name, m.events())
	for _, pr := range probs {
		t.Error(pr)
	}
	if len(open) > 0 || len(openSec) > 0 {
		errorf("its events leave slots %v acquired, %v as a secondary", slices.Sorted(maps.Keys(open)), slices.Sorted(maps.Keys(openSec)))
	}
}

// checkEvents checks the events of every member of the script, once all
// stopped: across members, the acquisitions of a slot, in the order they
// happened, have rising tokens; drains happen with a drain timeout, all
// in time, announcements with a warm-up, secondaries with replicas.
func (p *prodWorld) checkEvents(t *testing.T) {
	t.Helper()
	type acq struct {
		at     time.Time
		member string
		token  int64
	}
	bySlot := map[int][]acq{}
	kinds := map[rink.EventKind]int{}
	for _, m := range p.gone {
		for _, e := range m.events() {
			kinds[e.Kind]++
			if e.Kind == rink.EventAcquired {
				bySlot[e.Slot] = append(bySlot[e.Slot], acq{e.Time, m.name, e.Token})
			}
			if e.Kind == rink.EventDrained && (e.Wait <= 0 || e.Wait > p.cfg.Drain) {
				t.Errorf("%v: waited %v, with a drain timeout of %v", e, e.Wait, p.cfg.Drain)
			}
		}
	}
	for s, as := range bySlot {
		slices.SortStableFunc(as, func(a, b acq) int { return a.at.Compare(b.at) })
		for i := 1; i < len(as); i++ {
			if as[i].token <= as[i-1].token {
				t.Errorf("slot %d: acquired by %s with token %d after %s with token %d", s, as[i].member, as[i].token, as[i-1].member, as[i-1].token)
			}
		}
	}
	for _, c := range []struct {
		kind rink.EventKind
		want bool
	}{
		{rink.EventDrained, p.cfg.Drain > 0},
		{rink.EventDrainTimedOut, false},
		{rink.EventIncoming, p.cfg.Warmup > 0},
		{rink.EventSecondaryAcquired, p.cfg.replicas() > 1},
		{rink.EventSettled, true},
	} {
		if (kinds[c.kind] > 0) != c.want {
			t.Errorf("%d events %s (want some: %v)", kinds[c.kind], c.kind, c.want)
		}
	}
	if k := rink.EventKind(99); k.String() != "EventKind(99)" || (rink.Event{Kind: k, Slot: -1}).String() != "EventKind(99)" {
		t.Errorf("a kind that is none prints as %q, its event as %q", k, rink.Event{Kind: k, Slot: -1})
	}
	var counts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		counts = append(counts, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	t.Logf("events: %s", strings.Join(counts, ", "))
	p.reportFaults(t, "the end")
}

// checkRefusals requires production's New and the simulator's members to
// refuse each invalid option and name with the same error, and the name
// checks to refuse bad names.
func checkRefusals(t *testing.T, cli *clientv3.Client) {
	// refused requires New to refuse member with opts, and the simulator
	// to refuse them with the same error, target.
	refused := func(what string, target error, member string, opts ...rink.Option) {
		t.Helper()
		r, err := rink.New(cli, "diff-refusals", append(opts, rink.WithMemberName(member))...)
		if r != nil {
			_ = r.Shutdown(context.Background())
		}
		var simOpts []any
		for _, o := range opts {
			simOpts = append(simOpts, o)
		}
		_, simErr := simhook.NewMember(simhook.Config{Rink: "sim", Member: member, Options: simOpts})
		if !errors.Is(err, target) || !errors.Is(simErr, target) || err.Error() != simErr.Error() {
			t.Errorf("%s: New says %v, the simulator's member %v; want %v, the same", what, err, simErr, target)
		}
	}
	bad := []struct {
		what string
		opt  rink.Option
	}{
		{"nil option", nil},
		{"nil events function", rink.WithEvents(nil)},
		{"nil logger", rink.WithLogger(nil)},
		{"TTL under the minimum", rink.WithSessionTTL(rink.MinSessionTTL - time.Second)},
		{"TTL not whole seconds", rink.WithSessionTTL(2500 * time.Millisecond)},
		{"negative rebalance delay", rink.WithRebalanceDelay(-time.Second)},
		{"no slots", rink.WithSlots(0)},
		{"too many slots", rink.WithSlots(rink.MaxSlots + 1)},
		{"zero capacity", rink.WithCapacity(0)},
		{"NaN capacity", rink.WithCapacity(math.NaN())},
		{"capacity over the maximum", rink.WithCapacity(2 * rink.MaxCapacity)},
		{"no replicas", rink.WithReplicas(0)},
		{"too many replicas", rink.WithReplicas(rink.MaxReplicas + 1)},
		{"empty zone", rink.WithZone("")},
		{"zone with a space", rink.WithZone("eu west")},
		{"zone too long", rink.WithZone(strings.Repeat("z", rink.MaxZoneLength+1))},
		{"load interval too short", rink.WithLoadInterval(50 * time.Millisecond)},
		{"zero load window", rink.WithLoadWindow(0)},
		{"load window under the interval", rink.WithLoadWindow(time.Second)},
		{"imbalance tolerance too small", rink.WithImbalanceTolerance(0.001)},
		{"negative imbalance tolerance", rink.WithImbalanceTolerance(-1)},
		{"infinite imbalance tolerance", rink.WithImbalanceTolerance(math.Inf(1))},
		{"NaN imbalance tolerance", rink.WithImbalanceTolerance(math.NaN())},
		{"negative drain timeout", rink.WithDrainTimeout(-time.Second)},
		{"negative warm-up", rink.WithWarmup(-time.Second)},
		{"zero join timeout", rink.WithJoinTimeout(0)},
	}
	var all []rink.Option
	for _, c := range bad {
		refused(c.what, rink.ErrInvalidOption, "m0", c.opt)
		all = append(all, c.opt)
	}
	// Every refusal at once, each said.
	_, err := rink.New(cli, "diff-refusals", all...)
	if n := strings.Count(err.Error(), rink.ErrInvalidOption.Error()); n != len(bad) {
		t.Errorf("New with %d invalid options says %d: %v", len(bad), n, err)
	}
	for _, name := range []string{"", "a b", "tab\tin", "/lead", "trail/", "x/../y//z", "members", "shop/map", "bad\xffutf8", "line\nbreak"} {
		if err := rink.ValidRinkName(name); !errors.Is(err, rink.ErrInvalidName) {
			t.Errorf("ValidRinkName(%q): %v", name, err)
		}
		if r, err := rink.New(cli, name, rink.WithMemberName("m0")); !errors.Is(err, rink.ErrInvalidName) || r != nil {
			t.Errorf("New in rink %q: %v", name, err)
		}
		if err := rink.ValidMemberName(name); !errors.Is(err, rink.ErrInvalidName) {
			t.Errorf("ValidMemberName(%q): %v", name, err)
		}
		if name != "" { // (New names a member without a name itself: see checkDefaultName)
			refused(fmt.Sprintf("member name %q", name), rink.ErrInvalidName, name)
		}
	}
	refused(`member name "a/b"`, rink.ErrInvalidName, "a/b")
	for _, name := range []string{"orders", "team/orders", "m0", "api-1.eu_west"} {
		if err := rink.ValidRinkName(name); err != nil {
			t.Errorf("ValidRinkName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"m0", "api-1.eu_west", "pod:7"} {
		if err := rink.ValidMemberName(name); err != nil {
			t.Errorf("ValidMemberName(%q): %v", name, err)
		}
	}
	if err := rink.ValidMemberName("a/b"); !errors.Is(err, rink.ErrInvalidName) {
		t.Errorf(`ValidMemberName("a/b"): %v`, err)
	}
	if _, err := rink.New(nil, "diff-refusals"); !errors.Is(err, rink.ErrNilClient) {
		t.Errorf("New without a client: %v", err)
	}
	var noCtx context.Context
	if _, err := rink.NewContext(noCtx, cli, "diff-refusals"); !errors.Is(err, rink.ErrInvalidOption) {
		t.Errorf("NewContext without a context: %v", err)
	}
	// An Observer takes a logger and a join timeout, not a member's
	// options.
	_, err = rink.NewObserver(cli, "diff-refusals", rink.WithLogger(zap.NewNop()), rink.WithSlots(16), rink.WithMemberName("m0"))
	if !errors.Is(err, rink.ErrInvalidOption) || strings.Count(err.Error(), "does not apply") != 2 ||
		!strings.Contains(err.Error(), "WithSlots does not apply") || !strings.Contains(err.Error(), "WithMemberName does not apply") {
		t.Errorf("NewObserver with a member's options: %v", err)
	}
}

// checkDefaultName joins a member without a name, which gets a valid one,
// and shuts it down with a context already ended: Shutdown says so, and
// no role outlives it.
func checkDefaultName(t *testing.T, cli *clientv3.Client) {
	r, err := rink.New(cli, "diff-default", rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0), rink.WithSlots(4))
	if err != nil {
		t.Fatal(err)
	}
	if err := rink.ValidMemberName(r.Member()); err != nil || r.Name() != "diff-default" {
		t.Errorf("Member %q (%v), Name %q", r.Member(), err, r.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	role, err := r.AwaitRoleContext(ctx, "alone")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := r.Owner("alone"); o != r.Member() || !r.Ready() {
		t.Errorf("alone in its rink, %s: Owner %q, Ready %v", r.Member(), o, r.Ready())
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := r.Shutdown(ended); err != context.Canceled {
		t.Errorf("Shutdown with a context ended: %v", err)
	}
	if role.Err() == nil {
		t.Error("a role's context outlived Shutdown")
	}
	if _, ok := r.Get("alone"); ok {
		t.Error("Get ok once Shutdown returned")
	}
	if o, ok := r.Owner("alone"); ok {
		t.Errorf("Owner %q once Shutdown returned", o)
	}
	select {
	case <-r.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the rink did not stop")
	}
	if !errors.Is(r.Err(), rink.ErrShutdown) {
		t.Errorf("Err %v", r.Err())
	}
}
