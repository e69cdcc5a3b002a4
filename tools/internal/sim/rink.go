package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/simhook"
)

// Config shapes the histories Run plays.
type Config struct {
	Members  int           // members at the start (3 to 50)
	Slots    int           // the rink's slots
	TTL      time.Duration // the members' session TTL (whole seconds)
	Delay    time.Duration // the rebalance delay
	Faults   time.Duration // how long faults are drawn for
	Quiet    time.Duration // then how long without faults before liveness is checked
	Trace    bool          // keep the readable trace (Result.Trace)
	Plant    string        // a bug planted in every member (see simhook.Plants)
	Kinds    []string      // the fault kinds to draw from (nil: drawn per seed, see Run)
	Swarm    []string      // the kinds a seed draws its own from (nil: FaultKinds)
	MaxSteps int           // stop a history after this many events (0: no bound)
	// Replicas is the members' replicas per slot (rink.WithReplicas; 0
	// counts as 1, which plays the histories of a rink without replicas).
	Replicas int
	// Zones is how many zones the members sit in (rink.WithZone): member
	// i (the process called "m<i>", and every restart under that name)
	// is in zone "z<i mod Zones>". 0: no zones, and no zone-loss fault.
	Zones int
	// KeyFaults: a seed also draws KeyFaultKinds, an operator's deletions
	// of live members' keys, from a stream of its own (see KeyFaultKinds);
	// false plays every seed as before they were added.
	KeyFaults bool
	// Drift bounds the members' clock drift: each process's clock (its
	// Now and Clock, and so its timers) runs at a rate 1+e of the world's
	// time, the etcd leader's, from the moment it starts, with |e| at most
	// Drift, drawn from a stream of its own (see drawDrift). 0: every
	// clock is the world's, and every seed plays as before drift was
	// added. The fence margin (TTL/8) covers a clock slow by up to 1/8
	// against etcd's, and (for the quiet times counted in TTLs) two
	// members' clocks whose rates differ by less than a factor 7/8, which
	// |e| < 1/15 keeps; DriftBound is what the tests keep within.
	Drift float64
	// Drain is the members' drain timeout (rink.WithDrainTimeout), and
	// with it functions run on their holdings and outlast them (see
	// drain.go). 0: no drain, and no functions, as before they existed.
	Drain time.Duration
	// Warmup is the members' warm-up (rink.WithWarmup), and with it they
	// warm up what is announced to them, taking a while (see warmup.go).
	// 0: none, as before it existed.
	Warmup time.Duration
	// Load: the members report their load and balance by it, and do work
	// on their holdings (see load.go); the end checks the balance. false:
	// no load, as before it existed.
	Load bool
	// Capacities: member i (every process under the name "m<i>") has
	// capacity capacityOf(i) (rink.WithCapacity; see capacity.go). false:
	// every member's is 1, as before capacities were played.
	Capacities bool
	// Knobs: the members' bounds on what they remember are lowered, as
	// drawn per history from a stream of its own (see knobs.go). false:
	// production's, as before knobs existed.
	Knobs bool
	// Observer: an Observer follows the rink, and each State it
	// publishes is checked against the map key's history (see
	// observer.go). false: none, as before it was played.
	Observer bool
}

// DriftBound is the drift the tests play within the fence margin: 2%,
// far beyond real clocks' (well below 0.01%), and well within what the
// margin, TTL/8, and the quiet times measured in TTLs cover.
const DriftBound = 0.02

// replicas is the replicas per slot that cfg gives the members.
func (cfg Config) replicas() int { return max(1, cfg.Replicas) }

// DefaultConfig is a small rink with short timings.
func DefaultConfig() Config {
	return Config{Members: 5, Slots: 16, TTL: 2 * time.Second, Delay: 500 * time.Millisecond,
		Faults: 20 * time.Second, Quiet: 12 * time.Second, Replicas: 1}
}

// Result is what one history did.
type Result struct {
	Seed        uint64
	Events      int            // world events run
	MemberSteps int            // inputs the members' cores handled
	Ops         map[string]int // faults and operations, by kind
	Kinds       []string       // the fault kinds it drew from
	Violation   string         // the first safety or liveness violation ("": none)
	Promotions  int            // slots the maps promoted to a secondary, each checked (see checkPromotions)
	Lingered    int            // functions still running when their holdings ended (with Config.Drain)
	EarlyMoves  int            // announced moves made before the warm-up time, each checked (with Config.Warmup)
	// With Config.Load, at the end: the most loaded ranked member's true
	// load over the mean, and the hottest slot's (see checkLoad).
	Imbalance, ImbalanceBound float64
	LoadUnchecked             bool // a load key was lost, or absurd work recorded: the balance is not checked (see checkLoad)
	// StrayElections counts the election keys at the end that no campaign
	// made (bound to no lease, or not named by the lease they are bound
	// to): members delete them (see election-unleased).
	StrayElections int
	// FencesChecked counts the fences of rejoined members that
	// checkFence looked at (see rest.go).
	FencesChecked int
	// Observed counts the States the observer published, each checked
	// (with Config.Observer; see checkObserved).
	Observed int
	At       time.Duration // when it was found
	Trace    string        // the history, line by line (with Config.Trace)
}

// simMember is one member process of a history.
type simMember struct {
	name  string
	idx   int    // the i of its name, "m<i>"
	zone  string // its zone ("": none)
	c     *Client
	m     simhook.Member
	alive bool
	// doomed: a process that a duplicate fault let a replacement in
	// beside, stopped soon; no other fault picks it.
	doomed bool
	held   map[int]bool  // the slots it holds, as its events say
	secs   map[int]bool  // the slots it holds as a secondary, as its events say
	work   map[int]*work // the functions running on its holdings (see drain.go)
	// warming: what it was asked to warm up, with Config.Warmup (nil
	// without: see warmup.go).
	warming *warming
	env     *memberEnv
}

// history is one run.
type history struct {
	cfg     Config
	w       *World
	members []*simMember
	next    int                // names handed out
	top     map[int]int64      // the highest token each slot was held with
	holder  map[int]*simMember // each slot's holder, as the members' events say
	res     *Result
	rng     *rand.Rand
	fault   []string  // the fault kinds this seed draws (swarm testing)
	maps    [][]byte  // whole maps seen at fault times, oldest first (for map-old)
	floors  [][]byte  // floors seen at fault times, oldest first (for floor-old)
	rawMaps [][]byte  // the map key's values seen at fault times, oldest first (for map-old-value)
	snap    *Snapshot // a snapshot saved and not restored yet (see restore)
	// unseen: a restore-unseen under way (see restoreunseen.go).
	unseen *unseenRestore
	// startsFrom: no process starts before it (one TTL after a restore).
	startsFrom time.Duration
	// zoneDown: no process of a zone starts before its time here (see
	// zone-loss; looked up by zone, never ranged over).
	zoneDown map[string]time.Duration
	// drift draws each process's clock rate, with Config.Drift (nil
	// without: see drawDrift).
	drift *rand.Rand
	// The map as last read, for the check of promotions (see trackMap):
	// its mod revision, the map (nil: none, or not one of replicas), and
	// whether a fault ran since.
	mapRev  int64
	lastMap *trackedMap
	faulted bool
	// left: the names of the processes that left gracefully (see
	// checkPromotions; looked up, never ranged over).
	left map[string]bool
	// drain draws the functions run on holdings, with Config.Drain (nil
	// without: see drain.go); lingering: by slot, the functions that still
	// ran when their holdings ended.
	drain     *rand.Rand
	lingering map[int][]*work
	// load is the work each slot does, with Config.Load (nil without);
	// loadLost: etcd was restored, which may have put back an older load
	// summary (see checkLoad).
	load     *loadModel
	loadLost bool
	// loadAbsurd: an application recorded absurd work (see absurdLoad).
	loadAbsurd bool
	// warm draws how long warm-ups take, with Config.Warmup (nil without:
	// see warmup.go).
	warm          *rand.Rand
	warmUnchecked bool // the map was rewritten by hand under its version: early moves go unchecked
	// roleBook is what the members' role sets told them (see roles.go).
	roleBook *roleBook
	// garbage: map-garbage put a value into the map key, and has not put
	// the map back yet.
	garbage bool
	// knobs are the members' (see knobs.go; zero: production's).
	knobs simhook.Knobs
	// byHand: the put under way is an operator's edit (see editKey).
	byHand bool
	// observer is the history's observer, with Config.Observer (nil
	// without: see observer.go).
	observer *simObserver
}

// FaultKinds lists every fault kind: the first ten are the process's,
// the network's and etcd's; the next eight an operator's hands on the
// rink's keys and on etcd; etcd-errors has etcd fail half the requests
// for a while (see World.FailUntil); the last, zone-loss (every member of
// one zone crashes at once, and comes back later), is drawn only in a
// history with zones (Config.Zones), and without them draws nothing. An operator's deletions of live
// members' other keys are in KeyFaultKinds, drawn only with
// Config.KeyFaults. Three more of an operator's writes are played only
// when named (Config.Kinds), so that every seed draws and plays as before
// them: map-unleased (the whole map written back without the leases it
// records, as an earlier build or a script that knows its fields writes
// it: it opens every member's lease gate), map-old-value (the map key's
// value of an earlier revision put back as it was, often a change record
// whose base is not the map before it) and floor-old (a floor of an
// earlier lineage put back). So is pause-joining: a restart whose new
// process pauses (a long GC, a suspended host), for between half a TTL
// and two, as the answer to its join's lease grant reaches it: past 7/8
// of a TTL its join's transaction is answered after the deadline the
// lease allows (core.ErrJoinSlow), past the TTL the lease is gone. And
// load-absurd: a member's application records absurd figures of work for
// a while (rink.AddLoad of huge amounts: a counter that overflowed, units
// mixed up), whose sums and rates overflow (see absurdLoad): its load
// summary must still decode (see checkDecoders). And key-edit: any of the
// rink's keys edited by hand, its value damaged (see keyedit.go). And
// restore-unseen, a restore of etcd from a snapshot while the members that
// saw the history since are cut off, stopped or lost, and those that come
// back into it saw none of it (see restoreunseen.go). And observer-cut,
// the connection of the observer (Config.Observer) reset and cut off for
// a while (see observer.go), and whole-map-delete, the whole map beside
// the map key's change record (".map") deleted by an operator.
var FaultKinds = []string{"crash", "restart", "partition", "leave", "join", "delete-key", "break-watch", "etcd-slow", "pause", "compact",
	"map-reput", "map-rewrite", "map-old", "map-delete", "floor-delete", "acks-delete", "stray-key", "restore",
	"etcd-errors", "zone-loss"}

// NamedKinds are the fault kinds drawn only when named in Config.Kinds.
var NamedKinds = []string{"floor-old", "map-unleased", "map-old-value", "key-edit", "map-garbage", "pause-joining", "load-absurd", "election-unleased", "restore-unseen", "restore-unseen-lag", "observer-cut", "whole-map-delete"}

// KnownKind reports whether k names a fault kind.
func KnownKind(k string) bool {
	return slices.Contains(FaultKinds, k) || slices.Contains(NamedKinds, k) || slices.Contains(KeyFaultKinds, k)
}

// zonal reports whether fault kind k needs zones.
func zonal(k string) bool { return k == "zone-loss" }

// strayKeys are the odd keys stray-key puts under the rink's prefix,
// without a lease, as rink-chaos's storm does: members ignore them all,
// and delete the stray election key and the leaseless member key.
var strayKeys = [][2]string{
	{"members/", "{}"},     // a member key with an empty name
	{"members/a b", "{}"},  // a name New would refuse
	{"members/x/y", "{}"},  // a name with a slash
	{"garbage", "garbage"}, // a key rink does not know
	{"election/zz-garbage", "\xff\x00not a member name"}, // an election key of no lease
	{"members/zz", "{}"},             // a member key of no lease
	{".tail", "garbage"},             // a tail (see candidacyHint) that names no election key
	{".tail", "rink/sim/election/1"}, // one that names a key put now, or none
}

// Run plays the history of seed: members join, faults are drawn for
// cfg.Faults, then none for cfg.Quiet; safety is checked after every event,
// liveness at the end.
func Run(seed uint64, cfg Config) Result {
	h := newHistory(seed, cfg)
	w := h.w
	// Swarm testing: each seed draws the fault kinds it uses (unless
	// told: see Shrink).
	swarm := cfg.Swarm
	if swarm == nil {
		swarm = FaultKinds
	}
	for _, k := range swarm {
		if zonal(k) && cfg.Zones == 0 {
			continue // (drawing nothing: the other kinds' draws stay as they were)
		}
		if h.rng.IntN(3) > 0 {
			h.fault = append(h.fault, k)
		}
	}
	if cfg.KeyFaults {
		h.fault = drawKeyKinds(seed, h.fault) // (not from h.rng: see KeyFaultKinds)
	}
	if cfg.Kinds != nil {
		h.fault = cfg.Kinds // (drawn all the same: the kinds drawn give the same history)
	}
	h.res.Kinds = h.fault
	var replicas string // (none in a rink without replicas or zones: its trace stays as it was)
	if cfg.replicas() > 1 || cfg.Zones > 0 {
		replicas = fmt.Sprintf(", %d replicas, %d zones", cfg.replicas(), cfg.Zones)
	}
	w.Tracef("seed %d: %d members%s, faults %s", seed, cfg.Members, replicas, strings.Join(h.fault, ","))
	if cfg.Knobs {
		w.Tracef("knobs: %+v", h.knobs)
	}
	for range cfg.Members {
		h.spawn(w.Between(0, 200*time.Millisecond))
	}
	if len(h.fault) > 0 {
		h.scheduleFault()
	}
	h.startLoad()
	end := cfg.Faults + cfg.Quiet
	track := cfg.replicas() > 1 // (reads the maps written: see trackMap)
	play := func(until time.Duration) {
		for w.queue.Len() > 0 && w.queue[0].at <= until && h.res.Violation == "" {
			w.Step()
			if track {
				h.trackMap()
			}
			h.res.Events++
			if cfg.MaxSteps > 0 && h.res.Events >= cfg.MaxSteps {
				break
			}
		}
		if h.res.Violation == "" {
			w.advance(until)
		}
	}
	play(end)
	if h.res.Violation == "" {
		if h.live(true, cfg.Quiet) {
			// A move planned at the end (members report their load, and
			// the leader may run a load round at any time) leaves a slot
			// between holders for a moment: a TTL more, and it must be
			// done.
			play(end + cfg.TTL)
			if h.res.Violation == "" {
				h.live(false, cfg.Quiet+cfg.TTL)
			}
		}
		h.checkLoad()
	}
	for _, m := range h.members {
		h.res.MemberSteps += m.m.Steps()
	}
	if h.observer != nil {
		h.res.Observed = h.observer.seen
	}
	for _, kv := range h.rangeKVs("rink/sim/election/", []byte("rink/sim/election0")) {
		if kv.Lease == 0 || string(kv.Key) != "rink/sim/election/"+strconv.FormatInt(kv.Lease, 16) {
			h.res.StrayElections++
		}
	}
	h.res.Trace = w.Trace()
	return *h.res
}

// options are a member's options in a rink of cfg, in zone ("": none).
func (cfg Config) options(zone string) []rink.Option {
	opts := []rink.Option{rink.WithSlots(cfg.Slots), rink.WithSessionTTL(cfg.TTL), rink.WithRebalanceDelay(cfg.Delay),
		rink.WithReplicas(cfg.replicas())}
	if cfg.Drain > 0 {
		opts = append(opts, rink.WithDrainTimeout(cfg.Drain))
	}
	if cfg.Warmup > 0 {
		opts = append(opts, rink.WithWarmup(cfg.Warmup))
	}
	if cfg.Load {
		opts = append(opts, rink.WithImbalanceTolerance(LoadTolerance), rink.WithLoadInterval(LoadInterval), rink.WithLoadWindow(3*LoadInterval))
	}
	if zone != "" {
		opts = append(opts, rink.WithZone(zone))
	}
	return opts
}

// newHistory returns the history of seed before anything happens in it:
// its world, and its checks in place.
func newHistory(seed uint64, cfg Config) *history {
	w := NewWorld(seed, 1)
	w.Quiet = !cfg.Trace
	h := &history{cfg: cfg, w: w, top: map[int]int64{}, holder: map[int]*simMember{}, res: &Result{Seed: seed, Ops: map[string]int{}}, rng: w.Rand(),
		zoneDown: map[string]time.Duration{}, left: map[string]bool{}, roleBook: newRoleBook(cfg.Slots)}
	w.Etcd.OnPut = h.checkDecoders
	// (Each from a stream of its own, never from h.rng.)
	if cfg.Drift != 0 {
		h.drift = rand.New(rand.NewPCG(seed, driftStream)) // (see drawDrift)
	}
	h.drain, h.lingering = newDrain(seed, cfg), map[int][]*work{}
	h.load = newLoad(seed, cfg)
	h.warm = newWarm(seed, cfg)
	h.knobs = drawKnobs(seed, cfg)
	if cfg.Observer {
		h.startObserver(seed)
	}
	return h
}

// spawn starts a new member after d.
func (h *history) spawn(d time.Duration) *simMember {
	i := h.next
	h.next++
	return h.start(i, d)
}

// start starts the process of member i (called "m<i>") after d.
func (h *history) start(i int, d time.Duration) *simMember {
	w := h.w
	name := fmt.Sprintf("m%d", i)
	c := w.NewClient(name)
	env := &memberEnv{w: w, rng: rand.New(rand.NewPCG(h.rng.Uint64(), h.rng.Uint64())), e: h.drawDrift()}
	sm := &simMember{name: name, idx: i, c: c, held: map[int]bool{}, secs: map[int]bool{}, work: map[int]*work{}, env: env}
	if h.cfg.Zones > 0 {
		sm.zone = fmt.Sprintf("z%d", i%h.cfg.Zones)
	}
	var opts []any
	for _, o := range h.cfg.options(sm.zone) {
		opts = append(opts, o)
	}
	if h.cfg.Capacities {
		opts = append(opts, rink.WithCapacity(capacityOf(i)))
	}
	m, err := simhook.NewMember(simhook.Config{
		Rink: "sim", Member: name, Etcd: clientEtcd{c, env}, Env: env, Plant: h.cfg.Plant, Knobs: h.knobs, Load: true /* (as production's: see simhook.Config.Load) */, Warm: h.warmFor(sm), EarlyMoves: h.earlyMoves(sm), LoadRound: h.loadRounds(sm),
		Roles:     h.roleBook.roles,
		Assigned:  func(ctx context.Context, role string) { h.assigned(sm, ctx, role) },
		Revoked:   func(role string) { h.revoked(sm, role) },
		Secondary: func(ctx context.Context, role string) { h.secondary(sm, ctx, role) },
		Options: append(opts,
			rink.WithEvents(func(e rink.Event) {
				h.observe(sm, e)
				if w.Quiet {
					return
				}
				switch e.Kind {
				case rink.EventAcquired:
					w.Tracef("%s: acquired slot %d, token %d", name, e.Slot, e.Token)
				case rink.EventReleased:
					w.Tracef("%s: released slot %d (%v)", name, e.Slot, e.Cause)
				case rink.EventSecondaryAcquired:
					w.Tracef("%s: acquired slot %d as a secondary", name, e.Slot)
				case rink.EventSecondaryReleased:
					w.Tracef("%s: released slot %d as a secondary (%v)", name, e.Slot, e.Cause)
				case rink.EventMapApplied:
					w.Tracef("%s: applied map version %d", name, e.Version)
				case rink.EventLoadReported:
					w.Tracef("%s: reported load %.1f", name, e.Load)
				case rink.EventLoadBalanced:
					w.Tracef("%s: load round: imbalance %.2f, %d slots moved", name, e.Imbalance, e.Moved)
				case rink.EventFenced, rink.EventRejoined:
					w.Tracef("%s: %s", name, e.Kind)
				}
			})),
		Trace: func(format string, args ...any) {
			if !w.Quiet {
				w.Tracef("%s: %s", name, fmt.Sprintf(format, args...))
			}
		},
	})
	if err != nil {
		panic(err) // (the options are the simulator's own)
	}
	sm.m = m
	h.members = append(h.members, sm)
	var begin func()
	begin = func() {
		if w.now < h.startsFrom {
			// The operator's rule after a restore (docs/operations.md): no
			// process joins within a TTL of it. One new to the rink has
			// no history to notice the restore from.
			w.After(h.startsFrom-w.now, begin)
			return
		}
		if until := h.zoneDown[sm.zone]; sm.zone != "" && w.now < until {
			// The member's zone is lost (see zone-loss): its machines
			// start nothing until it is back.
			w.After(until-w.now, begin)
			return
		}
		sm.alive = true
		env.t0 = w.now // (its clock reads the world's time as it starts, and drifts from then on)
		if h.drift != nil {
			w.Tracef("%s: starts, its clock %+.2f%% off the world's rate", name, 100*env.e)
		} else {
			w.Tracef("%s: starts", name)
		}
		_ = m.Start()
	}
	w.After(d, begin)
	return sm
}

// scheduleFault draws the next fault and when it comes.
func (h *history) scheduleFault() {
	w := h.w
	w.After(w.Between(100*time.Millisecond, 3*time.Second), func() {
		if w.now >= h.cfg.Faults {
			return
		}
		h.injectFault(h.fault[h.rng.IntN(len(h.fault))])
		h.scheduleFault()
	})
}

// injectFault does one fault of kind k.
func (h *history) injectFault(k string) {
	w := h.w
	h.faulted = true // (a map it writes is an operator's: see trackMap)
	var live []*simMember
	for _, m := range h.members {
		if m.alive && !m.doomed {
			live = append(live, m)
		}
	}
	h.noteMap()
	h.noteFloor()
	pick := func() *simMember {
		if len(live) == 0 {
			return nil
		}
		return live[h.rng.IntN(len(live))]
	}
	switch k {
	case "crash", "restart", "leave", "pause-joining":
		if len(live) <= 1 {
			return
		}
		m := pick()
		m.alive = false
		if k == "leave" {
			h.leave(m)
		} else {
			m.m.Crash()
		}
		h.forget(m)
		w.Tracef("fault: %s %s", k, m.name)
		if k == "restart" || k == "pause-joining" {
			// The process comes back under its name, as a restarted pod.
			sm := h.start(m.idx, w.Between(0, h.cfg.TTL))
			if k == "pause-joining" {
				// ... and pauses as its lease is granted (see
				// pauseAtGrant).
				sm.env.pauseAtGrant = w.Between(h.cfg.TTL/2, 2*h.cfg.TTL)
			}
		} else if len(live) < h.cfg.Members {
			h.spawn(w.Between(0, 2*h.cfg.TTL))
		}
	case "partition":
		m := pick()
		if m == nil {
			return
		}
		d := w.Between(100*time.Millisecond, 2*h.cfg.TTL)
		w.Tracef("fault: partition %s for %v", m.name, d)
		m.c.Cut(d)
	case "join":
		if len(live) >= 2*h.cfg.Members {
			return
		}
		m := h.spawn(0)
		if h.rng.IntN(3) > 0 {
			w.Tracef("fault: join")
			break
		}
		// A newcomer that leaves gracefully right after it joined (a
		// rolling deploy's pod that is scaled away at once).
		d := w.Between(0, 500*time.Millisecond)
		w.Tracef("fault: join, and leave %v after", d)
		w.After(d, func() {
			if m.alive {
				m.alive = false
				h.leave(m)
				h.forget(m)
			}
		})
	case "break-watch":
		// A watch stream breaks (a proxy or connection reset).
		var ws []*Watch
		for _, id := range slices.Sorted(maps.Keys(w.watched)) {
			if wa := w.watched[id]; !wa.ended {
				ws = append(ws, wa)
			}
		}
		if len(ws) == 0 {
			return
		}
		wa := ws[h.rng.IntN(len(ws))]
		w.Tracef("fault: break a watch of %s", wa.c.Name)
		wa.Break()
	case "etcd-errors":
		// etcd overloaded, or losing its leader: for a while half the
		// requests fail, half of those before they are applied ("too
		// many requests") and half after, their answer a timeout (the
		// request may have been applied: the client cannot tell).
		d := w.Between(500*time.Millisecond, 2*h.cfg.TTL)
		w.Tracef("fault: etcd fails half the requests for %v", d)
		w.FailUntil = max(w.FailUntil, w.now+d)
	case "etcd-slow":
		// The etcd leader is lost: requests and answers wait for a new one.
		d := w.Between(500*time.Millisecond, h.cfg.TTL)
		w.Tracef("fault: etcd slow for %v", d)
		for _, m := range h.members {
			m.c.MinDelay, m.c.MaxDelay = 50*time.Millisecond, 400*time.Millisecond
		}
		w.After(d, func() {
			for _, m := range h.members {
				m.c.MinDelay, m.c.MaxDelay = 100*time.Microsecond, 2*time.Millisecond
			}
		})
	case "pause":
		// The member's process stops (SIGSTOP, a long GC, a suspended
		// host): it handles nothing until it resumes, with its clock on.
		m := pick()
		if m == nil {
			return
		}
		d := w.Between(100*time.Millisecond, 2*h.cfg.TTL)
		w.Tracef("fault: pause %s for %v", m.name, d)
		m.env.pausedUntil = max(m.env.pausedUntil, w.now+d)
	case "compact":
		// etcd compacts its history (as --auto-compaction does): watches
		// that still owe revisions before it are cancelled.
		rev := w.Etcd.Rev()
		w.Tracef("fault: compact at %d", rev)
		if _, err := w.Etcd.Compact(&etcdserverpb.CompactionRequest{Revision: rev}); err == nil {
			w.pump()
		}
	case "delete-key":
		// An operator deletes a live member's key (etcdctl del), often
		// while the member is cut off and cannot see it.
		m := pick()
		if m == nil {
			return
		}
		if h.rng.IntN(2) == 0 {
			m.c.Cut(w.Between(100*time.Millisecond, 2*h.cfg.TTL))
		}
		key := "rink/sim/members/" + m.name
		w.Tracef("fault: operator deletes %s", key)
		if _, err := w.Etcd.DeleteRange(&etcdserverpb.DeleteRangeRequest{Key: []byte(key)}); err == nil {
			w.pump()
		}
	case "map-reput", "map-rewrite", "map-unleased", "map-old", "map-old-value", "map-delete", "floor-delete", "acks-delete", "stray-key", "restore", "floor-old", "map-garbage", "key-edit", "whole-map-delete":
		if !h.operate(k) {
			return
		}
	case "observer-cut":
		if !h.cutObserver() {
			return
		}
	case "restore-unseen", "restore-unseen-lag":
		if !h.restoreUnseen(live, k == "restore-unseen-lag") {
			return
		}
	case "zone-loss":
		if !h.loseZone(live) {
			return
		}
	case "load-absurd":
		if !h.absurdLoad(pick()) {
			return
		}
	case "election-delete", "member-keys-delete", "tail-delete", "duplicate", "election-unleased":
		if !h.keyFault(k, live) {
			return
		}
	}
	h.res.Ops[k]++
}

// loseZone loses a zone, as an outage of a data centre or of a rack's
// switch does: every live member of one zone crashes at the same instant,
// and no process of the zone starts until it comes back, between half a
// TTL and two TTLs later; then each of them starts again under its name.
// It reports whether it did anything: it needs two zones with live
// members (one would be the whole rink).
func (h *history) loseZone(live []*simMember) bool {
	w := h.w
	if h.cfg.Zones == 0 {
		return false
	}
	var zones []string
	for _, m := range live {
		if !slices.Contains(zones, m.zone) {
			zones = append(zones, m.zone)
		}
	}
	if len(zones) < 2 {
		return false
	}
	slices.Sort(zones)
	z := zones[h.rng.IntN(len(zones))]
	down := w.Between(h.cfg.TTL/2, 2*h.cfg.TTL)
	h.zoneDown[z] = max(h.zoneDown[z], w.now+down)
	w.Tracef("fault: zone %s lost for %v", z, down)
	for _, m := range live {
		if m.zone != z {
			continue
		}
		m.alive = false
		m.m.Crash()
		h.forget(m)
		w.Tracef("fault: %s crashes with its zone", m.name)
		h.start(m.idx, down+w.Between(0, h.cfg.TTL/2))
	}
	return true
}

// get returns the key's value and mod revision (nil: absent).
func (h *history) get(key string) ([]byte, int64) {
	resp, err := h.w.Etcd.Range(&etcdserverpb.RangeRequest{Key: []byte(key)})
	if err != nil || len(resp.Kvs) == 0 {
		return nil, 0
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision
}

// put writes key as an operator does (etcdctl put: no lease).
func (h *history) put(key string, value []byte) {
	if _, err := h.w.Etcd.Put(&etcdserverpb.PutRequest{Key: []byte(key), Value: value}); err == nil {
		h.w.pump()
	}
}

// wholeMap returns the map as a whole (the .map key beside a change
// record, or the map key itself), or nil.
func (h *history) wholeMap() []byte {
	m, rev := h.get("rink/sim/map")
	if m == nil {
		return nil
	}
	if whole, wrev := h.get("rink/sim/.map"); whole != nil && wrev == rev {
		return whole
	}
	return m
}

// noteMap remembers the whole map as it is at a fault's time, for
// map-old.
func (h *history) noteMap() {
	if raw, _ := h.get("rink/sim/map"); raw != nil && (len(h.rawMaps) == 0 || string(h.rawMaps[len(h.rawMaps)-1]) != string(raw)) {
		if len(h.rawMaps) == 8 {
			h.rawMaps = slices.Delete(h.rawMaps, 0, 1)
		}
		h.rawMaps = append(h.rawMaps, raw)
	}
	m := h.wholeMap()
	if m == nil || len(h.maps) > 0 && string(h.maps[len(h.maps)-1]) == string(m) {
		return
	}
	if len(h.maps) == 8 {
		h.maps = slices.Delete(h.maps, 0, 1)
	}
	h.maps = append(h.maps, m)
}

// noteFloor remembers the floor as it is at a fault's time, for
// floor-old (it draws nothing: every seed plays as before).
func (h *history) noteFloor() {
	f, _ := h.get("rink/sim/floor")
	if f == nil || len(h.floors) > 0 && string(h.floors[len(h.floors)-1]) == string(f) {
		return
	}
	if len(h.floors) == 8 {
		h.floors = slices.Delete(h.floors, 0, 1)
	}
	h.floors = append(h.floors, f)
}

// operate does one of an operator's faults, and reports whether it did
// anything.
func (h *history) operate(k string) bool {
	w := h.w
	switch k {
	case "map-reput":
		// The map put back unchanged (a script that restores keys).
		m, _ := h.get("rink/sim/map")
		if m == nil {
			return false
		}
		w.Tracef("fault: operator puts the map back unchanged")
		h.put("rink/sim/map", m)
	case "map-rewrite":
		h.warmUnchecked = true // (see earlyMoves)
		// The whole map written by hand into the map key, with its
		// version, and its slots swapped between two members or rotated.
		var m map[string]json.RawMessage
		var members []string
		var table []int
		if json.Unmarshal(h.wholeMap(), &m) != nil || json.Unmarshal(m["members"], &members) != nil || json.Unmarshal(m["table"], &table) != nil || len(members) < 2 {
			return false
		}
		i := h.rng.IntN(len(members))
		j := (i + 1 + h.rng.IntN(len(members)-1)) % len(members)
		for s, o := range table {
			switch o {
			case i:
				table[s] = j
			case j:
				table[s] = i
			}
		}
		m["table"], _ = json.Marshal(table)
		v, _ := json.Marshal(m)
		w.Tracef("fault: operator rewrites the map, same version, slots of %s and %s swapped", members[i], members[j])
		h.put("rink/sim/map", v)
	case "map-unleased":
		h.warmUnchecked = true // (see earlyMoves)
		// The whole map written back by hand as an earlier build wrote
		// it, or a script that knows its fields: its version and table as
		// they are, without the leases it records (issue 42: a map that
		// records none opens every member's lease gate, see leaseGate).
		var m map[string]json.RawMessage
		if json.Unmarshal(h.wholeMap(), &m) != nil || m["leases"] == nil {
			return false
		}
		delete(m, "leases")
		v, _ := json.Marshal(m)
		w.Tracef("fault: operator writes the map back without its leases")
		h.put("rink/sim/map", v)
	case "map-garbage":
		// A value that is no usable map put into the map key (a typo in
		// an etcdctl put, or a map edited by hand: see garbageMaps), and
		// the whole map put back as it was a while later, as the
		// operator notices (unless the leader wrote a whole map over a
		// damaged one first: see wire.ErrMapDamaged); members hold
		// nothing new until then, or leave (another slot count: see
		// rink's unusable), and the leader's view cannot read it.
		whole := h.wholeMap()
		if whole == nil || h.garbage {
			return false // (garbage already: the operator puts back what was before it)
		}
		kinds := garbageMaps(whole)
		g := kinds[h.rng.IntN(len(kinds))]
		h.warmUnchecked = true // (see earlyMoves)
		d := w.Between(0, h.cfg.TTL)
		w.Tracef("fault: operator puts %s into the map key, and the map back %v later", g[0], d)
		h.put("rink/sim/map", []byte(g[1]))
		h.garbage = true
		w.After(d, func() {
			h.garbage = false
			w.Tracef("fault: operator puts the map back")
			h.put("rink/sim/map", whole)
		})
	case "map-old-value":
		// The map key's value of an earlier revision put back as it was
		// (etcdctl get --rev, then put): a change record, often, whose
		// base is not the map before it.
		if len(h.rawMaps) < 2 {
			return false
		}
		v := h.rawMaps[h.rng.IntN(len(h.rawMaps)-1)]
		w.Tracef("fault: operator puts back the map key's value of an earlier revision")
		h.put("rink/sim/map", v)
	case "map-old":
		// An older map put back (from a backup, or a script's memory).
		if len(h.maps) < 2 {
			return false
		}
		v := h.maps[h.rng.IntN(len(h.maps)-1)]
		w.Tracef("fault: operator puts back an older map")
		h.put("rink/sim/map", v)
	case "floor-old":
		// A floor of an earlier map lineage put back (a script that
		// restores keys from a backup taken before the map key was
		// deleted): members ignore a floor of another lineage, and the
		// leader writes its own again (see foreignFloor).
		resp, err := w.Etcd.Range(&etcdserverpb.RangeRequest{Key: []byte("rink/sim/map")})
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		lineage := resp.Kvs[0].CreateRevision
		var old [][]byte
		for _, f := range h.floors {
			var v struct {
				Lineage int64 `json:"lineage"`
			}
			if json.Unmarshal(f, &v) == nil && v.Lineage != 0 && v.Lineage != lineage {
				old = append(old, f)
			}
		}
		if len(old) == 0 {
			return false
		}
		w.Tracef("fault: operator puts back a floor of an earlier lineage")
		h.put("rink/sim/floor", old[h.rng.IntN(len(old))])
	case "map-delete", "floor-delete", "acks-delete", "whole-map-delete":
		key, end := "rink/sim/map", []byte(nil)
		switch k {
		case "floor-delete":
			key = "rink/sim/floor"
		case "whole-map-delete":
			// The whole map beside the map key's change record (".map",
			// which a script may take for a temporary file): a member
			// or an observer that lists the rink before the leader's
			// next write cannot read the record without it.
			key = "rink/sim/.map"
		case "acks-delete":
			key, end = "rink/sim/acks/", []byte("rink/sim/acks0")
		}
		w.Tracef("fault: operator deletes %s", key)
		if _, err := w.Etcd.DeleteRange(&etcdserverpb.DeleteRangeRequest{Key: []byte(key), RangeEnd: end}); err == nil {
			w.pump()
		}
	case "stray-key":
		sk := strayKeys[h.rng.IntN(len(strayKeys))]
		w.Tracef("fault: operator puts stray key %q", "rink/sim/"+sk[0])
		h.put("rink/sim/"+sk[0], []byte(sk[1]))
	case "key-edit":
		return h.editKey()
	case "restore":
		// The first draw saves a snapshot of etcd; the next brings it
		// back, revisions bumped by a million (see restore.go).
		if h.snap == nil {
			h.snap = w.Etcd.Snapshot()
			w.Tracef("fault: snapshot saved at %d", h.snap.Rev())
			return true
		}
		h.restoreFrom(h.snap)
		h.snap = nil
	}
	return true
}

// restoreFrom restores etcd from snap, revisions bumped by a million (see
// restore.go), as an operator does: no process starts within a TTL of it,
// and processes still joining are stopped, and start again a TTL later
// (see start).
func (h *history) restoreFrom(snap *Snapshot) {
	w := h.w
	w.Tracef("fault: etcd restored from the snapshot of %d", snap.Rev())
	w.Etcd.Restore(snap, 1_000_000)
	h.loadLost = true // (see checkLoad)
	h.startsFrom = w.now + h.cfg.TTL
	for _, m := range slices.Clone(h.members) {
		if m.alive && !m.m.Joined() {
			m.alive = false
			m.m.Crash()
			h.forget(m)
			if m.doomed {
				// The first process of a duplicate, which the fault stops
				// anyway: started again, it would be a second process of
				// its name that nothing stops, waiting for the name for
				// ever (rink-sim seeds 545 and 2882 with restore and
				// duplicate: a liveness violation of the harness's own).
				w.Tracef("fault: %s, still joining, the first of a duplicate, stopped", m.name)
				continue
			}
			w.Tracef("fault: %s, still joining, stopped until a TTL after the restore", m.name)
			h.start(m.idx, 0)
		}
	}
	w.pump()
}

// observe checks, as each acquisition happens, that nobody else holds the
// slot's primary and that its token exceeds every earlier one; and, as
// each acquisition of a primary or a secondary happens, that at most k
// members hold the slot and that the acquiring member does not hold it in
// the other kind (see checkReplicas). Releases and deaths (see forget)
// free the slot.
func (h *history) observe(m *simMember, e rink.Event) {
	switch e.Kind {
	case rink.EventAcquired:
		if o := h.holder[e.Slot]; o != nil && o != m && o.alive && o.m.Holds(e.Slot) {
			h.violate(fmt.Sprintf("slot %d held by %s and %s at once", e.Slot, o.name, m.name))
		}
		if e.Token <= h.top[e.Slot] {
			h.violate(fmt.Sprintf("slot %d: %s holds it with token %d, not above %d", e.Slot, m.name, e.Token, h.top[e.Slot]))
		}
		h.checkReplicas(m, e.Slot, true)
		h.checkDrain(m, e.Slot)
		h.checkFenced(m, e.Slot)
		h.top[e.Slot] = max(h.top[e.Slot], e.Token)
		h.holder[e.Slot] = m
		m.held[e.Slot] = true
		h.enterWork(m, e.Slot)
	case rink.EventReleased:
		if h.holder[e.Slot] == m {
			delete(h.holder, e.Slot)
		}
		delete(m.held, e.Slot)
		h.releaseWork(m, e.Slot)
	case rink.EventSecondaryAcquired:
		h.checkReplicas(m, e.Slot, false)
		m.secs[e.Slot] = true
	case rink.EventSecondaryReleased:
		delete(m.secs, e.Slot)
	case rink.EventFenced:
		h.checkFence(m)
	}
}

// checkReplicas checks an acquisition of slot s by m, as its primary or as
// a secondary: the members whose holdings of s still act, m included,
// number at most k, and m does not hold s in the other kind (a secondary
// promoted ends its secondary holding before its primary starts). A
// holding acts while its process has not ended and its context is live
// with its lease's deadline not passed (Holds, HoldsSecondary): a release
// ends its context before its event, a death (see forget) the process,
// and a member that leaves (no longer alive here) counts until it has
// released what it held (see rink's simMember.Leave: in the narrow view,
// it lists the rink first).
func (h *history) checkReplicas(m *simMember, s int, primary bool) {
	switch {
	case primary && m.m.HoldsSecondary(s):
		h.violate(fmt.Sprintf("slot %d: %s acquires its primary while holding it as a secondary", s, m.name))
	case !primary && m.m.Holds(s):
		h.violate(fmt.Sprintf("slot %d: %s acquires it as a secondary while holding its primary", s, m.name))
	}
	holders := []string{m.name}
	for _, o := range h.members {
		if o != m && (o.m.Holds(s) || o.m.HoldsSecondary(s)) {
			holders = append(holders, o.name)
		}
	}
	if k := h.cfg.replicas(); len(holders) > k {
		kind := "a secondary"
		if primary {
			kind = "its primary"
		}
		h.violate(fmt.Sprintf("slot %d held by %d members at once, %v (%s acquires %s), more than %d replicas", s, len(holders), holders, m.name, kind, k))
	}
}

// forget frees the slots of a member that died: a process that is gone
// holds nothing.
func (h *history) forget(m *simMember) {
	for s := range m.held {
		if h.holder[s] == m {
			delete(h.holder, s)
		}
	}
	clear(m.held)
	clear(m.secs)
}

// live checks, after the quiet time, that every slot has one holder and
// every live member is ranked; with k > 1 replicas, that every live
// member's secondary holdings are what its events say, that every slot
// has min(k-1, ranked live members - 1) secondaries on members other than
// its primary's, and that its holders sit in min(k, zones of ranked live
// members) distinct zones (with zones: when there are at least k zones
// and each has a ranked live member, k distinct zones).
//
// With grace, it only reports whether the check fails (see Run: a planned
// move may be under way at the end, a load round's, and is given a TTL to
// finish); otherwise it reports a failure as a violation, after the
// faults stopped by after.
func (h *history) live(grace bool, after time.Duration) (failed bool) {
	k := h.cfg.replicas()
	held := map[int]bool{}
	primaries := make([][]*simMember, h.cfg.Slots) // each slot's holders, in h.members' order
	secondaries := make([][]*simMember, h.cfg.Slots)
	var unranked, zones []string
	var eventsMismatch string
	ranked := 0
	for _, m := range h.members {
		if !m.alive {
			continue
		}
		for s := range m.m.Holding() {
			held[s] = true
			if s >= 0 && s < h.cfg.Slots {
				primaries[s] = append(primaries[s], m)
			}
		}
		secs := m.m.HoldingSecondaries()
		for s := range secs {
			if s >= 0 && s < h.cfg.Slots {
				secondaries[s] = append(secondaries[s], m)
			}
		}
		if a, b := slices.Sorted(maps.Keys(secs)), slices.Sorted(maps.Keys(m.secs)); !slices.Equal(a, b) && eventsMismatch == "" {
			eventsMismatch = fmt.Sprintf("%s holds secondaries %v, its events say %v", m.name, a, b)
		}
		if !m.m.Ranked() {
			unranked = append(unranked, m.name)
			continue
		}
		ranked++
		if !slices.Contains(zones, m.zone) {
			zones = append(zones, m.zone)
		}
	}
	var missing []int
	for s := range h.cfg.Slots {
		if !held[s] {
			missing = append(missing, s)
		}
	}
	sort.Strings(unranked)
	// The replicas: a slot's secondaries on members other than its
	// primary's, how many of them, and in how many zones its holders sit.
	replicas := eventsMismatch
	wantSecs, wantZones := min(k-1, ranked-1), min(k, len(zones))
	for s := 0; k > 1 && replicas == "" && s < h.cfg.Slots; s++ {
		var secs, all []string
		inZones := map[string]bool{} // (only counted)
		for _, m := range primaries[s] {
			all = append(all, m.name)
			inZones[m.zone] = true
		}
		for _, m := range secondaries[s] {
			if slices.Contains(primaries[s], m) {
				replicas = fmt.Sprintf("slot %d: %s holds it as its primary and as a secondary", s, m.name)
				break
			}
			secs = append(secs, m.name)
			all = append(all, m.name)
			inZones[m.zone] = true
		}
		switch {
		case replicas != "":
		case len(secs) != wantSecs:
			replicas = fmt.Sprintf("slot %d has %d secondaries %v, not %d (%d ranked members)", s, len(secs), secs, wantSecs, ranked)
		case h.cfg.Zones > 0 && len(inZones) < wantZones:
			var zs []string
			for _, m := range slices.Concat(primaries[s], secondaries[s]) {
				zs = append(zs, m.zone)
			}
			replicas = fmt.Sprintf("slot %d held by %v in zones %v, %d distinct, not %d (ranked members in zones %v)", s, all, zs, len(inZones), wantZones, slices.Sorted(slices.Values(zones)))
		}
	}
	var why string
	switch {
	case len(missing) > 0:
		why = fmt.Sprintf("slots %v held by nobody", missing)
	case len(unranked) > 0:
		why = fmt.Sprintf("members %v not ranked", unranked)
	case replicas != "":
		why = replicas
	default:
		why = h.liveRoles()
	}
	if why == "" {
		why = h.unacked()
	}
	if why == "" || grace {
		return why != ""
	}
	for _, m := range h.members {
		if m.alive {
			h.w.Tracef("%s: %s", m.name, m.m.Describe())
			if k > 1 {
				h.w.Tracef("%s: zone %q, primaries %v, secondaries %v", m.name, m.zone,
					slices.Sorted(maps.Keys(m.m.Holding())), slices.Sorted(maps.Keys(m.m.HoldingSecondaries())))
			}
		}
	}
	h.violate(fmt.Sprintf("liveness: %s %v after the faults stopped", why, after))
	return true
}

func (h *history) violate(why string) {
	if h.res.Violation == "" {
		h.res.Violation, h.res.At = why, h.w.now
		h.w.Tracef("VIOLATION: %s", why)
	}
}

// memberEnv is a member's time: the world's, or with Config.Drift a
// clock of its own that runs at a rate 1+e of the world's from t0, when
// the process started (see local). While the member is paused, what it
// would handle waits until it resumes.
type memberEnv struct {
	w           *World
	rng         *rand.Rand
	pausedUntil time.Duration
	// pauseAtGrant, if set, pauses the process for that long as the
	// answer to its next lease grant reaches it (see pause-joining).
	pauseAtGrant time.Duration
	t0           time.Duration // the world's time when the process started
	e            float64       // its clock's drift (0: none)
}

// run runs fn now, or when the member resumes.
func (e *memberEnv) run(fn func()) {
	if e.w.now < e.pausedUntil {
		e.w.After(e.pausedUntil-e.w.now, func() { e.run(fn) })
		return
	}
	fn()
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// local is the member's clock at the world's time t: t0 + (t-t0)(1+e),
// rounded down.
func (e *memberEnv) local(t time.Duration) time.Duration {
	if e.e == 0 {
		return t
	}
	return e.t0 + time.Duration(math.Floor(float64(t-e.t0)*(1+e.e)))
}

// worldDelay is how long the world waits for d to pass on the member's
// clock: the least delay after which its clock reads at least d later
// (about d/(1+e); a timer fires late by a nanosecond, never early).
func (e *memberEnv) worldDelay(d time.Duration) time.Duration {
	if e.e == 0 || d <= 0 {
		return d
	}
	wd := time.Duration(math.Ceil(float64(d) / (1 + e.e)))
	now := e.w.now
	for wd > 0 && e.local(now+wd-1)-e.local(now) >= d {
		wd--
	}
	for e.local(now+wd)-e.local(now) < d {
		wd++
	}
	return wd
}

func (e *memberEnv) Now() time.Time { return epoch.Add(e.local(e.w.now)) }
func (e *memberEnv) Clock() int64   { return int64(e.local(e.w.now)) }
func (e *memberEnv) After(d time.Duration, fn func()) {
	e.w.After(e.worldDelay(d), func() { e.run(fn) })
}
func (e *memberEnv) Rand() *rand.Rand { return e.rng }

// clientEtcd is a Client as a member's etcd: answers reach a paused member
// when it resumes.
type clientEtcd struct {
	c   *Client
	env *memberEnv
}

// later returns done, run when the member is not paused.
func later[T any](e clientEtcd, done func(T, error)) func(T, error) {
	return func(v T, err error) { e.env.run(func() { done(v, err) }) }
}

func (e clientEtcd) Txn(r *etcdserverpb.TxnRequest, done func(*etcdserverpb.TxnResponse, error)) {
	e.c.Txn(r, later(e, done))
}
func (e clientEtcd) LeaseGrant(r *etcdserverpb.LeaseGrantRequest, done func(*etcdserverpb.LeaseGrantResponse, error)) {
	e.c.LeaseGrant(r, func(resp *etcdserverpb.LeaseGrantResponse, err error) {
		if d := e.env.pauseAtGrant; d > 0 && err == nil {
			e.env.pauseAtGrant = 0
			e.c.w.Tracef("%s: pauses for %v as its lease is granted", e.c.Name, d)
			e.env.pausedUntil = max(e.env.pausedUntil, e.c.w.now+d)
		}
		later(e, done)(resp, err)
	})
}
func (e clientEtcd) LeaseRevoke(r *etcdserverpb.LeaseRevokeRequest, done func(*etcdserverpb.LeaseRevokeResponse, error)) {
	e.c.LeaseRevoke(r, later(e, done))
}
func (e clientEtcd) LeaseKeepAlive(r *etcdserverpb.LeaseKeepAliveRequest, done func(*etcdserverpb.LeaseKeepAliveResponse, error)) {
	e.c.LeaseKeepAlive(r, later(e, done))
}
func (e clientEtcd) LeaseTimeToLive(r *etcdserverpb.LeaseTimeToLiveRequest, done func(*etcdserverpb.LeaseTimeToLiveResponse, error)) {
	do(e.c, "time-to-live", func() (*etcdserverpb.LeaseTimeToLiveResponse, error) { return e.c.w.Etcd.LeaseTimeToLive(r), nil }, later(e, done))
}
func (e clientEtcd) Watch(r *etcdserverpb.WatchCreateRequest, deliver func(*etcdserverpb.WatchResponse)) func() {
	return e.c.Watch(r, func(resp *etcdserverpb.WatchResponse) { e.env.run(func() { deliver(resp) }) }).Cancel
}

// Shrink looks for a smaller history that still fails, as seed does with
// cfg: fewer members, a shorter time of faults, fewer fault kinds. It
// tries one change at a time and keeps each that still fails, until none
// does; tries bounds the histories it plays. It returns the smallest
// config found (with its kinds set) and its result.
func Shrink(seed uint64, cfg Config, tries int) (Config, Result) {
	best := Run(seed, cfg)
	if best.Violation == "" {
		return cfg, best
	}
	cfg.Kinds = best.Kinds
	for improved := true; improved && tries > 0; {
		improved = false
		var cands []Config
		if cfg.Members > 2 {
			c := cfg
			c.Members--
			cands = append(cands, c)
		}
		if cfg.Faults > time.Second {
			c := cfg
			c.Faults = (cfg.Faults / 2).Round(100 * time.Millisecond)
			cands = append(cands, c)
		}
		for i := range cfg.Kinds {
			if len(cfg.Kinds) > 1 {
				c := cfg
				c.Kinds = slices.Delete(slices.Clone(cfg.Kinds), i, i+1)
				cands = append(cands, c)
			}
		}
		for _, c := range cands {
			if tries--; tries < 0 {
				break
			}
			if res := Run(seed, c); res.Violation != "" {
				cfg, best, improved = c, res, true
				break
			}
		}
	}
	return cfg, best
}

// checkFenced checks an acquisition of slot s by m: no other member's
// holding of s is past its lease's deadline with its context still open
// (simhook.Member.Unfenced). A holding's Err says it is done once the
// deadline passes, but its Done channel closes only when the member
// fences, and a function that waits on Done acts until then: the member
// must fence when the deadline passes. A member paused until less than the
// fence margin (TTL/8) ago is let off: it fences as it resumes, and its
// first steps and the acquisition can come at the same instant.
func (h *history) checkFenced(m *simMember, s int) {
	for _, o := range h.members {
		if o == m || !o.alive || h.w.now < o.env.pausedUntil+h.cfg.TTL/8 {
			continue
		}
		if o.m.Unfenced(s) {
			h.violate(fmt.Sprintf("slot %d: %s acquires it while %s's holding is past its lease's deadline and not fenced", s, m.name, o.name))
		}
	}
}
