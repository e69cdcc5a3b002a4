package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

// childEnv selects, in a re-executed process, which child to be.
const childEnv = "RINK_CHAOS_CHILD"

// nodeConfig configures one etcd node child.
type nodeConfig struct {
	Name, Dir, Client, Peer, Cluster, State string
}

// MaybeChild runs this process as a child of a fault-injection run if the
// environment says so, and exits; otherwise it returns at once. Call it
// first in main (or TestMain) of any binary used as Config.Self.
func MaybeChild() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	kind, data, _ := strings.Cut(spec, ":")
	ctx, stop := signalContext()
	defer stop()
	var err error
	switch kind {
	case "etcd":
		var c nodeConfig
		if err = json.Unmarshal([]byte(data), &c); err == nil {
			err = runNode(ctx, c)
		}
	case "worker":
		var c WorkerConfig
		if err = json.Unmarshal([]byte(data), &c); err == nil {
			err = RunWorker(ctx, c)
		}
	default:
		err = fmt.Errorf("unknown child %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runNode(ctx context.Context, c nodeConfig) error {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cu, _ := url.Parse(c.Client)
	pu, _ := url.Parse(c.Peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.ClusterState = c.Cluster, c.State
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-ctx.Done():
	case err := <-e.Err():
		return err
	}
	return nil
}

// Config configures a fault-injection run.
type Config struct {
	Self     string // the binary to re-execute for children (it calls MaybeChild)
	Dir      string // data and logs
	Members  int    // members kept alive (the run replaces those it stops)
	Roles    int
	Duration time.Duration
	Rounds   int // when > 0, stop after this many rounds of every fault kind instead
	Seed     uint64
	TTL      time.Duration
	Delay    time.Duration
	Out      io.Writer // progress lines

	// Storm only (see Storm).
	Ops     []string      // the kinds of operation to draw from; empty: every kind in StormOps
	Restore bool          // also draw "snapshot-restore", which restarts the etcd cluster
	Slack   time.Duration // added to TTL + Delay for the liveness bound; 0: 5 s
	Epoch   time.Duration // heal and check liveness after every Epoch of operations; 0: once, at the end
	Balance float64       // storm: members balance by load with this tolerance (0: by count)
	Drain   time.Duration // storm: members run roles under rink.Run with this drain timeout (0: AwaitRole loops)
	Warmup  time.Duration // storm: members warm up planned moves, for at most this long (0: no warm-up)
	// Replicas, above 1, gives each slot that many replicas
	// (rink.WithReplicas): members record their secondary holdings, and the
	// storm checks that no more than Replicas members act on a role at
	// once, and that every role has its secondaries again after each heal.
	// Zones, above 0, spreads the members over that many zones
	// (rink.WithZone) and draws "zone-loss". Storm only; 0 and 0 (or 1 and
	// 0) run the storm exactly as without them.
	Replicas int
	Zones    int
	// Keys also draws an operator's deletions of live members' keys
	// ("election-delete", "member-keys-delete", "tail-delete"; see
	// storm_keys.go). Storm only; false deals every seed's deck as before
	// they existed.
	Keys bool
	// Sidecar makes every member a rinkd.Server with its app, an
	// HTTP/JSON client, in the member's process (WorkerConfig.Sidecar):
	// the records, and so the checks, are the apps'. Half the members stop
	// by a drain of their sidecar, half by their app closing its session.
	// Storm only; not with Replicas, Zones, Balance, Drain or Warmup.
	Sidecar bool
}

// replicaMode reports whether a storm runs with replicas or zones.
func (c Config) replicaMode() bool { return c.Replicas > 1 || c.Zones > 0 }

// replicas returns k, the replicas per slot.
func (c Config) replicas() int { return max(c.Replicas, 1) }

// Fault is one injected fault.
type Fault struct {
	Kind   string
	Target string // and, in a storm, what happened
	Mono   int64
}

// Summary is what a run found.
type Summary struct {
	Faults     []Fault
	Report     Report
	MaxUnheld  map[string]time.Duration // per fault kind
	MedUnheld  map[string]time.Duration
	Violations []Violation
	// Departed and Moved count, per kind of departure, the roles the
	// departed members held and the roles acquired until the next fault.
	Departed, Moved map[string]int
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	proxy  []proxy.Server
	joined chan struct{} // closed when a worker printed JoinedLine
	deaf   bool          // storm, sidecar: its app is deaf (app-deaf)
	exited int64         // CLOCK_MONOTONIC when it exited; set before done is closed
	err    error         // its exit status

	// Storm only, guarded by stormState.mu.
	base    string // its log is base+".log"
	leaving bool   // told to leave (SIGTERM) or killed
	stopped bool   // SIGSTOP in force
	cut     int    // partitions in force (they nest)
	// replaced: another process was started under its name while it was
	// cut off ("same-name-replace"); it is no longer a live member of the
	// storm, and is told to leave at the operation's heal.
	replaced bool
	zone     int // its zone's number (Config.Zones), or -1: none
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

type run struct {
	cfg     Config
	rng     *rand.Rand
	nodes   []nodeConfig
	etcd    []*proc
	members []*proc
	next    int
	faults  []Fault
	ob      *rink.Observer
	admin   *clientv3.Client
	began   int64
	outMu   sync.Mutex
	st      *stormState // storm only
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }

func (r *run) logf(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	if r.cfg.Out != nil {
		fmt.Fprintf(r.cfg.Out, "%8.3fs  "+format+"\n", append([]any{float64(Now()-r.began) / 1e9}, args...)...)
	}
}

func (r *run) start(kind, name string, payload any) (*proc, error) {
	data, _ := json.Marshal(payload)
	cmd := exec.Command(r.cfg.Self)
	cmd.Env = append(os.Environ(), childEnv+"="+kind+":"+string(data))
	logf, err := os.Create(filepath.Join(r.cfg.Dir, name+".stderr"))
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), joined: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &lineWatch{w: logf, line: JoinedLine, seen: p.joined}, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.exited, p.err = Now(), err
		close(p.done)
	}()
	return p, nil
}

// lineWatch passes a child's output on to w, and closes seen the first time
// a whole line equal to line goes by.
type lineWatch struct {
	w    io.Writer
	line string
	seen chan struct{}
	buf  []byte
	once sync.Once
}

func (l *lineWatch) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if string(l.buf[:i]) == l.line {
			l.once.Do(func() { close(l.seen) })
		}
		l.buf = l.buf[i+1:]
	}
	return l.w.Write(p)
}

// Drive runs a seeded fault-injection run and checks the members' logs.
func Drive(ctx context.Context, cfg Config) (Summary, error) {
	r := newRun(cfg)
	defer r.cleanup()
	if err := r.startEtcd(); err != nil {
		return Summary{}, err
	}
	for i := 0; i < cfg.Members; i++ {
		if _, err := r.startMember(); err != nil {
			return Summary{}, err
		}
	}
	if err := r.waitHeld(60 * time.Second); err != nil {
		return Summary{}, err
	}
	end := time.Now().Add(cfg.Duration)
	kinds := []string{"graceful", "kill9", "rolling", "partition", "latency", "sigstop", "etcd-leader-kill"}
	var queue []string
	rounds := 0
	for ctx.Err() == nil {
		if len(queue) == 0 { // every kind once per round, in a seeded order
			if cfg.Rounds > 0 && rounds == cfg.Rounds || cfg.Rounds == 0 && !time.Now().Before(end) {
				break
			}
			rounds++
			queue = slices.Clone(kinds)
			r.rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
		}
		if cfg.Rounds == 0 && !time.Now().Before(end) {
			break
		}
		kind := queue[0]
		queue = queue[1:]
		if err := r.inject(kind); err != nil {
			return Summary{}, fmt.Errorf("%s: %w", kind, err)
		}
		// Let the rink recover, then a quiet moment before the next fault.
		if err := r.waitHeld(60 * time.Second); err != nil {
			return Summary{}, fmt.Errorf("after %s: %w", kind, err)
		}
		time.Sleep(time.Duration(500+r.rng.IntN(1500)) * time.Millisecond)
	}
	r.stopMembers()
	return r.summarise()
}

func (r *run) startEtcd() error {
	var peers []string
	for i := 0; i < 3; i++ {
		cu, _ := embedetcd.FreeURL()
		pu, _ := embedetcd.FreeURL()
		n := nodeConfig{Name: fmt.Sprintf("etcd%d", i), Dir: filepath.Join(r.cfg.Dir, fmt.Sprintf("etcd%d", i)), Client: cu.String(), Peer: pu.String(), State: "new"}
		r.nodes = append(r.nodes, n)
		peers = append(peers, n.Name+"="+n.Peer)
	}
	for i := range r.nodes {
		r.nodes[i].Cluster = strings.Join(peers, ",")
		p, err := r.start("etcd", r.nodes[i].Name, r.nodes[i])
		if err != nil {
			return err
		}
		r.etcd = append(r.etcd, p)
	}
	var eps []string
	for _, n := range r.nodes {
		eps = append(eps, strings.TrimPrefix(n.Client, "http://"))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	r.admin = cli
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, "chaos/ready", "1")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd cluster not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.ob, err = rink.NewObserver(cli, "chaos")
	r.logf("etcd cluster of 3 ready")
	return err
}

// startMember starts a worker behind its own proxies to the 3 etcd nodes.
func (r *run) startMember() (*proc, error) {
	name := r.newName()
	proxies, eps := r.newProxies()
	w := WorkerConfig{Endpoints: strings.Join(eps, ","), Rink: "chaos", Name: name, Roles: r.cfg.Roles,
		TTL: r.cfg.TTL, Delay: r.cfg.Delay, Every: 50 * time.Millisecond, Log: filepath.Join(r.cfg.Dir, name+".log")}
	p, err := r.start("worker", name, w)
	if err != nil {
		return nil, err
	}
	p.proxy = proxies
	r.members = append(r.members, p)
	return p, nil
}

// newProxies starts a proxy to each etcd node, for one member.
func (r *run) newProxies() (proxies []proxy.Server, endpoints []string) {
	for _, n := range r.nodes {
		from, _ := embedetcd.FreeURL()
		from.Scheme = "tcp"
		to, _ := url.Parse(n.Client)
		p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: url.URL{Scheme: "tcp", Host: to.Host}})
		<-p.Ready()
		proxies = append(proxies, p)
		endpoints = append(endpoints, from.Host)
	}
	return proxies, endpoints
}

func (r *run) record(kind, target string) {
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Mono: Now()})
	r.logf("fault %-16s %s", kind, target)
}

func (r *run) pick() *proc { return r.members[r.rng.IntN(len(r.members))] }

func (r *run) remove(p *proc) {
	r.members = slices.DeleteFunc(r.members, func(q *proc) bool { return q == p })
	for _, x := range p.proxy {
		x.Close()
	}
}

func (r *run) inject(kind string) error {
	t := r.pick()
	switch kind {
	case "graceful", "kill9":
		r.record(kind, t.name)
		sig := syscall.SIGTERM
		if kind == "kill9" {
			sig = syscall.SIGKILL
		}
		t.signal(sig)
		t.wait(10 * time.Second)
		r.remove(t)
		_, err := r.startMember()
		return err
	case "rolling":
		n, err := r.startMember()
		if err != nil {
			return err
		}
		deadline := time.Now().Add(20 * time.Second)
		for !r.listed(n.name) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		r.record(kind, t.name+" -> "+n.name)
		t.signal(syscall.SIGTERM)
		t.wait(10 * time.Second)
		r.remove(t)
	case "partition":
		r.record(kind, t.name)
		for _, p := range t.proxy {
			p.PauseTx()
			p.PauseRx()
		}
		time.Sleep(r.cfg.TTL + time.Second)
		for _, p := range t.proxy {
			p.UnpauseTx()
			p.UnpauseRx()
		}
	case "latency":
		r.record(kind, t.name)
		for _, p := range t.proxy {
			p.DelayTx(100*time.Millisecond, 20*time.Millisecond)
			p.DelayRx(100*time.Millisecond, 20*time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		for _, p := range t.proxy {
			p.UndelayTx()
			p.UndelayRx()
		}
	case "sigstop":
		r.record(kind, t.name)
		t.signal(syscall.SIGSTOP)
		time.Sleep(r.cfg.TTL + time.Second)
		t.signal(syscall.SIGCONT)
	case "etcd-leader-kill":
		i := r.etcdLeader()
		r.record(kind, r.nodes[i].Name)
		r.etcd[i].signal(syscall.SIGKILL)
		r.etcd[i].wait(10 * time.Second)
		time.Sleep(2 * time.Second)
		n := r.nodes[i]
		n.State = "existing" // restart with its data kept
		p, err := r.start("etcd", n.Name, n)
		if err != nil {
			return err
		}
		r.etcd[i] = p
	}
	return nil
}

func (r *run) listed(name string) bool {
	s := r.ob.State()
	for _, w := range s.Waiting {
		if w.Name == name {
			return true
		}
	}
	for _, m := range s.Members {
		if m.Name == name {
			return true
		}
	}
	return false
}

// etcdLeader returns the index of the etcd leader node (0 if unknown).
func (r *run) etcdLeader() int {
	for i, n := range r.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := r.admin.Status(ctx, strings.TrimPrefix(n.Client, "http://"))
		cancel()
		if err == nil && st.Header.MemberId == st.Leader {
			return i
		}
	}
	return 0
}

// waitHeld waits until the observer shows exactly the running members
// ranked, nobody waiting, and every member's acknowledgement current: a
// proxy for "every role is held again". It compares names, not counts: just
// after a kill -9 the dead member is still listed (its lease has not
// expired) while its replacement has not joined yet.
func (r *run) waitHeld(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s := r.ob.State()
		running := map[string]bool{}
		for _, m := range r.members {
			running[m.name] = true
		}
		ok := len(s.Members) == len(running) && len(s.Waiting) == 0 && len(s.Joining) == 0
		for _, m := range s.Members {
			ok = ok && running[m.Name] && m.Live && m.Ack == s.Version
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("rink did not settle within %v", d)
}

func (r *run) stopMembers() {
	members := r.members
	if r.st != nil {
		r.st.mu.Lock()
		r.st.stopping = true
		members = slices.Clone(r.members)
		for _, m := range members {
			m.leaving = true
		}
		r.st.mu.Unlock()
	}
	for _, m := range members {
		m.signal(syscall.SIGCONT)
		m.signal(syscall.SIGTERM)
	}
	for _, m := range members {
		if !m.wait(15 * time.Second) {
			m.signal(syscall.SIGKILL)
			m.wait(5 * time.Second)
		}
		for _, p := range m.proxy {
			p.Close()
		}
	}
	if r.st != nil {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
	}
	r.members = nil
}

func (r *run) cleanup() {
	if r.st != nil {
		r.st.mu.Lock()
		for _, h := range r.st.heals {
			h.timer.Stop()
		}
		r.st.heals = nil
		r.st.mu.Unlock()
	}
	r.stopMembers()
	if r.ob != nil {
		r.ob.Close()
	}
	if r.admin != nil {
		r.admin.Close()
	}
	for _, e := range r.etcd {
		e.signal(syscall.SIGTERM)
		if !e.wait(10 * time.Second) {
			e.signal(syscall.SIGKILL)
			e.wait(5 * time.Second)
		}
	}
}

func (r *run) summarise() (Summary, error) {
	var all []Record
	logs, _ := filepath.Glob(filepath.Join(r.cfg.Dir, "w*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return Summary{}, err
		}
		recs, err := Parse(f)
		f.Close()
		if err != nil {
			return Summary{}, err
		}
		all = append(all, recs...)
	}
	rep := Check(all)
	s := Summary{Faults: r.faults, Report: rep, Violations: rep.Violations, MaxUnheld: map[string]time.Duration{}, MedUnheld: map[string]time.Duration{}}
	// Attribute each unheld gap to the latest fault before it began (the
	// old holder's last sign of life, which may precede the fault by one
	// action interval).
	per := map[string][]time.Duration{}
	for _, gaps := range rep.UnheldAt {
		for _, g := range gaps {
			kind := "start"
			began := g.End - int64(g.Gap)
			for _, f := range r.faults {
				if f.Mono <= began+int64(200*time.Millisecond) {
					kind = f.Kind
				}
			}
			per[kind] = append(per[kind], g.Gap)
		}
	}
	for kind, gaps := range per {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		s.MaxUnheld[kind], s.MedUnheld[kind] = gaps[len(gaps)-1], gaps[len(gaps)/2]
	}
	s.Departed, s.Moved = movement(all, r.faults)
	return s, nil
}

// movement compares, for each departure, the roles the departed member
// held with the acquisitions (by token order, late records excluded) from
// the fault until the next one.
func movement(records []Record, faults []Fault) (departed, moved map[string]int) {
	departed, moved = map[string]int{}, map[string]int{}
	sort.SliceStable(records, func(i, j int) bool { return records[i].Mono < records[j].Mono })
	newest := map[string]int64{}
	owner := map[string]string{}
	released := map[string]bool{}
	i := 0
	advance := func(until int64, count *int) {
		for ; i < len(records) && records[i].Mono < until; i++ {
			r := records[i]
			switch r.Kind {
			case Acquire:
				if r.Token > newest[r.Role] {
					newest[r.Role], owner[r.Role], released[r.Role] = r.Token, r.Member, false
					if count != nil {
						*count++
					}
				}
			case Release:
				if owner[r.Role] == r.Member && newest[r.Role] == r.Token {
					released[r.Role] = true
				}
			}
		}
	}
	for k, f := range faults {
		advance(f.Mono, nil)
		kind, gone := f.Kind, f.Target
		if kind == "rolling" {
			gone, _, _ = strings.Cut(f.Target, " -> ")
		} else if kind != "graceful" && kind != "kill9" {
			continue
		}
		for role, who := range owner {
			if who == gone && !released[role] {
				departed[kind]++
			}
		}
		end := int64(math.MaxInt64)
		if k+1 < len(faults) {
			end = faults[k+1].Mono
		}
		n := 0
		advance(end, &n)
		moved[kind] += n
	}
	return departed, moved
}

// Bound is the longest a role may stay unheld while a live ranked member
// could hold it: a crashed holder's lease runs out (TTL, plus etcd's expiry
// check every 500 ms), an etcd leader election (a few seconds; etcd extends
// leases across it), the rebalance delay, and slack for a loaded machine.
func Bound(cfg Config) time.Duration { return 2*cfg.TTL + cfg.Delay + 5*time.Second }

// Text renders the summary as a report.
func (s Summary) Text() string {
	var b strings.Builder
	count := map[string]int{}
	for _, f := range s.Faults {
		count[f.Kind]++
	}
	var kinds []string
	for k := range count {
		kinds = append(kinds, k)
	}
	for k := range s.MaxUnheld {
		if count[k] == 0 {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "faults: %d; acquisitions: %d (%d recorded after a newer one, never acted on); actions: %d; violations (overlaps, tokens): %d\n",
		len(s.Faults), s.Report.Acquisitions, s.Report.Late, s.Report.Actions, len(s.Violations))
	fmt.Fprintf(&b, "%-18s %6s %14s %14s\n", "fault", "count", "median unheld", "max unheld")
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-18s %6d %14v %14v\n", k, count[k], s.MedUnheld[k].Round(time.Millisecond), s.MaxUnheld[k].Round(time.Millisecond))
	}
	for _, k := range []string{"rolling", "graceful", "kill9"} {
		if s.Departed[k] > 0 {
			fmt.Fprintf(&b, "moves after %-9s roles moved %5d, held by the departed %5d (%.2f x the minimum)\n",
				k+":", s.Moved[k], s.Departed[k], float64(s.Moved[k])/float64(s.Departed[k]))
		}
	}
	return b.String()
}
