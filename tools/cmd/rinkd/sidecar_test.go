package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/embedetcd"
	"go.uber.org/goleak"
)

// The sidecar test runs examples/sidecar-python/worker.py beside real rinkd
// processes: three rinkd on one embedded etcd, each with a Python worker
// that awaits every symbol and appends to a shared SQLite ledger with its
// fencing token. It kills workers, kills a rinkd and drains one, and checks
// from the workers' logs and the ledger that no symbol ever had two holders
// and no stale token wrote.

var sidecarSymbols = []string{"BTC/ETH", "SOL/USD", "ETH/USDT", "BTC/USDT", "XRP/USD", "ADA/EUR", "DOGE/BTC", "LTC/USD"}

const (
	sidecarTTL = 2 * time.Second
	// appFailover bounds the move of a SIGKILLed worker's symbols (its rinkd
	// lives and ends the session at once).
	appFailover = time.Second
	// rinkdFailover bounds the move of a SIGKILLed rinkd's symbols: the TTL
	// and an allowance, as for a crashed library member.
	rinkdFailover = sidecarTTL + 1500*time.Millisecond
)

// wevent is one JSON line a worker prints.
type wevent struct {
	TS     float64 `json:"ts"`
	Worker string  `json:"worker"`
	Event  string  `json:"event"`
	Symbol string  `json:"symbol"`
	Token  int64   `json:"token"`
	Reason string  `json:"reason"`
	Until  float64 `json:"until"`
	Index  int     `json:"index"`
	Size   int     `json:"size"`
	Error  string  `json:"error"`
}

// sproc is a child process of the test.
type sproc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and its output is read
}

func (p *sproc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

type sidecarRig struct {
	t        *testing.T
	bin, py  string
	script   string
	dir      string
	endpoint string
	db       string

	mu     sync.Mutex
	events []wevent
	killed map[string]float64 // worker → unix time of its SIGKILL
	rinkds map[string]*rinkdProc
	wprocs map[string]*sproc // worker name → process
}

type rinkdProc struct {
	*sproc
	member string
	http   string
	worker string // the worker beside it now
	gen    int
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// start runs a child process; line receives each line of its stdout, its
// stderr goes to a file in the rig's directory. Cleanup kills it.
func (r *sidecarRig) start(name string, line func(string), args ...string) *sproc {
	r.t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	errf, err := os.Create(filepath.Join(r.dir, name+".stderr"))
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = errf
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		errf.Close()
		r.t.Fatalf("starting %s: %v", name, err)
	}
	p := &sproc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line(sc.Text())
		}
		_ = cmd.Wait()
		errf.Close()
	}()
	r.t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			r.t.Errorf("%s did not exit after SIGKILL", name)
		}
	})
	return p
}

var httpOn = regexp.MustCompile(`HTTP on (\S+)`)

func (r *sidecarRig) startRinkd(member string) *rinkdProc {
	r.t.Helper()
	addr := make(chan string, 1)
	p := r.start("rinkd-"+member, func(l string) {
		if m := httpOn.FindStringSubmatch(l); m != nil {
			addr <- m[1]
		}
	}, r.bin, "-rink", "sidecar", "-member", member, "-endpoints", r.endpoint, "-ttl", sidecarTTL.String(),
		"-rebalance-delay", "0", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	select {
	case a := <-addr:
		rp := &rinkdProc{sproc: p, member: member, http: a}
		r.mu.Lock()
		r.rinkds[member] = rp
		r.mu.Unlock()
		return rp
	case <-p.done:
		r.t.Fatalf("rinkd %s exited: %s", member, r.stderr("rinkd-"+member))
	case <-time.After(20 * time.Second):
		r.t.Fatalf("rinkd %s did not say where it listens", member)
	}
	return nil
}

// startWorker runs a Python worker beside rd, named member.gen.
func (r *sidecarRig) startWorker(rd *rinkdProc) string {
	r.t.Helper()
	rd.gen++
	name := fmt.Sprintf("%s.%d", rd.member, rd.gen)
	args := append([]string{r.py, "-u", r.script, "--rinkd", "http://" + rd.http, "--db", r.db, "--name", name,
		"--every", "0.05"}, sidecarSymbols...)
	p := r.start(name, func(l string) {
		var ev wevent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			r.t.Logf("%s: %s", name, l)
			return
		}
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}, args...)
	r.mu.Lock()
	r.wprocs[name] = p
	rd.worker = name
	r.mu.Unlock()
	return name
}

func (r *sidecarRig) stderr(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, name+".stderr"))
	s := string(b)
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// interval is one holding of a symbol by a worker, from its GRANTED to the
// moment it stopped acting (its logged until, or its SIGKILL).
type interval struct {
	worker     string
	token      int64
	start, end float64 // end 0: still held
	firstWrite float64 // 0: none yet
	endReason  string
}

// intervals returns each symbol's holdings, in the order they started.
func (r *sidecarRig) intervals() map[string][]*interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]*interval{}
	open := map[[2]string]*interval{} // worker, symbol
	for _, ev := range r.events {
		k := [2]string{ev.Worker, ev.Symbol}
		switch ev.Event {
		case "acquire":
			iv := &interval{worker: ev.Worker, token: ev.Token, start: ev.TS}
			open[k] = iv
			out[ev.Symbol] = append(out[ev.Symbol], iv)
		case "first-write":
			if iv := open[k]; iv != nil && iv.token == ev.Token {
				iv.firstWrite = ev.TS
			}
		case "release":
			if iv := open[k]; iv != nil && iv.token == ev.Token {
				iv.end, iv.endReason = ev.Until, ev.Reason
				delete(open, k)
			}
		}
	}
	for k, iv := range open {
		if at, ok := r.killed[k[0]]; ok {
			iv.end, iv.endReason = at, "SIGKILL"
		}
	}
	for _, ivs := range out {
		sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	}
	return out
}

// owners returns the current holder of each symbol that has exactly one
// open holding, written at least once, by a live worker.
func (r *sidecarRig) owners() map[string]string {
	own := map[string]string{}
	for sym, ivs := range r.intervals() {
		var cur []*interval
		for _, iv := range ivs {
			if iv.end == 0 {
				cur = append(cur, iv)
			}
		}
		if len(cur) == 1 && cur[0].firstWrite > 0 && !r.wprocs[cur[0].worker].exited() {
			own[sym] = cur[0].worker
		}
	}
	return own
}

func (r *sidecarRig) ranked(worker string, size int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if ev := r.events[i]; ev.Worker == worker && ev.Event == "rank" {
			return ev.Index >= 0 && ev.Size == size
		}
	}
	return false
}

// settle waits until every symbol has one holder among live workers, the
// workers named are ranked among size members, and nothing changed for a
// while; it returns the holders.
func (r *sidecarRig) settle(size int, workers ...string) map[string]string {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last map[string]string
	var since time.Time
	for time.Now().Before(deadline) {
		own := r.owners()
		ok := len(own) == len(sidecarSymbols)
		for _, w := range workers {
			ok = ok && r.ranked(w, size)
		}
		if !ok || !mapsEqual(own, last) {
			last, since = own, time.Now()
		} else if time.Since(since) > 700*time.Millisecond {
			return own
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("the symbols did not settle on %d members within 15 s: holders %v\n%s", size, last, r.dump())
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (r *sidecarRig) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Event == "rank" {
			fmt.Fprintf(&b, "%.3f %s rank %d/%d\n", ev.TS, ev.Worker, ev.Index, ev.Size)
		} else {
			fmt.Fprintf(&b, "%.3f %s %s %s %d %s\n", ev.TS, ev.Worker, ev.Event, ev.Symbol, ev.Token, ev.Reason)
		}
	}
	s := b.String()
	if len(s) > 20000 {
		s = "…" + s[len(s)-20000:]
	}
	return s
}

func held(own map[string]string, worker string) []string {
	var syms []string
	for s, w := range own {
		if w == worker {
			syms = append(syms, s)
		}
	}
	sort.Strings(syms)
	return syms
}

// moved waits until each of syms is held and written by a worker other
// than from, in a holding that started after t0; it returns how long after
// t0 the last of them was acquired and first written.
func (r *sidecarRig) moved(syms []string, from string, t0 float64, within time.Duration) (acquired, written time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within + 5*time.Second)
	for time.Now().Before(deadline) {
		ivs := r.intervals()
		acq, wr, all := 0.0, 0.0, true
		for _, s := range syms {
			found := false
			for _, iv := range ivs[s] {
				if iv.worker != from && iv.start > t0 && iv.firstWrite > 0 {
					acq, wr, found = math.Max(acq, iv.start-t0), math.Max(wr, iv.firstWrite-t0), true
					break
				}
			}
			all = all && found
		}
		if all {
			return time.Duration(acq * 1e9), time.Duration(wr * 1e9)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("%v of %s were not held elsewhere within %v\n%s", syms, from, within+5*time.Second, r.dump())
	return 0, 0
}

func waitDone(t *testing.T, p *sproc, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.name, within)
	}
}

func TestSidecarPythonWorkers(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: this test runs examples/sidecar-python/worker.py beside rinkd")
	}
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	began := time.Now()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build rinkd: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rinkd")
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer bcancel()
	if out, err := exec.CommandContext(bctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "sidecar-python", "worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(began)

	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	r := &sidecarRig{t: t, bin: bin, py: py, script: script, dir: dir, endpoint: srv.Endpoint(),
		db: filepath.Join(dir, "ledger.db"), killed: map[string]float64{}, rinkds: map[string]*rinkdProc{},
		wprocs: map[string]*sproc{}}
	defer func() {
		if t.Failed() {
			for name := range r.wprocs {
				t.Logf("%s stderr:\n%s", name, r.stderr(name))
			}
			for m := range r.rinkds {
				t.Logf("rinkd %s stderr (its log):\n%s", m, r.stderr("rinkd-"+m))
			}
		}
	}()
	// The ledger's schema, before three workers race to create it.
	if out, err := exec.Command(py, "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import worker; worker.Ledger(sys.argv[2])",
		filepath.Dir(script), r.db).CombinedOutput(); err != nil {
		t.Fatalf("creating the ledger: %v\n%s", err, out)
	}

	members := []string{"a", "b", "c"}
	var rds []*rinkdProc
	for _, m := range members {
		rds = append(rds, r.startRinkd(m))
	}
	for _, rd := range rds {
		r.startWorker(rd)
	}
	own := r.settle(3, "a.1", "b.1", "c.1")
	t.Logf("settled on 3 members: %v", own)

	// 1. SIGKILL a worker while its rinkd lives; then start a new worker
	// beside that rinkd.
	var writes, acqs []time.Duration
	for run := 0; run < 4; run++ {
		var victim *rinkdProc
		for _, rd := range rds { // the one holding the most symbols
			if victim == nil || len(held(own, rd.worker)) > len(held(own, victim.worker)) {
				victim = rd
			}
		}
		w := victim.worker
		syms := held(own, w)
		t0 := time.Now()
		r.mu.Lock()
		r.killed[w] = unix(t0)
		r.mu.Unlock()
		if err := r.wprocs[w].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		acq, wr := r.moved(syms, w, unix(t0), appFailover)
		t.Logf("run %d: worker %s SIGKILLed holding %v: granted elsewhere after %v, written after %v", run, w, syms, acq.Round(time.Millisecond), wr.Round(time.Millisecond))
		acqs, writes = append(acqs, acq), append(writes, wr)
		if wr > appFailover {
			t.Errorf("run %d: the symbols of SIGKILLed worker %s were written elsewhere %v after the kill; want within %v", run, w, wr, appFailover)
		}
		waitDone(t, r.wprocs[w], 5*time.Second)
		nw := r.startWorker(victim)
		own = r.settle(3, nw)
	}
	t.Logf("app SIGKILL → first GRANTED elsewhere: %s", stats(acqs))
	t.Logf("app SIGKILL → first write elsewhere: %s", stats(writes))

	// 2. SIGKILL a rinkd: its worker stops at once (its streams end), its
	// symbols move after the TTL.
	var victim *rinkdProc
	for _, rd := range rds {
		if victim == nil || len(held(own, rd.worker)) > len(held(own, victim.worker)) {
			victim = rd
		}
	}
	w := victim.worker
	syms := held(own, w)
	t0 := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, r.wprocs[w], 5*time.Second)
	stopped := r.stoppedAt(w)
	acq, wr := r.moved(syms, w, unix(t0), rinkdFailover)
	t.Logf("rinkd %s SIGKILLed (worker %s holding %v): the worker stopped %v after, the symbols were granted elsewhere after %v, written after %v",
		victim.member, w, syms, time.Duration((stopped-unix(t0))*1e9).Round(time.Millisecond), acq.Round(time.Millisecond), wr.Round(time.Millisecond))
	if wr > rinkdFailover {
		t.Errorf("the symbols of SIGKILLed rinkd %s were written elsewhere %v after the kill; want within %v", victim.member, wr, rinkdFailover)
	}
	if stopped == 0 || stopped-unix(t0) > float64(acq)/1e9 {
		t.Errorf("worker %s of SIGKILLed rinkd %s stopped at %+.3f s, after its symbols were granted elsewhere (%v)", w, victim.member, stopped-unix(t0), acq)
	}
	rds = slices.DeleteFunc(rds, func(rd *rinkdProc) bool { return rd == victim })
	own = r.settle(2)

	// 3. SIGSTOP a rinkd: no RENEWED reaches its worker, whose grants lapse
	// before the member's lease can expire; the symbols move after the TTL.
	// After SIGCONT the member rejoins as a newcomer, in the same session.
	paused, other := rds[0], rds[1]
	if len(held(own, other.worker)) > len(held(own, paused.worker)) {
		paused, other = other, paused
	}
	w = paused.worker
	syms = held(own, w)
	t0 = time.Now()
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.cmd.Process.Signal(syscall.SIGCONT) })
	acq, wr = r.moved(syms, w, unix(t0), rinkdFailover)
	var lapsed time.Duration
	ivs := r.intervals()
	for _, s := range syms {
		for _, iv := range ivs[s] {
			if iv.worker == w && iv.start < unix(t0) && iv.end >= unix(t0) {
				if iv.endReason != "lapsed" {
					t.Errorf("SIGSTOP: %s's holding of %s ended by %q, want lapsed", w, s, iv.endReason)
				}
				lapsed = max(lapsed, time.Duration((iv.end-unix(t0))*1e9))
			}
		}
	}
	t.Logf("rinkd %s SIGSTOPped (worker %s holding %v): the grants lapsed %v after, the symbols were granted elsewhere after %v, written after %v",
		paused.member, w, syms, lapsed.Round(time.Millisecond), acq.Round(time.Millisecond), wr.Round(time.Millisecond))
	if wr > rinkdFailover {
		t.Errorf("the symbols of SIGSTOPped rinkd %s were written elsewhere %v after the stop; want within %v", paused.member, wr, rinkdFailover)
	}
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	cont := unix(time.Now())
	if r.waitRanked(w, cont, 2, 10*time.Second) {
		t.Logf("after SIGCONT, worker %s's session lives on: its member rejoined", w)
	} else {
		t.Logf("after SIGCONT, worker %s did not report a new rank; it stopped with %q", w, r.stopReason(w))
		if r.wprocs[w].exited() {
			w = r.startWorker(paused)
			r.settle(2, w)
		} else {
			t.Fatalf("worker %s neither ranked again nor stopped after SIGCONT\n%s", w, r.dump())
		}
	}
	// A member that rejoins after a fence starts nothing for one TTL (its
	// quiet time, docs/design.md): wait until its slots have come back.
	deadline := time.Now().Add(15 * time.Second)
	for len(held(r.owners(), w)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("after SIGCONT, worker %s holds symbols again after %v", w, time.Duration((unix(time.Now())-cont)*1e9).Round(time.Millisecond))
	own = r.settle(2, w)

	// 4. rinkd drain of the member that holds the symbols now: its worker
	// gets REVOKED, releases, the other gets GRANTED; the session ends with
	// reason drained.
	drained, last := other, paused
	w = drained.worker
	syms = held(own, w)
	t0 = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	out, err := exec.CommandContext(ctx, bin, "drain", "-http", drained.http, "-timeout", "15s").CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("rinkd drain: %v\n%s", err, out)
	}
	drainTook := time.Since(t0)
	waitDone(t, r.wprocs[w], 5*time.Second)
	acq, wr = r.moved(syms, w, unix(t0), 2*time.Second)
	t.Logf("rinkd drain of %s (worker %s holding %v) took %v: granted elsewhere after %v, written after %v",
		drained.member, w, syms, drainTook.Round(time.Millisecond), acq.Round(time.Millisecond), wr.Round(time.Millisecond))
	ivs = r.intervals()
	for _, s := range syms {
		for _, iv := range ivs[s] {
			if iv.worker == w && iv.start < unix(t0) && iv.end >= unix(t0) && iv.endReason != "revoked:drained" {
				t.Errorf("drain: %s's holding of %s ended by %q, want revoked:drained", w, s, iv.endReason)
			}
		}
	}
	if reason := r.stopReason(w); !strings.Contains(reason, "drained") {
		t.Errorf("drain: worker %s stopped with %q, want the session ended: drained", w, reason)
	}
	r.settle(1, last.worker)

	// Stop the last worker gracefully, then the rinkds.
	_ = r.wprocs[last.worker].cmd.Process.Signal(syscall.SIGTERM)
	waitDone(t, r.wprocs[last.worker], 5*time.Second)
	for _, rd := range rds {
		_ = rd.cmd.Process.Signal(syscall.SIGTERM)
		waitDone(t, rd.sproc, 15*time.Second)
	}

	r.checkHistory()
	r.checkLedger()
	if os.Getenv("SIDECAR_DUMP") != "" {
		t.Logf("events:\n%s", r.dump())
	}
	t.Logf("test took %v (building rinkd %v)", time.Since(began).Round(time.Millisecond), built.Round(time.Millisecond))
}

// waitRanked waits until worker reports a rank among size members after
// the unix time since.
func (r *sidecarRig) waitRanked(worker string, since float64, size int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		ok := false
		for _, ev := range r.events {
			if ev.Worker == worker && ev.Event == "rank" && ev.TS > since && ev.Index >= 0 && ev.Size == size {
				ok = true
			}
		}
		r.mu.Unlock()
		if ok {
			return true
		}
		if r.wprocs[worker].exited() {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (r *sidecarRig) stoppedAt(worker string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		if ev.Worker == worker && ev.Event == "stopped" {
			return ev.TS
		}
	}
	return 0
}

func (r *sidecarRig) stopReason(worker string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		if ev.Worker == worker && ev.Event == "stopped" {
			return ev.Reason
		}
	}
	return ""
}

func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("min %v, median %v, max %v (%d runs)", s[0].Round(time.Millisecond), med.Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// checkHistory: from the workers' logs, no two holdings of a symbol
// overlap, every holding ended, and each has a higher token than the one
// before.
func (r *sidecarRig) checkHistory() {
	r.t.Helper()
	for sym, ivs := range r.intervals() {
		for i, iv := range ivs {
			if iv.end == 0 {
				r.t.Errorf("%s: %s's holding (token %d) never ended", sym, iv.worker, iv.token)
				continue
			}
			if i == 0 {
				continue
			}
			prev := ivs[i-1]
			if iv.start < prev.end {
				r.t.Errorf("%s: %s acquired it (token %d) at %.3f, %.0f ms before %s stopped (token %d, %s)",
					sym, iv.worker, iv.token, iv.start, (prev.end-iv.start)*1e3, prev.worker, prev.token, prev.endReason)
			}
			if iv.token <= prev.token {
				r.t.Errorf("%s: token %d of %s follows token %d of %s", sym, iv.token, iv.worker, prev.token, prev.worker)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		switch ev.Event {
		case "refused":
			r.t.Errorf("the ledger refused %s's write of %s with stale token %d", ev.Worker, ev.Symbol, ev.Token)
		case "release-failed", "await-failed":
			r.t.Logf("%s: %s %s token %d: %s", ev.Worker, ev.Event, ev.Symbol, ev.Token, ev.Error)
		}
	}
}

// checkLedger reads the SQLite ledger (through python3: no Go driver here):
// each symbol's accepted writes, in commit order, carry non-decreasing
// tokens, each token is one worker's, and each write falls inside that
// worker's logged holding.
func (r *sidecarRig) checkLedger() {
	r.t.Helper()
	const dump = `import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(json.dumps({"ledger": db.execute("SELECT symbol, token, worker, ts FROM ledger ORDER BY id").fetchall(),
                  "refused": db.execute("SELECT COUNT(*) FROM refused").fetchone()[0]}))`
	out, err := exec.Command(r.py, "-c", dump, r.db).Output()
	if err != nil {
		r.t.Fatalf("reading the ledger: %v", err)
	}
	var got struct {
		Ledger  [][4]any `json:"ledger"`
		Refused int      `json:"refused"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		r.t.Fatalf("reading the ledger: %v", err)
	}
	if got.Refused != 0 {
		r.t.Errorf("the ledger refused %d writes with stale tokens", got.Refused)
	}
	ivs := r.intervals()
	type key struct {
		sym   string
		token int64
	}
	holder := map[key]*interval{}
	for sym, list := range ivs {
		for _, iv := range list {
			holder[key{sym, iv.token}] = iv
		}
	}
	top := map[string]int64{}
	perSym := map[string]int{}
	for _, row := range got.Ledger {
		sym, _ := row[0].(string)
		tokf, _ := row[1].(float64)
		worker, _ := row[2].(string)
		ts, _ := row[3].(float64)
		tok := int64(tokf)
		perSym[sym]++
		if tok < top[sym] {
			r.t.Errorf("ledger: %s written by %s with token %d after token %d", sym, worker, tok, top[sym])
		}
		top[sym] = max(top[sym], tok)
		iv := holder[key{sym, tok}]
		switch {
		case iv == nil:
			r.t.Errorf("ledger: %s written by %s with token %d, which no worker logged acquiring", sym, worker, tok)
		case iv.worker != worker:
			r.t.Errorf("ledger: %s token %d written by %s, but %s held it", sym, tok, worker, iv.worker)
		case ts < iv.start || (iv.end > 0 && ts > iv.end+0.001):
			r.t.Errorf("ledger: %s written by %s (token %d) at %.3f, outside its holding [%.3f, %.3f]", sym, worker, tok, ts, iv.start, iv.end)
		}
	}
	r.t.Logf("ledger: %d writes, by symbol %v, 0 refused", len(got.Ledger), perSym)
}
