package compat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/tools/internal/chaos"
	"github.com/rink-go/rink/tools/internal/compat"
)

const (
	rinkName = "compat"
	nRoles   = 256 // partition roles; the worker adds the role "leader"
	ttl      = 2 * time.Second
	// delay is the rebalance delay: long enough that every newcomer is
	// promoted into its leaver's index (a replacement takes well under a
	// second) rather than ranked by the delay, short enough that the
	// initial spread (ranked by the delay) does not dominate the run.
	delay = 8 * time.Second
	every = 100 * time.Millisecond
	// pause is how long a member is stopped around a ranking by the delay,
	// from pauseBefore the leader's delay runs out: short enough that the
	// member's lease stays (it renews every ttl/3 and fences ttl/8 before
	// expiry), long enough to cover the leader's proclamation.
	pause       = 700 * time.Millisecond
	pauseBefore = 150 * time.Millisecond

	baseline = "baseline"
	current  = "current"

	plain  = "plain"  // a ranked member that does not lead
	leader = "leader" // the rink's leader

	replace = "replace" // a newcomer joins and waits, then a member leaves: the newcomer is promoted
	join    = "join"    // a newcomer joins and is ranked by the delay
	leave   = "leave"   // a member leaves with nobody waiting
)

// TestMixedVersionUpgrade runs a rink of members built from the baseline
// commit (compat/baseline) through a rolling upgrade to members built from
// the working tree and a rollback to the baseline, one replacement at a
// time (the newcomer joins and waits, then the old member stops), with a
// scale-out and a scale-in in each phase (see the steps below), and checks
// the members' records: no two members acting on a role at once, tokens
// increasing, every replacement moving exactly the leaver's roles to the
// newcomer, once each, and slots taken from a stopped live member of the
// other build started only after it resumed. The leader is the oldest
// member, so during the upgrade a baseline member leads members of the
// current build, and during the rollback a current member leads baseline
// members.
//
// Set RINK_COMPAT_DIR to keep the binaries and the members' logs there,
// and RINK_COMPAT_BASELINE to a full commit hash to roll from another
// release than the baseline (the one before it, 636d84c, still shares a
// rink with this build).
func TestMixedVersionUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := compat.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	commit, err := compat.Baseline(root)
	if err != nil {
		t.Fatal(err)
	}
	if c := os.Getenv("RINK_COMPAT_BASELINE"); c != "" {
		commit = c // another release to roll from and back to, by hand (e.g. 636d84c's full hash)
	}
	tmp := t.TempDir()
	if keep := os.Getenv("RINK_COMPAT_DIR"); keep != "" {
		tmp = keep // keep the logs for a look afterwards
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(tmp, "baseline-src")
	os.RemoveAll(src)
	began := time.Now()
	if err := compat.Export(ctx, root, commit, src); err != nil {
		t.Fatalf("cannot build the baseline members: %v", err)
	}
	bins := map[string]string{baseline: filepath.Join(tmp, "worker-baseline"), current: filepath.Join(tmp, "worker-current")}
	// The worker lives in the tools module since d85b50e, and in the
	// library's own module before (636d84c).
	workerDir := filepath.Join(src, "tools")
	if _, err := os.Stat(filepath.Join(workerDir, "internal", "chaos", "worker")); err != nil {
		workerDir = src
	}
	if err := compat.Build(ctx, workerDir, "./internal/chaos/worker", bins[baseline]); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	if err := compat.Build(ctx, filepath.Join(root, "tools"), "./internal/chaos/worker", bins[current]); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the worker at baseline %.12s and from the working tree in %v", commit, time.Since(began).Round(time.Millisecond))

	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ob, err := rink.NewObserver(cli, rinkName)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()

	h := &harness{t: t, dir: tmp, bins: bins, endpoint: srv.Endpoint(), cli: cli, ob: ob, tail: newTailer(), began: chaos.Now()}
	h.roles = []string{"leader"}
	for i := 0; i < nRoles; i++ {
		h.roles = append(h.roles, fmt.Sprint("partition:", i))
	}
	defer h.killAll()
	stopLeaders := h.followLeader()
	defer stopLeaders()

	// The initial rink: b0 first, so that it leads; the others wait the
	// rebalance delay and are ranked together.
	h.start(baseline)
	h.waitFor(20*time.Second, "b0 ranked and leading", func() bool {
		s := ob.State()
		return s.Leader == "b0" && len(s.Members) == 1 && s.Members[0].Name == "b0"
	})
	for i := 1; i < 4; i++ {
		h.start(baseline)
	}
	h.settle(delay + 30*time.Second)
	h.logf("initial rink of 4 baseline members settled; leader %s", ob.State().Leader)

	// The upgrade, then the rollback, one replacement at a time. Each
	// phase also turns one member back (an upgrade paused and partly
	// undone), so that every way of leaving is taken by both builds under
	// a leader of either build: a plain member leaving (a baseline member
	// revokes its lease and the leader promotes its heir; a current member
	// writes the map without itself in one guarded transaction), and the
	// leader leaving (both hand over in one transaction). The last leaver
	// of each phase is the last member of the old build, the leader, so
	// leadership passes to the new build.
	//
	// Replacements move slots only from members that are gone. So that
	// the acknowledgement barrier is tested between live members of the
	// two builds, each phase also scales out by one member, ranked by the
	// delay (it takes slots from live members of both builds, under a
	// leader of the other build), and back in (a member leaves with no
	// heir).
	for _, r := range []struct{ op, leaver, of, newcomer string }{
		{replace, plain, baseline, current},  // a baseline leader promotes a current member
		{replace, leader, baseline, current}, // the baseline leader hands over to a baseline leader
		{join, "", "", current},              // a baseline leader ranks a current member: slots move from live members of both builds
		{leave, plain, baseline, ""},         // a baseline member leaves with no heir: its slots go to both builds
		{replace, plain, current, baseline},  // a current member departs under a baseline leader
		{replace, plain, baseline, current},
		{replace, leader, baseline, current}, // the last baseline member: a current member leads
		{replace, plain, current, baseline},  // a current leader promotes a baseline member
		{replace, leader, current, baseline}, // the current leader hands over to a current leader
		{join, "", "", baseline},             // a current leader ranks a baseline member: slots move from live members of both builds
		{leave, plain, current, ""},          // a current member departs with no heir: its slots go to both builds
		{replace, plain, baseline, current},  // a baseline member leaves under a current leader
		{replace, plain, current, baseline},
		{replace, leader, current, baseline}, // the last current member: a baseline member leads
	} {
		var st *step
		switch r.op {
		case replace:
			st = h.replace(h.pick(r.leaver, r.of), r.newcomer)
		case join:
			st = h.join(r.newcomer)
		case leave:
			st = h.leave(h.pick(r.leaver, r.of))
		}
		if r.newcomer != "" && r.of != "" && !slices.ContainsFunc(h.running, func(m *member) bool { return m.build == r.of }) {
			// The last member of the old build is gone: the new build leads.
			if b := h.buildOf(st.leaderAfter); b != r.newcomer {
				h.fail("the last %s member left; the leader is %s (%s), want a %s member", r.of, st.leaderAfter, b, r.newcomer)
			}
		}
	}
	for _, m := range h.running {
		if m.build != baseline {
			h.fail("after the rollback %s (%s) still runs", m.name, m.build)
		}
	}

	final := chaos.Now()
	h.stopAll()
	stopLeaders()
	h.verify(final)
	h.logf("leaders over time: %s", h.leaderTimeline())
	h.logf("total %v", time.Since(began).Round(time.Millisecond))
}

type member struct {
	name, build string
	cmd         *exec.Cmd
	done        chan struct{}
	log, errLog string
}

func (m *member) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// step is one replacement.
type step struct {
	op               string
	leaver, newcomer *member // nil when the step has none
	// A join stops paused from pausedAt to resumedAt (CLOCK_MONOTONIC).
	paused              *member
	pausedAt, resumedAt int64
	start               int64 // CLOCK_MONOTONIC, as the records
	leaderAtJoin        string
	leaderAfter         string
	waited              time.Duration // from the newcomer's start to the leaver's SIGTERM
	took                time.Duration // from the newcomer's start until the rink settled
}

type leaderChange struct {
	at   int64
	name string
}

type harness struct {
	t        *testing.T
	dir      string
	bins     map[string]string
	endpoint string
	cli      *clientv3.Client
	ob       *rink.Observer
	tail     *tailer
	began    int64
	roles    []string

	members []*member // every member started
	started map[string]int
	running []*member
	steps   []*step

	mu      sync.Mutex
	leaders []leaderChange
}

func (h *harness) logf(format string, args ...any) {
	h.t.Helper()
	h.t.Logf("%7.3fs  "+format, append([]any{float64(chaos.Now()-h.began) / 1e9}, args...)...)
}

func (h *harness) buildOf(name string) string {
	for _, m := range h.members {
		if m.name == name {
			return m.build
		}
	}
	return "?"
}

// start starts a member of build, named b<n> (baseline) or c<n>.
func (h *harness) start(build string) *member {
	h.t.Helper()
	if h.started == nil {
		h.started = map[string]int{}
	}
	name := fmt.Sprint(build[:1], h.started[build])
	h.started[build]++
	m := &member{name: name, build: build, done: make(chan struct{}),
		log: filepath.Join(h.dir, name+".log"), errLog: filepath.Join(h.dir, name+".stderr")}
	os.Remove(m.log)
	errf, err := os.Create(m.errLog)
	if err != nil {
		h.t.Fatal(err)
	}
	m.cmd = exec.Command(h.bins[build], "-endpoints", h.endpoint, "-rink", rinkName, "-name", name,
		"-roles", fmt.Sprint(nRoles), "-ttl", ttl.String(), "-delay", delay.String(), "-every", every.String(), "-log", m.log)
	m.cmd.Stdout, m.cmd.Stderr = errf, errf
	if err := m.cmd.Start(); err != nil {
		errf.Close()
		h.t.Fatal(err)
	}
	go func() { _ = m.cmd.Wait(); errf.Close(); close(m.done) }()
	h.members = append(h.members, m)
	h.running = append(h.running, m)
	h.tail.add(m.log)
	h.logf("started %s (%s)", name, build)
	return m
}

// stop shuts a member down gracefully and checks that it exited cleanly.
func (h *harness) stop(m *member) {
	h.t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(ttl + 10*time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
		h.fail("%s did not exit within %v of SIGTERM", m.name, ttl+10*time.Second)
	}
	h.running = slices.DeleteFunc(h.running, func(x *member) bool { return x == m })
	if code := m.cmd.ProcessState.ExitCode(); code != 0 {
		h.fail("%s exited with code %d", m.name, code)
	}
}

func (h *harness) stopAll() {
	h.t.Helper()
	for _, m := range h.running {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
	}
	for len(h.running) > 0 {
		h.stop(h.running[0])
	}
}

// killAll ends whatever still runs (after a failure).
func (h *harness) killAll() {
	for _, m := range h.members {
		if !m.exited() {
			_ = m.cmd.Process.Kill()
			select {
			case <-m.done:
			case <-time.After(10 * time.Second):
			}
		}
	}
}

// followLeader records every change of the rink's leader, as the observer
// sees it (the member of the lowest election key), until stopped.
func (h *harness) followLeader() func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s := h.ob.State()
			h.mu.Lock()
			if n := len(h.leaders); n == 0 || h.leaders[n-1].name != s.Leader {
				h.leaders = append(h.leaders, leaderChange{at: chaos.Now(), name: s.Leader})
			}
			h.mu.Unlock()
			select {
			case <-s.Changed():
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}

func (h *harness) leaderTimeline() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, l := range h.leaders {
		name := l.name
		if name == "" {
			name = "(none)"
		} else {
			name += " (" + h.buildOf(l.name) + ")"
		}
		parts = append(parts, fmt.Sprintf("%.3fs %s", float64(l.at-h.began)/1e9, name))
	}
	return strings.Join(parts, ", ")
}

func (h *harness) waitFor(d time.Duration, what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			h.fail("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled reports whether the rink has settled on the running members:
// they, and only they, are ranked, live and current, nobody waits, and
// every role's newest acquisition in the records is by the member the map
// gives it to.
func (h *harness) settled() (bool, string) {
	s := h.ob.State()
	if s.MapError != "" {
		return false, "map error: " + s.MapError
	}
	if len(s.Waiting) > 0 || len(s.Joining) > 0 {
		return false, fmt.Sprintf("waiting %v, joining %v", s.Waiting, s.Joining)
	}
	running := map[string]bool{}
	for _, m := range h.running {
		running[m.name] = true
	}
	if len(s.Members) != len(running) {
		return false, fmt.Sprintf("%d ranked, %d running", len(s.Members), len(running))
	}
	for _, m := range s.Members {
		if !running[m.Name] || !m.Live || m.Ack != s.Version {
			return false, fmt.Sprintf("member %+v at map version %d", m, s.Version)
		}
	}
	holders := h.tail.poll()
	for _, role := range h.roles {
		owner, _ := s.Owner(role)
		if holders[role].member != owner {
			return false, fmt.Sprintf("role %s: owner %s, newest holder %q", role, owner, holders[role].member)
		}
	}
	return true, ""
}

func (h *harness) settle(d time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := h.settled()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.fail("the rink did not settle within %v: %s", d, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pick returns the running member of build that is the leader (kind
// leader), or the oldest one that is not (kind plain).
func (h *harness) pick(kind, build string) *member {
	h.t.Helper()
	lead := h.ob.State().Leader
	for _, m := range h.running {
		if m.build == build && (m.name == lead) == (kind == leader) {
			return m
		}
	}
	h.fail("no running %s member of the %s build (leader %s)", kind, build, lead)
	return nil
}

// replace starts a newcomer, waits until the leader lists it as waiting,
// stops the leaver, and waits until the rink has settled.
func (h *harness) replace(leaver *member, build string) *step {
	h.t.Helper()
	st := &step{op: replace, leaver: leaver, start: chaos.Now()}
	h.steps = append(h.steps, st)
	t0 := time.Now()
	st.newcomer = h.start(build)
	h.waitWaiting(st)
	st.waited = time.Since(t0)
	if st.waited > delay/2 {
		h.fail("%s waited %v before %s could be stopped: with a rebalance delay of %v it might be ranked by the delay instead of promoted (machine too loaded?)",
			st.newcomer.name, st.waited, leaver.name, delay)
	}
	h.stop(leaver)
	h.settle(30 * time.Second)
	st.took = time.Since(t0)
	st.leaderAfter = h.ob.State().Leader
	h.logf("%s (%s) replaced %s (%s): leader %s (%s) when it joined, %s (%s) after; settled %v after its start",
		st.newcomer.name, build, leaver.name, leaver.build, st.leaderAtJoin, h.buildOf(st.leaderAtJoin), st.leaderAfter, h.buildOf(st.leaderAfter), st.took.Round(time.Millisecond))
	return st
}

// join starts a newcomer and waits until the leader has ranked it (after
// the rebalance delay) and the rink has settled.
//
// Around the moment the leader ranks it, a plain member of the other build
// is stopped (SIGSTOP) for a while shorter than its lease can last: the
// newcomer takes slots from it, and must not start them before that member
// has resumed, applied the map, released them and acknowledged — an
// acknowledgement that crosses builds (and, with a baseline member, has no
// seq). verify checks that the newcomer acquired that member's roles only
// after it resumed, and its other roles before (so the ranking did fall
// within the pause).
func (h *harness) join(build string) *step {
	h.t.Helper()
	st := &step{op: join, start: chaos.Now()}
	h.steps = append(h.steps, st)
	t0 := time.Now()
	st.newcomer = h.start(build)
	h.waitWaiting(st)
	seen := time.Now()
	other := current
	if build == current {
		other = baseline
	}
	st.paused = h.pick(plain, other)
	incarnation := h.memberKeyRev(st.paused.name)
	time.Sleep(time.Until(seen.Add(delay - pauseBefore)))
	st.pausedAt = chaos.Now()
	_ = st.paused.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(pause)
	st.resumedAt = chaos.Now()
	_ = st.paused.cmd.Process.Signal(syscall.SIGCONT)
	h.settle(30 * time.Second)
	if rev := h.memberKeyRev(st.paused.name); rev != incarnation {
		h.fail("%s rejoined during its pause (member key created at revision %d, then %d): its lease ran out (machine too loaded?)",
			st.paused.name, incarnation, rev)
	}
	st.took = time.Since(t0)
	st.leaderAfter = h.ob.State().Leader
	h.logf("%s (%s) joined and was ranked by the delay, while %s (%s) was stopped: leader %s (%s); settled %v after its start",
		st.newcomer.name, build, st.paused.name, st.paused.build, st.leaderAtJoin, h.buildOf(st.leaderAtJoin), st.took.Round(time.Millisecond))
	return st
}

// leave stops a member while nobody waits, and waits until the rink has
// settled.
func (h *harness) leave(leaver *member) *step {
	h.t.Helper()
	st := &step{op: leave, leaver: leaver, start: chaos.Now(), leaderAtJoin: h.ob.State().Leader}
	h.steps = append(h.steps, st)
	t0 := time.Now()
	h.stop(leaver)
	h.settle(30 * time.Second)
	st.took = time.Since(t0)
	st.leaderAfter = h.ob.State().Leader
	h.logf("%s (%s) left with no heir: leader %s (%s); settled %v after its SIGTERM",
		leaver.name, leaver.build, st.leaderAtJoin, h.buildOf(st.leaderAtJoin), st.took.Round(time.Millisecond))
	return st
}

// waitWaiting waits until the leader lists the step's newcomer as waiting.
func (h *harness) waitWaiting(st *step) {
	h.t.Helper()
	name := st.newcomer.name
	h.waitFor(20*time.Second, name+" listed as waiting", func() bool {
		s := h.ob.State()
		for _, w := range s.Waiting {
			if w.Name == name {
				st.leaderAtJoin = s.Leader
				return true
			}
		}
		return false
	})
}

// verify checks the records of every member: the history checker's
// promise, and that each replacement moved exactly the leaver's roles to
// the newcomer, once each. final is when the last members were stopped.
func (h *harness) verify(final int64) {
	h.t.Helper()
	var all []chaos.Record
	for _, m := range h.members {
		f, err := os.Open(m.log)
		if err != nil {
			h.t.Fatal(err)
		}
		recs, err := chaos.Parse(f)
		f.Close()
		if err != nil {
			h.t.Fatal(err)
		}
		all = append(all, recs...)
	}
	rep := chaos.Check(slices.Clone(all))
	h.logf("history check: %d acquisitions (%d recorded late), %d actions, %d violations", rep.Acquisitions, rep.Late, rep.Actions, len(rep.Violations))
	for i, v := range rep.Violations {
		if i == 20 {
			h.t.Errorf("... and %d more violations", len(rep.Violations)-20)
			break
		}
		h.t.Errorf("violation: %s", v)
	}

	sort.SliceStable(all, func(i, j int) bool { return all[i].Mono < all[j].Mono })
	type holding struct {
		member string
		token  int64
	}
	newest := map[string]holding{}
	i := 0
	// advance folds the records before until into newest and returns the
	// acquisitions among them, by role (late records are not moves).
	advance := func(until int64) (moves map[string][]string, late int) {
		moves = map[string][]string{}
		for ; i < len(all) && all[i].Mono < until; i++ {
			r := all[i]
			if r.Kind != chaos.Acquire {
				continue
			}
			if r.Token <= newest[r.Role].token {
				late++
				continue
			}
			newest[r.Role] = holding{r.Member, r.Token}
			moves[r.Role] = append(moves[r.Role], r.Member)
		}
		return moves, late
	}
	ends := make([]int64, len(h.steps))
	for k := range h.steps {
		ends[k] = final
		if k+1 < len(h.steps) {
			ends[k] = h.steps[k+1].start
		}
	}
	if len(h.steps) == 0 {
		return
	}
	advance(h.steps[0].start) // the initial spread
	for _, role := range h.roles {
		if newest[role].member == "" {
			h.t.Errorf("role %s was never held before the first replacement", role)
		}
	}
	for k, st := range h.steps {
		// held: the leaver's roles as the step began.
		var held []string
		what := st.op
		if st.leaver != nil {
			what += " " + st.leaver.name
			for _, role := range h.roles {
				if newest[role].member == st.leaver.name {
					held = append(held, role)
				}
			}
		}
		if st.newcomer != nil {
			what += " -> " + st.newcomer.name
		}
		var pausedHeld []string
		if st.paused != nil {
			for _, role := range h.roles {
				if newest[role].member == st.paused.name {
					pausedHeld = append(pausedHeld, role)
				}
			}
		}
		moves, late := advance(ends[k])
		if st.paused != nil {
			h.checkPause(k+1, st, ends[k], pausedHeld, all)
		}
		var wrong []string
		moved := 0
		for _, role := range h.roles {
			who := moves[role]
			moved += len(who)
			switch {
			case st.op == join && len(who) > 0 && (len(who) != 1 || who[0] != st.newcomer.name):
				// A scale-out moves slots to the newcomer only.
				wrong = append(wrong, fmt.Sprintf("%s acquired by %v", role, who))
			case st.op == join:
			case slices.Contains(held, role) && len(who) != 1:
				wrong = append(wrong, fmt.Sprintf("%s (%s's) acquired by %v", role, st.leaver.name, who))
			case slices.Contains(held, role) && st.op == replace && who[0] != st.newcomer.name:
				wrong = append(wrong, fmt.Sprintf("%s (%s's) acquired by %v, not by its heir", role, st.leaver.name, who))
			case !slices.Contains(held, role) && len(who) > 0:
				wrong = append(wrong, fmt.Sprintf("%s (not %s's) acquired by %v", role, st.leaver.name, who))
			}
		}
		switch {
		case st.leaver != nil:
			h.logf("step %2d, %-14s %s held %3d roles; %3d acquisitions (%d recorded late); %d wrong", k+1, what+":", st.leaver.name, len(held), moved, late, len(wrong))
		default:
			h.logf("step %2d, %-14s %3d acquisitions (%d recorded late); %d wrong", k+1, what+":", moved, late, len(wrong))
		}
		if st.leaver != nil && len(held) == 0 || st.op == join && moved == 0 {
			h.t.Errorf("step %d (%s) moved nothing", k+1, what)
		}
		if len(wrong) > 0 || late > 0 {
			if len(wrong) > 10 {
				wrong = append(wrong[:10], fmt.Sprintf("... %d more", len(wrong)-10))
			}
			h.t.Errorf("step %d (%s) did not move each role it should once (%d roles held by the leaver, %d late records): %s",
				k+1, what, len(held), late, strings.Join(wrong, "; "))
		}
	}

	// Both builds led the other.
	var baseLedCurrent, currentLedBase bool
	for _, st := range h.steps {
		lb := h.buildOf(st.leaderAtJoin)
		if st.newcomer == nil {
			continue
		}
		if lb == baseline && st.newcomer.build == current {
			baseLedCurrent = true
		}
		if lb == current && st.newcomer.build == baseline {
			currentLedBase = true
		}
	}
	if !baseLedCurrent || !currentLedBase {
		h.t.Errorf("a baseline leader led current members: %v; a current leader led baseline members: %v", baseLedCurrent, currentLedBase)
	}
}

// checkPause checks a join's pause (see join): the newcomer acquired the
// paused member's former roles only after it resumed, and some other role
// while it was still stopped, in the step's records (until end).
func (h *harness) checkPause(k int, st *step, end int64, pausedHeld []string, all []chaos.Record) {
	h.t.Helper()
	var before, taken, early int
	first := int64(0)
	for _, r := range all {
		if r.Kind != chaos.Acquire || r.Member != st.newcomer.name || r.Mono < st.start || r.Mono >= end {
			continue
		}
		if slices.Contains(pausedHeld, r.Role) {
			taken++
			if r.Mono < st.resumedAt {
				early++
				h.t.Errorf("step %d: %s acquired %s (token %d) %v before %s, which held it, resumed",
					k, st.newcomer.name, r.Role, r.Token, time.Duration(st.resumedAt-r.Mono), st.paused.name)
			}
			if first == 0 || r.Mono < first {
				first = r.Mono
			}
		} else if r.Mono < st.resumedAt {
			before++
		}
	}
	h.logf("step %2d: %s took %d of the %d roles of %s (stopped %v), the first %v after it resumed; %d other roles while it was stopped",
		k, st.newcomer.name, taken, len(pausedHeld), st.paused.name, time.Duration(st.resumedAt-st.pausedAt).Round(time.Millisecond),
		time.Duration(first-st.resumedAt).Round(time.Millisecond), before)
	if taken == 0 {
		h.t.Errorf("step %d: %s took none of the roles of %s: the pause tested nothing", k, st.newcomer.name, st.paused.name)
	}
	if before == 0 {
		h.t.Errorf("step %d: %s acquired nothing while %s was stopped: the leader did not rank it within the pause (machine too loaded?), so the pause tested nothing",
			k, st.newcomer.name, st.paused.name)
	}
}

// fail dumps what helps to tell why (the rink's keys, the members'
// stderr) and fails the test at once.
func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Logf("leaders over time: %s", h.leaderTimeline())
	h.t.Logf("etcd keys:\n%s", h.dumpKeys())
	for _, m := range h.members {
		if data, err := os.ReadFile(m.errLog); err == nil && len(data) > 0 {
			h.t.Logf("%s stderr:\n%s", m.name, data)
		}
	}
	h.t.Fatalf(format, args...)
}

// memberKeyRev returns the create revision of a member's key (0: none).
func (h *harness) memberKeyRev(name string) int64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.cli.Get(ctx, "rink/"+rinkName+"/members/"+name)
	if err != nil {
		h.fail("reading %s's member key: %v", name, err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].CreateRevision
}

// dumpKeys renders the rink's keys (the map without its slot table).
func (h *harness) dumpKeys() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.cli.Get(ctx, "rink/"+rinkName+"/", clientv3.WithPrefix())
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		val := kv.Value
		if strings.HasSuffix(string(kv.Key), "/map") {
			var m map[string]any
			if json.Unmarshal(val, &m) == nil {
				delete(m, "table")
				val, _ = json.Marshal(m)
			}
		}
		fmt.Fprintf(&b, "  %s create=%d mod=%d version=%d lease=%x: %s\n", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, val)
	}
	return b.String()
}

// tailer follows the members' logs as they grow and keeps, per role, the
// newest acquisition (by token).
type tailer struct {
	files  map[string]*tailFile
	newest map[string]holder
}

type tailFile struct {
	off     int64
	partial []byte
}

type holder struct {
	member string
	token  int64
}

func newTailer() *tailer {
	return &tailer{files: map[string]*tailFile{}, newest: map[string]holder{}}
}

func (t *tailer) add(path string) { t.files[path] = &tailFile{} }

func (t *tailer) poll() map[string]holder {
	for path, tf := range t.files {
		f, err := os.Open(path)
		if err != nil {
			continue // not created yet
		}
		_, err = f.Seek(tf.off, io.SeekStart)
		var data []byte
		if err == nil {
			data, err = io.ReadAll(f)
		}
		f.Close()
		if err != nil {
			continue
		}
		tf.off += int64(len(data))
		data = append(tf.partial, data...)
		end := bytes.LastIndexByte(data, '\n')
		if end < 0 {
			tf.partial = data
			continue
		}
		recs, err := chaos.Parse(bytes.NewReader(data[:end+1]))
		tf.partial = slices.Clone(data[end+1:])
		if err != nil {
			continue
		}
		for _, r := range recs {
			if r.Kind == chaos.Acquire && r.Token > t.newest[r.Role].token {
				t.newest[r.Role] = holder{r.Member, r.Token}
			}
		}
	}
	return t.newest
}
