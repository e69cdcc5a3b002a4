package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// StormOps lists every kind of operation a storm draws from (see Storm).
// "snapshot-restore" is drawn only when Config.Restore is set, and
// "zone-loss" only when Config.Zones is (it is last, so that the deck of a
// storm without zones, and its seeded order, is what it was before it).
// The deletions of live members' keys after it (keyOps, see
// storm_keys.go) are drawn only when Config.Keys is set, for the same
// reason, and "app-deaf" (a sidecar member's app stops reading rinkd's
// await streams for a while, acting on by its grants' validity) only when
// Config.Sidecar is.
var StormOps = []string{
	"join", "join-reused", "join-leave", "leave-leader", "leave-member", "kill9",
	"partition", "sigstop", "etcd-kill", "cut-all",
	"map-reput", "map-rewrite", "map-delete", "floor-delete", "member-key-delete",
	"stray-member-empty", "stray-member-space", "stray-member-slash", "stray-garbage", "stray-election",
	"snapshot-save", "snapshot-restore",
	"member-key-delete-cut", "same-name-replace", "stray-member-leaseless", "stranger-member", "acks-delete",
	"zone-loss",
	"election-delete", "member-keys-delete", "tail-delete",
	"app-deaf",
}

// strayKeys are the odd keys the "stray-" operations put under the rink's
// prefix, without a lease: rink ignores them all, and deletes the stray
// election key and the leaseless member key (the others stay for good).
var strayKeys = map[string]struct{ suffix, value string }{
	"stray-member-empty": {"members/", "{}"},                                   // a member key with an empty name
	"stray-member-space": {"members/a b", "{}"},                                // a name New would refuse
	"stray-member-slash": {"members/x/y", "{}"},                                // a name with a slash
	"stray-garbage":      {"garbage", "garbage"},                               // a key rink does not know
	"stray-election":     {"election/zz-garbage", "\xff\x00not a member name"}, // an election key of no lease
	// A valid member name on a key of no lease: rink takes it for a stray,
	// and the member that sweeps strays deletes it (it comes back each time
	// the operation is drawn).
	"stray-member-leaseless": {"members/zz", "{}"},
}

// StormSummary is what a storm found.
type StormSummary struct {
	Began  int64   // CLOCK_MONOTONIC at the start of the run: times are rendered relative to it
	Ops    []Fault // every operation, in order, each heal included
	Report Report  // safety, over the whole run
	// Checkpoints are the liveness checks, one after each heal.
	Checkpoints []Checkpoint
	Bound       time.Duration
	// Findings are events that are not violations of the promise but are
	// worth a look: a member that exited by itself, a Shutdown that hung.
	Findings []string
	Procs    int // member processes started
	// Replicas and Zones are the run's (Config); with replicas or zones
	// (see Config.Replicas), Holders is the check that at most Replicas
	// members acted on a role at once, and each checkpoint checks the
	// roles' secondaries too.
	Replicas, Zones int
	Holders         HoldersReport
	// Sidecar is the run's (Config.Sidecar).
	Sidecar bool
}

// replicaMode reports whether the run had replicas or zones.
func (s StormSummary) replicaMode() bool { return s.Replicas > 1 || s.Zones > 0 }

// Checkpoint is one liveness check: every fault was undone at Healed, and
// every role must be held at Deadline (Healed + the bound).
type Checkpoint struct {
	Healed, Deadline int64
	Liveness         LivenessReport
	// State is the rink's keys in etcd at the deadline, in short (the
	// whole listing is in the run's directory, state-N.txt).
	State string
	// With replicas or zones: Live is how many members were live at the
	// deadline; Secondaries checks that every role had min(k-1, Live-1)
	// secondaries then; ZonesSpread counts the roles whose holders at the
	// deadline sat in as many distinct zones as they could (min(k, Zones,
	// holders)), for information.
	Live        int
	Secondaries SecondaryReport
	ZonesSpread int
}

// Violations returns the safety violations, then the liveness ones.
func (s StormSummary) Violations() []Violation {
	out := slices.Clone(s.Report.Violations)
	out = append(out, s.Holders.Violations...)
	for _, c := range s.Checkpoints {
		out = append(out, c.Liveness.Violations...)
		out = append(out, c.Secondaries.Violations...)
	}
	return out
}

// SafetyViolations counts the safety violations: the primaries' (Check)
// and, with replicas, the holders' (CheckHolders).
func (s StormSummary) SafetyViolations() int {
	return len(s.Report.Violations) + len(s.Holders.Violations)
}

// LivenessViolations counts the liveness violations of every checkpoint,
// the secondaries' included.
func (s StormSummary) LivenessViolations() int {
	n := 0
	for _, c := range s.Checkpoints {
		n += len(c.Liveness.Violations) + len(c.Secondaries.Violations)
	}
	return n
}

// StormBound is how long after the heal every role must be held again: a
// lease that was renewed just before the heal runs out (TTL), the newcomers
// started at the heal wait the rebalance delay, plus slack for elections
// and a loaded machine; with a warm-up, a planned move may wait for it,
// and a drain for the functions on a slot.
func StormBound(cfg Config) time.Duration {
	slack := cfg.Slack
	if slack == 0 {
		slack = 5 * time.Second
	}
	return cfg.TTL + cfg.Delay + cfg.Warmup + cfg.Drain + slack
}

// heal is an undo scheduled for later: its timer, or the end of the storm,
// runs it, whichever comes first, exactly once.
type heal struct {
	once  sync.Once
	timer *time.Timer
	fn    func()
}

func (h *heal) run() { h.once.Do(h.fn) }

type stormState struct {
	mu       sync.Mutex
	procs    []*proc // every member process ever started
	heals    []*heal
	joiners  sync.WaitGroup
	calm     chan struct{} // closed when the storm ends
	stopping bool          // the run is stopping its members: exits are expected
	departed []string      // names of members told to leave or killed
	etcdUp   []bool
	snapshot string // the newest snapshot not yet restored
	restores int
	seq      int
	findings []string
	deck     []string
	putBack  map[string]bool // kinds of this deck put back once already
	stranger bool            // "stranger-member" is in force
	zoneOf   map[string]int  // with zones: each member name's zone, for good
}

// Storm runs a storm: operations drawn at random (seeded) from cfg.Ops
// (every kind in StormOps when empty), fired back to back with random gaps
// from 0 to one TTL, never waiting for the rink to settle. When cfg.Duration
// has passed it undoes every fault (all members running and reachable,
// every etcd node up, at least cfg.Members members; stray keys stay), waits
// StormBound, and checks the members' logs: Check for safety over the
// whole run, and Liveness for every role held at the deadline. With
// cfg.Epoch set, the storm stops for such a heal and check after every
// Epoch of operations, so that a long run checks liveness many times.
//
// With cfg.Replicas (above 1) or cfg.Zones (see Config), the members hold
// k = cfg.Replicas replicas per slot and record their secondary holdings,
// and sit in zones; the checks add CheckHolders (never more than k members
// acting on a role at once) over the whole run and, at each checkpoint,
// SecondaryLiveness (every role has its k-1 secondaries again, or one
// fewer than the live members, within the same bound); "zone-loss" is
// drawn, and the heal brings every zone back to at least one member.
func Storm(ctx context.Context, cfg Config) (StormSummary, error) {
	r := newRun(cfg)
	r.st = &stormState{etcdUp: []bool{true, true, true}, zoneOf: map[string]int{}}
	defer r.cleanup()
	if err := r.startEtcd(); err != nil {
		return StormSummary{}, err
	}
	r.st.mu.Lock()
	for i := 0; i < cfg.Members; i++ {
		if _, err := r.startWorker(r.newName()); err != nil {
			r.st.mu.Unlock()
			return StormSummary{}, err
		}
	}
	r.st.mu.Unlock()
	if err := r.waitLogsHeld(ctx, 60*time.Second); err != nil {
		return StormSummary{}, err
	}
	epoch := cfg.Epoch
	if epoch <= 0 || epoch > cfg.Duration {
		epoch = cfg.Duration
	}
	bound := StormBound(cfg)
	var checkpoints []Checkpoint
	for stormed := time.Duration(0); stormed < cfg.Duration && ctx.Err() == nil; stormed += epoch {
		r.st.mu.Lock()
		r.st.calm = make(chan struct{})
		r.st.mu.Unlock()
		r.logf("the storm begins (%v)", min(epoch, cfg.Duration-stormed))
		end := time.Now().Add(min(epoch, cfg.Duration-stormed))
		for ctx.Err() == nil && time.Now().Before(end) {
			sleepCtx(ctx, time.Duration(r.rng.Int64N(int64(cfg.TTL)+1)))
			if ctx.Err() != nil || !time.Now().Before(end) {
				break
			}
			if err := r.stormOp(); err != nil {
				return StormSummary{}, err
			}
		}
		if err := r.healAll(); err != nil {
			return StormSummary{}, err
		}
		c := Checkpoint{Healed: Now()}
		c.Deadline = c.Healed + int64(bound)
		checkpoints = append(checkpoints, c)
		r.logf("healed; every role must be held by %s", secs(r.began, c.Deadline))
		time.Sleep(time.Duration(c.Deadline - Now()))
		checkpoints[len(checkpoints)-1].State = r.dumpState(filepath.Join(r.cfg.Dir, fmt.Sprintf("state-%d.txt", len(checkpoints))))
		if cfg.replicaMode() {
			r.st.mu.Lock()
			checkpoints[len(checkpoints)-1].Live = len(r.live())
			r.st.mu.Unlock()
		}
		// Watch a little past the deadline, to tell when a late role came back.
		time.Sleep(2 * time.Second)
	}
	r.stopMembers()
	recs, err := r.readLogs()
	if err != nil {
		return StormSummary{}, err
	}
	s := StormSummary{Began: r.began, Ops: r.faults, Bound: bound, Procs: len(r.st.procs), Replicas: cfg.Replicas, Zones: cfg.Zones, Sidecar: cfg.Sidecar}
	s.Report = CheckSince(r.began, recs)
	k := cfg.replicas()
	if cfg.replicaMode() {
		s.Holders = CheckHolders(r.began, recs, k)
	}
	for _, c := range checkpoints {
		c.Liveness = Liveness(r.began, recs, r.roles(), r.aliveAt, c.Healed, c.Deadline)
		if cfg.replicaMode() {
			want := min(k-1, c.Live-1)
			c.Secondaries = SecondaryLiveness(r.began, recs, r.roles(), r.aliveAt, c.Healed, c.Deadline, max(want, 0))
			c.ZonesSpread = r.zonesSpread(c.Secondaries.Holders, k)
		}
		s.Checkpoints = append(s.Checkpoints, c)
	}
	r.st.mu.Lock()
	s.Findings = slices.Clone(r.st.findings)
	r.st.mu.Unlock()
	return s, nil
}

// zonesSpread counts the roles whose holders (processes) sit in as many
// distinct zones as they can: min(k, zones, holders).
func (r *run) zonesSpread(holders map[string][]string, k int) int {
	if r.cfg.Zones == 0 {
		return 0
	}
	r.st.mu.Lock()
	zone := map[string]int{}
	for _, p := range r.st.procs {
		zone[p.base] = p.zone
	}
	r.st.mu.Unlock()
	n := 0
	for _, hs := range holders {
		var zs []int
		for _, h := range hs {
			zs = append(zs, zone[h])
		}
		slices.Sort(zs)
		if len(slices.Compact(zs)) >= min(k, r.cfg.Zones, len(hs)) {
			n++
		}
	}
	return n
}

func newRun(cfg Config) *run {
	return &run{cfg: cfg, rng: newRand(cfg.Seed), began: Now()}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *run) roles() []string {
	roles := []string{"leader"}
	for i := 0; i < r.cfg.Roles; i++ {
		roles = append(roles, fmt.Sprint("partition:", i))
	}
	return roles
}

func (r *run) newName() string {
	name := fmt.Sprintf("w%d", r.next)
	r.next++
	return name
}

// startWorker starts a member process called name, logging to a file of its
// own (a name can be used again). The caller holds st.mu.
func (r *run) startWorker(name string) (*proc, error) {
	r.st.seq++
	base := fmt.Sprintf("%s.%d", name, r.st.seq)
	proxies, eps := r.newProxies()
	w := WorkerConfig{Endpoints: strings.Join(eps, ","), Rink: "chaos", Name: name, Roles: r.cfg.Roles,
		TTL: r.cfg.TTL, Delay: r.cfg.Delay, Every: 50 * time.Millisecond, Log: filepath.Join(r.cfg.Dir, base+".log"),
		RetryJoin: true, Announce: true, Verbose: true, Origin: r.began, Balance: r.cfg.Balance,
		Drain: r.cfg.Drain, Warmup: r.cfg.Warmup}
	if r.cfg.Sidecar {
		w.Sidecar, w.SidecarStop = true, SidecarDrain
		if r.st.seq%2 == 0 {
			w.SidecarStop = SidecarClose
		}
		r.logf("   %s: rinkd and its app, which stops by %s", base, w.SidecarStop)
	}
	zone := r.zoneFor(name)
	if r.cfg.Replicas > 1 {
		w.Replicas = r.cfg.Replicas
	}
	if zone >= 0 {
		w.Zone = zoneName(zone)
	}
	p, err := r.start("worker", base, w)
	if err != nil {
		for _, x := range proxies {
			x.Close()
		}
		return nil, err
	}
	p.name, p.base, p.proxy, p.zone = name, base, proxies, zone
	if zone >= 0 {
		r.logf("   %s in zone %s", base, w.Zone)
	}
	r.members = append(r.members, p)
	r.st.procs = append(r.st.procs, p)
	go func() {
		<-p.done
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		r.members = slices.DeleteFunc(r.members, func(q *proc) bool { return q == p })
		for _, x := range p.proxy {
			x.Close()
		}
		if !p.leaving && !r.st.stopping {
			r.st.findings = append(r.st.findings, fmt.Sprintf("%s exited by itself at %s (%v); stderr ends: %s",
				p.base, secs(r.began, p.exited), p.err, tail(filepath.Join(r.cfg.Dir, p.base+".stderr"))))
			r.logf("finding: %s exited by itself (%v)", p.base, p.err)
		}
	}()
	return p, nil
}

// tail returns the last lines of a file, on one line.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

// aliveAt reports whether the member process whose log is proc ran at mono.
func (r *run) aliveAt(proc string, mono int64) bool {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	for _, p := range r.st.procs {
		if p.base == proc {
			return p.exited == 0 || p.exited > mono
		}
	}
	return false
}

// readLogs reads every member process's log, each record naming its process.
func (r *run) readLogs() ([]Record, error) {
	r.st.mu.Lock()
	procs := slices.Clone(r.st.procs)
	r.st.mu.Unlock()
	var all []Record
	for _, p := range procs {
		f, err := os.Open(filepath.Join(r.cfg.Dir, p.base+".log"))
		if os.IsNotExist(err) {
			continue // killed before it opened its log
		}
		if err != nil {
			return nil, err
		}
		recs, err := Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.base, err)
		}
		for i := range recs {
			recs[i].Proc = p.base
		}
		all = append(all, recs...)
	}
	return all, nil
}

// waitLogsHeld waits until the members' own logs show every role held.
func (r *run) waitLogsHeld(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		recs, err := r.readLogs()
		if err != nil {
			return err
		}
		now := Now()
		if len(Liveness(r.began, recs, r.roles(), r.aliveAt, now, now).Violations) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the members did not hold every role within %v", d)
}

// op records an operation.
func (r *run) op(kind, target string) {
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Mono: Now()})
	r.logf("op %-22s %s", kind, target)
}

// later schedules an undo after d; the heal at the end of the storm runs
// it at once if it has not run. The caller holds st.mu.
func (r *run) later(d time.Duration, fn func()) {
	h := &heal{fn: fn}
	h.timer = time.AfterFunc(d, h.run)
	r.st.heals = append(r.st.heals, h)
}

// randDur returns a duration uniform in [lo, hi].
func (r *run) randDur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

// live returns the running members not told to leave, nor replaced by a
// process under the same name.
func (r *run) live() []*proc {
	var out []*proc
	for _, p := range r.members {
		if !p.leaving && !p.replaced {
			out = append(out, p)
		}
	}
	return out
}

// stormOp draws the next operation from a seeded shuffled deck of every
// kind, skipping kinds that cannot run now, and runs it.
func (r *run) stormOp() error {
	kinds := r.cfg.Ops
	if len(kinds) == 0 {
		kinds = StormOps
	}
	for tries := 0; tries < 2*len(kinds)+2; tries++ {
		if len(r.st.deck) == 0 {
			if r.st.deck = r.newDeck(kinds); len(r.st.deck) == 0 {
				return nil
			}
			r.st.putBack = map[string]bool{}
		}
		kind := r.st.deck[0]
		r.st.deck = r.st.deck[1:]
		done, err := r.stormDo(kind)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		if done {
			return nil
		}
		// It cannot run now (no snapshot to restore yet, an etcd node
		// down, too few members...): it goes back into the deck, later,
		// once.
		if !r.st.putBack[kind] {
			r.st.putBack[kind] = true
			i := r.rng.IntN(len(r.st.deck) + 1)
			r.st.deck = slices.Insert(r.st.deck, i, kind)
		}
	}
	return nil
}

// newDeck returns a deck of kinds, shuffled: every kind that this run can
// draw ("snapshot-restore" only with cfg.Restore, "zone-loss" only with
// cfg.Zones, the deletions of keys only with cfg.Keys).
func (r *run) newDeck(kinds []string) []string {
	deck := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool {
		return k == "snapshot-restore" && !r.cfg.Restore || k == "zone-loss" && r.cfg.Zones == 0 || keyOp(k) && !r.cfg.Keys ||
			k == "app-deaf" && !r.cfg.Sidecar
	})
	if len(deck) > 0 {
		r.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
	}
	return deck
}

// stormDo runs one operation of a kind; false when it cannot run now.
func (r *run) stormDo(kind string) (bool, error) {
	st := r.st
	maxMembers := r.cfg.Members + 3
	switch kind {
	case "join", "join-reused", "join-leave":
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(r.live()) >= maxMembers {
			return false, nil
		}
		name := r.newName()
		reused := kind == "join-reused" || kind == "join-leave" && r.rng.IntN(2) == 0
		if reused {
			var free []string
			for _, n := range st.departed {
				if !slices.ContainsFunc(r.members, func(p *proc) bool { return p.name == n }) {
					free = append(free, n)
				}
			}
			if len(free) == 0 {
				if kind == "join-reused" {
					r.next-- // name unused
					return false, nil
				}
			} else {
				r.next--
				name = free[r.rng.IntN(len(free))]
				st.departed = slices.DeleteFunc(st.departed, func(n string) bool { return n == name })
			}
		}
		p, err := r.startWorker(name)
		if err != nil {
			return false, err
		}
		r.op(kind, p.base)
		if kind == "join-leave" {
			st.joiners.Add(1)
			go r.leaveAfterJoin(p)
		}
		return true, nil
	case "leave-leader", "leave-member", "kill9":
		leader, _ := r.mapLeader()
		st.mu.Lock()
		defer st.mu.Unlock()
		var pool []*proc
		for _, p := range r.live() {
			if kind == "leave-leader" && p.name == leader || kind == "leave-member" && p.name != leader || kind == "kill9" {
				pool = append(pool, p)
			}
		}
		if len(pool) == 0 || kind != "leave-leader" && len(r.live()) <= 2 {
			return false, nil
		}
		p := pool[r.rng.IntN(len(pool))]
		note := ""
		if p.stopped {
			note = " (stopped: acts on SIGCONT)"
		}
		if p.name == leader {
			note += " (the leader)"
		}
		r.op(kind, p.base+note)
		p.leaving = true
		st.departed = append(st.departed, p.name)
		if kind == "kill9" {
			p.signal(syscall.SIGKILL)
		} else {
			p.signal(syscall.SIGTERM)
		}
		return true, nil
	case "app-deaf":
		// A sidecar member's app stops reading rinkd's await streams
		// (SIGUSR1) but acts on: by its grants' validity alone; it hears
		// again (SIGUSR2) after a while.
		st.mu.Lock()
		defer st.mu.Unlock()
		var pool []*proc
		for _, p := range r.live() {
			select {
			case <-p.joined: // (its signal handler is set up)
				if !p.deaf {
					pool = append(pool, p)
				}
			default:
			}
		}
		if len(pool) == 0 {
			return false, nil
		}
		p := pool[r.rng.IntN(len(pool))]
		d := r.randDur(r.cfg.TTL/4, 2*r.cfg.TTL)
		r.op(kind, fmt.Sprintf("%s for %v", p.base, d.Round(time.Millisecond)))
		p.deaf = true
		p.signal(syscall.SIGUSR1)
		r.later(d, func() {
			st.mu.Lock()
			p.deaf = false
			p.signal(syscall.SIGUSR2)
			st.mu.Unlock()
		})
		return true, nil
	case "partition", "sigstop":
		st.mu.Lock()
		defer st.mu.Unlock()
		var pool []*proc
		for _, p := range r.live() {
			if kind == "partition" || !p.stopped {
				pool = append(pool, p)
			}
		}
		if len(pool) == 0 {
			return false, nil
		}
		p := pool[r.rng.IntN(len(pool))]
		d := r.randDur(r.cfg.TTL/4, 2*r.cfg.TTL)
		r.op(kind, fmt.Sprintf("%s for %v", p.base, d.Round(time.Millisecond)))
		if kind == "partition" {
			r.cut(p)
			r.later(d, func() { st.mu.Lock(); r.uncut(p); st.mu.Unlock() })
		} else {
			p.stopped = true
			p.signal(syscall.SIGSTOP)
			r.later(d, func() {
				st.mu.Lock()
				p.stopped = false
				p.signal(syscall.SIGCONT)
				st.mu.Unlock()
			})
		}
		return true, nil
	case "cut-all":
		st.mu.Lock()
		defer st.mu.Unlock()
		pool := slices.Clone(r.members)
		if len(pool) == 0 {
			return false, nil
		}
		d := r.cfg.TTL + r.randDur(200*time.Millisecond, 1500*time.Millisecond)
		r.op(kind, fmt.Sprintf("%d members for %v", len(pool), d.Round(time.Millisecond)))
		for _, p := range pool {
			r.cut(p)
		}
		r.later(d, func() {
			st.mu.Lock()
			for _, p := range pool {
				r.uncut(p)
			}
			st.mu.Unlock()
		})
		return true, nil
	case "etcd-kill":
		st.mu.Lock()
		defer st.mu.Unlock()
		if slices.Contains(st.etcdUp, false) {
			return false, nil
		}
		i := r.rng.IntN(len(r.nodes))
		lead := ""
		if i == r.etcdLeader() {
			lead = " (the etcd leader)"
		}
		d := r.randDur(r.cfg.TTL/2, 2*r.cfg.TTL)
		r.op(kind, fmt.Sprintf("%s%s, restart after %v", r.nodes[i].Name, lead, d.Round(time.Millisecond)))
		r.etcd[i].signal(syscall.SIGKILL)
		r.etcd[i].wait(10 * time.Second)
		st.etcdUp[i] = false
		r.later(d, func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.stopping {
				return
			}
			n := r.nodes[i]
			n.State = "existing"
			if p, err := r.start("etcd", n.Name, n); err != nil {
				st.findings = append(st.findings, fmt.Sprintf("restarting %s: %v", n.Name, err))
			} else {
				r.etcd[i] = p
				st.etcdUp[i] = true
				r.logf("   %s restarted", n.Name)
			}
		})
		return true, nil
	case "map-reput", "map-rewrite":
		return r.mapOp(kind)
	case "map-delete", "floor-delete":
		key := "rink/chaos/map"
		if kind == "floor-delete" {
			key = "rink/chaos/floor"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := r.admin.Delete(ctx, key)
		st.mu.Lock()
		defer st.mu.Unlock()
		if err != nil {
			r.op(kind, "failed: "+err.Error())
		} else {
			r.op(kind, fmt.Sprintf("%s (%d deleted, revision %d)", key, resp.Deleted, resp.Header.Revision))
		}
		return true, nil
	case "stray-member-empty", "stray-member-space", "stray-member-slash", "stray-garbage", "stray-election", "stray-member-leaseless":
		k := strayKeys[kind]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := r.admin.Put(ctx, "rink/chaos/"+k.suffix, k.value)
		st.mu.Lock()
		defer st.mu.Unlock()
		note := ""
		if err != nil {
			note = " failed: " + err.Error()
		}
		r.op(kind, fmt.Sprintf("%q = %q%s", "rink/chaos/"+k.suffix, k.value, note))
		return true, nil
	case "member-key-delete":
		st.mu.Lock()
		var names []string
		for _, p := range r.live() {
			names = append(names, p.name)
		}
		st.mu.Unlock()
		if len(names) == 0 {
			return false, nil
		}
		name := names[r.rng.IntN(len(names))]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := r.admin.Delete(ctx, "rink/chaos/members/"+name)
		st.mu.Lock()
		defer st.mu.Unlock()
		if err != nil {
			r.op(kind, name+" failed: "+err.Error())
		} else {
			r.op(kind, fmt.Sprintf("%s (%d deleted)", name, resp.Deleted))
		}
		return true, nil
	case "member-key-delete-cut":
		return r.memberKeyDeleteCut()
	case "same-name-replace":
		return r.sameNameReplace()
	case "stranger-member":
		return r.strangerMember()
	case "acks-delete":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := r.admin.Delete(ctx, "rink/chaos/acks/", clientv3.WithPrefix())
		st.mu.Lock()
		defer st.mu.Unlock()
		if err != nil {
			r.op(kind, "rink/chaos/acks/ failed: "+err.Error())
		} else {
			r.op(kind, fmt.Sprintf("rink/chaos/acks/ (%d deleted, revision %d)", resp.Deleted, resp.Header.Revision))
		}
		return true, nil
	case "zone-loss":
		return r.zoneLoss()
	case "election-delete", "member-keys-delete", "tail-delete":
		return r.keyOpDo(kind)
	case "snapshot-save":
		return true, r.snapshotSave()
	case "snapshot-restore":
		st.mu.Lock()
		ok := r.cfg.Restore && st.snapshot != "" && !slices.Contains(st.etcdUp, false)
		st.mu.Unlock()
		if !ok {
			return false, nil
		}
		return true, r.snapshotRestore()
	}
	return false, fmt.Errorf("unknown storm operation %q", kind)
}

// leaveAfterJoin sends SIGTERM to a newcomer the moment its rink.New
// returns (or at the heal, if it has not by then).
func (r *run) leaveAfterJoin(p *proc) {
	defer r.st.joiners.Done()
	why := "New returned"
	select {
	case <-p.joined:
	case <-p.done:
		return
	case <-r.st.calm:
		why = "the storm ended before New returned"
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if p.leaving {
		return
	}
	p.leaving = true
	r.st.departed = append(r.st.departed, p.name)
	p.signal(syscall.SIGTERM)
	r.op("leave-after-join", fmt.Sprintf("%s (%s)", p.base, why))
}

// cut pauses a member's proxies; cuts nest. The caller holds st.mu.
func (r *run) cut(p *proc) {
	if p.cut == 0 {
		for _, x := range p.proxy {
			x.PauseTx()
			x.PauseRx()
		}
	}
	p.cut++
}

func (r *run) uncut(p *proc) {
	if p.cut--; p.cut == 0 {
		for _, x := range p.proxy {
			x.UnpauseTx()
			x.UnpauseRx()
		}
	}
}

// mapLeader reads the leader named in the rank map.
func (r *run) mapLeader() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := r.admin.Get(ctx, "rink/chaos/.map") // the whole map (protocol 3)
	if err == nil && len(resp.Kvs) == 0 {
		resp, err = r.admin.Get(ctx, "rink/chaos/map")
	}
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	var m struct{ Leader string }
	err = json.Unmarshal(resp.Kvs[0].Value, &m)
	return m.Leader, err
}

// mapOp puts the map back unchanged ("map-reput"), or with the same
// version and another table ("map-rewrite": two members' slots swapped, or
// every slot given to the next member), guarded by the map's revision so
// that it never puts back an older map than the leader wrote meanwhile.
func (r *run) mapOp(kind string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.admin.Get(ctx, "rink/chaos/map")
	if err != nil || len(resp.Kvs) == 0 {
		return false, nil
	}
	kv := resp.Kvs[0]
	value, note := kv.Value, "unchanged"
	if kind == "map-rewrite" {
		// From protocol 3 the map key holds a change record: rewrite the
		// whole map beside it (.map) into the map key, as an operator
		// would.
		whole := kv.Value
		if w, err := r.admin.Get(ctx, "rink/chaos/.map"); err == nil && len(w.Kvs) > 0 && w.Kvs[0].ModRevision == kv.ModRevision {
			whole = w.Kvs[0].Value
		}
		var m map[string]json.RawMessage
		var members []string
		var table []int
		if json.Unmarshal(whole, &m) != nil || json.Unmarshal(m["members"], &members) != nil || json.Unmarshal(m["table"], &table) != nil || len(members) < 2 {
			return false, nil
		}
		if r.rng.IntN(2) == 0 {
			i := r.rng.IntN(len(members))
			j := (i + 1 + r.rng.IntN(len(members)-1)) % len(members)
			for s, o := range table {
				switch o {
				case i:
					table[s] = j
				case j:
					table[s] = i
				}
			}
			note = fmt.Sprintf("slots of %s and %s swapped", members[i], members[j])
		} else {
			for s, o := range table {
				table[s] = (o + 1) % len(members)
			}
			note = "every slot given to the next member (rotated)"
		}
		m["table"], _ = json.Marshal(table)
		value, _ = json.Marshal(m)
	}
	var version struct{ Version int64 }
	_ = json.Unmarshal(kv.Value, &version)
	tresp, err := r.admin.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("rink/chaos/map"), "=", kv.ModRevision)).
		Then(clientv3.OpPut("rink/chaos/map", string(value))).Commit()
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	switch {
	case err != nil:
		note += "; failed: " + err.Error()
	case !tresp.Succeeded:
		note += "; not written: the leader wrote a map meanwhile"
	default:
		note += fmt.Sprintf("; written at revision %d", tresp.Header.Revision)
	}
	r.op(kind, fmt.Sprintf("version %d (revision %d), %s", version.Version, kv.ModRevision, note))
	return true, nil
}

// snapshotSave saves a snapshot of etcd through the client.
func (r *run) snapshotSave() error {
	r.st.mu.Lock()
	path := filepath.Join(r.cfg.Dir, fmt.Sprintf("snapshot-%d.db", len(r.faults)))
	r.st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	note := ""
	rev := int64(0)
	if resp, err := r.admin.Get(ctx, "chaos/ready"); err == nil {
		rev = resp.Header.Revision
	}
	rc, err := r.admin.Snapshot(ctx)
	if err == nil {
		var f *os.File
		if f, err = os.Create(path); err == nil {
			_, err = io.Copy(f, rc)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		rc.Close()
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if err != nil {
		note = "failed: " + err.Error()
	} else {
		r.st.snapshot = path
		note = fmt.Sprintf("%s (revision about %d)", filepath.Base(path), rev)
	}
	r.op("snapshot-save", note)
	return nil
}

// snapshotRestore stops the etcd cluster, restores every node from the
// newest snapshot with its revisions bumped by a million and marked
// compacted, and starts the cluster again. A snapshot is restored once.
func (r *run) snapshotRestore() error {
	st := r.st
	st.mu.Lock()
	snap := st.snapshot
	st.snapshot = ""
	st.restores++
	k := st.restores
	for i := range r.etcd {
		st.etcdUp[i] = false
	}
	r.op("snapshot-restore", fmt.Sprintf("%s: stopping etcd", filepath.Base(snap)))
	st.mu.Unlock()
	// Stopped by SIGKILL: their data is thrown away, and a graceful stop
	// waits for the members' watch streams.
	for _, e := range r.etcd {
		e.signal(syscall.SIGKILL)
	}
	for _, e := range r.etcd {
		e.wait(10 * time.Second)
	}
	for i := range r.nodes {
		n := &r.nodes[i]
		dir := filepath.Join(r.cfg.Dir, fmt.Sprintf("%s-restore%d", n.Name, k))
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snap, Name: n.Name, OutputDataDir: dir, PeerURLs: []string{n.Peer},
			InitialCluster: n.Cluster, InitialClusterToken: "etcd-cluster",
			RevisionBump: 1_000_000, MarkCompacted: true,
		})
		if err != nil {
			return fmt.Errorf("restoring %s: %w", n.Name, err)
		}
		n.Dir, n.State = dir, "new"
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, n := range r.nodes {
		p, err := r.start("etcd", n.Name, n)
		if err != nil {
			return err
		}
		r.etcd[i] = p
		st.etcdUp[i] = true
	}
	r.logf("   etcd restarted from %s, revisions bumped by 1,000,000", filepath.Base(snap))
	return nil
}

// healAll undoes every fault: pending undos run now, newcomers told to
// leave right after joining leave, members told to leave are waited for
// (a SIGKILL after 20 s, reported), etcd answers on every node, and
// newcomers bring the rink back to cfg.Members.
func (r *run) healAll() error {
	st := r.st
	st.mu.Lock()
	close(st.calm)
	st.deck = nil // each epoch starts a fresh deck
	heals := st.heals
	st.heals = nil
	st.mu.Unlock()
	for _, h := range heals {
		h.timer.Stop()
		h.run()
	}
	st.joiners.Wait()
	st.mu.Lock()
	var leaving []*proc
	for _, p := range r.members {
		if p.leaving {
			leaving = append(leaving, p)
		}
	}
	st.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range leaving {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.wait(20 * time.Second) {
				return
			}
			st.mu.Lock()
			st.findings = append(st.findings, fmt.Sprintf("%s did not exit within 20 s of being told to leave (killed); stderr ends: %s",
				p.base, tail(filepath.Join(r.cfg.Dir, p.base+".stderr"))))
			st.mu.Unlock()
			p.signal(syscall.SIGKILL)
			p.wait(5 * time.Second)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range r.nodes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := r.admin.Status(ctx, strings.TrimPrefix(n.Client, "http://"))
			if err == nil {
				_, err = r.admin.Put(ctx, "chaos/ready", "1")
			}
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd did not come back after the storm: %s: %w", n.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var started []string
	for len(r.live()) < r.cfg.Members {
		p, err := r.startWorker(r.newName())
		if err != nil {
			return err
		}
		started = append(started, p.base)
	}
	// With zones, every zone gets a live member again (newcomers go to
	// the zones with the fewest: see zoneFor).
	for z := range r.cfg.Zones {
		if r.zoneLive(z) == 0 {
			name := r.newName()
			st.zoneOf[name] = z
			p, err := r.startWorker(name)
			if err != nil {
				return err
			}
			started = append(started, p.base)
		}
	}
	cut, stopped := 0, 0
	for _, p := range r.members {
		if p.cut > 0 {
			cut++
		}
		if p.stopped {
			stopped++
		}
	}
	if cut > 0 || stopped > 0 || slices.Contains(st.etcdUp, false) {
		return fmt.Errorf("heal left %d members cut off, %d stopped, etcd up %v", cut, stopped, st.etcdUp)
	}
	var names []string
	for _, p := range r.members {
		names = append(names, p.base)
	}
	r.op("heal", fmt.Sprintf("members %s (new: %s)", strings.Join(names, " "), strings.Join(started, " ")))
	return nil
}

// dumpState writes every key of the rink to path, and returns a summary:
// the map's version, leader, members and waiting, the floor, and the
// member and election keys.
func (r *run) dumpState(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.admin.Get(ctx, "rink/chaos/", clientv3.WithPrefix())
	if err != nil {
		return "reading the rink's keys: " + err.Error()
	}
	var full, short strings.Builder
	fmt.Fprintf(&full, "revision %d\n", resp.Header.Revision)
	var members, elect []string
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), "rink/chaos/")
		fmt.Fprintf(&full, "%q create %d mod %d lease %x: %q\n", key, kv.CreateRevision, kv.ModRevision, kv.Lease, kv.Value)
		switch {
		case key == "map":
			var m struct {
				Version int64
				Leader  string
				Members []string
				Waiting []struct{ Name string }
			}
			_ = json.Unmarshal(kv.Value, &m)
			var waiting []string
			for _, w := range m.Waiting {
				waiting = append(waiting, w.Name)
			}
			fmt.Fprintf(&short, "map version %d (lineage %d, seq %d, mod %d) leader %q members %q waiting %q; ",
				m.Version, kv.CreateRevision, kv.Version, kv.ModRevision, m.Leader, m.Members, waiting)
		case key == "floor":
			fmt.Fprintf(&short, "floor %s; ", kv.Value)
		case strings.HasPrefix(key, "members/"):
			members = append(members, fmt.Sprintf("%q", strings.TrimPrefix(key, "members/")))
		case strings.HasPrefix(key, "election/"):
			elect = append(elect, fmt.Sprintf("%q@%d", kv.Value, kv.CreateRevision))
		}
	}
	if !strings.Contains(short.String(), "map version") {
		short.WriteString("no map; ")
	}
	fmt.Fprintf(&short, "member keys %s; election keys (value@create) %s", strings.Join(members, " "), strings.Join(elect, " "))
	_ = os.WriteFile(path, []byte(full.String()), 0o644)
	return short.String()
}

// Text renders the summary: operations by kind, the checks' counts, and
// each violation with the operations just before it.
func (s StormSummary) Text() string {
	var b strings.Builder
	at := func(mono int64) string { return secs(s.Began, mono) }
	count := map[string]int{}
	var kinds []string
	for _, f := range s.Ops {
		if count[f.Kind] == 0 {
			kinds = append(kinds, f.Kind)
		}
		count[f.Kind]++
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "operations: %d, member processes: %d\n", len(s.Ops), s.Procs)
	if s.Sidecar {
		b.WriteString("members: rinkd sidecars, each with its app (an HTTP/JSON client) in its process; the records are the apps'\n")
	}
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-22s %5d\n", k, count[k])
	}
	fmt.Fprintf(&b, "acquisitions: %d (%d recorded after a newer one); actions: %d\n", s.Report.Acquisitions, s.Report.Late, s.Report.Actions)
	fmt.Fprintf(&b, "safety violations: %d\n", len(s.Report.Violations))
	if s.replicaMode() {
		h := s.Holders
		fmt.Fprintf(&b, "replicas %d, zones %d: secondary acquisitions: %d; secondary actions: %d; holdings that acted: %d\n",
			h.Replicas, s.Zones, h.SecondaryAcquisitions, h.SecondaryActions, h.Windows)
		fmt.Fprintf(&b, "holders violations (more than %d members acting on a role at once): %d\n", h.Replicas, len(h.Violations))
	}
	for i, c := range s.Checkpoints {
		if len(c.Liveness.Violations) == 0 {
			role, worst := c.Liveness.Worst()
			fmt.Fprintf(&b, "liveness %d (heal at %s): every role held %v after the heal; slowest: %s, held %v after the heal\n",
				i+1, at(c.Healed), s.Bound, role, worst.Round(time.Millisecond))
		} else {
			fmt.Fprintf(&b, "liveness %d (heal at %s): FAILED: %d roles not held %v after the heal (held: %d)\n    etcd at the deadline: %s\n",
				i+1, at(c.Healed), len(c.Liveness.Violations), s.Bound, len(c.Liveness.Recovered), c.State)
		}
		if !s.replicaMode() {
			continue
		}
		want := max(min(s.Holders.Replicas-1, c.Live-1), 0)
		zones := ""
		if s.Zones > 0 {
			zones = fmt.Sprintf("; holders in distinct zones (as many as they can): %d of %d roles", c.ZonesSpread, len(c.Secondaries.Holders))
		}
		if len(c.Secondaries.Violations) == 0 {
			role, worst := c.Secondaries.Worst()
			fmt.Fprintf(&b, "secondaries %d: every role had its %d secondaries %v after the heal (%d members live); slowest: %s, %v after the heal%s\n",
				i+1, want, s.Bound, c.Live, role, worst.Round(time.Millisecond), zones)
		} else {
			fmt.Fprintf(&b, "secondaries %d: FAILED: %d roles without their %d secondaries %v after the heal (%d members live)%s\n",
				i+1, len(c.Secondaries.Violations), want, s.Bound, c.Live, zones)
		}
	}
	for _, f := range s.Findings {
		fmt.Fprintf(&b, "finding: %s\n", f)
	}
	// Each violation in full, up to a few per kind, with what came before.
	shown := map[string]int{}
	for _, v := range s.Violations() {
		shown[v.Kind]++
		if shown[v.Kind] > 5 {
			continue
		}
		fmt.Fprintf(&b, "\nVIOLATION %s %s\n  operations before %s:\n", v.Kind, v, at(v.Mono))
		for _, f := range s.before(v.Mono, 3*time.Second, 6) {
			fmt.Fprintf(&b, "    %9s  %-22s %s\n", at(f.Mono), f.Kind, f.Target)
		}
	}
	for k, n := range shown {
		if n > 5 {
			fmt.Fprintf(&b, "\n... and %d more %s violations\n", n-5, k)
		}
	}
	for i, c := range s.Checkpoints {
		if len(c.Liveness.Violations) > 0 || len(c.Secondaries.Violations) > 0 {
			fmt.Fprintf(&b, "\n  the last operations before heal %d:\n", i+1)
			for _, f := range s.before(c.Healed, time.Hour, 8) {
				fmt.Fprintf(&b, "    %9s  %-22s %s\n", at(f.Mono), f.Kind, f.Target)
			}
		}
	}
	return b.String()
}

// before returns the operations in the window d before mono (and the one
// right after it, which may be the cause of a record written just
// before it), at most n of them.
func (s StormSummary) before(mono int64, d time.Duration, n int) []Fault {
	var out []Fault
	for _, f := range s.Ops {
		if f.Mono >= mono-int64(d) && f.Mono <= mono+int64(100*time.Millisecond) {
			out = append(out, f)
		}
	}
	if len(out) == 0 { // nothing in the window: the last one before it
		for _, f := range s.Ops {
			if f.Mono <= mono {
				out = []Fault{f}
			}
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}
