// Command rinkbench measures rink on an embedded etcd: the floor (one etcd
// write seen by a watch on another client), graceful handover against it,
// failover after a member is cut off, roles moved by a scale-out, a crash
// and a rolling deploy, a cache's hit rate through a rolling deploy and a
// scale-out with warm-up on and off, the steady cost on etcd, replicas (a
// primary and a secondary per slot over three zones: placement, a rolling
// deploy, a crash's warm promotion, the loss of a zone), handovers
// through the rinkd sidecar against in-process ones, and scale (a
// thousand members in one process, what a join and a leave cost them and
// etcd; a hundred thousand roles awaited). Each scenario runs -runs times
// and reports the min, median and max of each figure; -json prints one
// JSON object per scenario instead. -scale-members takes several sizes,
// each reported as a scale result of its own.
//
//	go run ./tools/cmd/rinkbench
//	go run ./tools/cmd/rinkbench -scenario handover,failover -runs 5 -json
//	go run ./tools/cmd/rinkbench -scenario scale -scale-members 1000,10000 -runs 1 -json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/tools/internal/bench"
)

// scenarios maps names to runs of one scenario.
var scenarios = []struct {
	name, about string
	run         func(env bench.Env, cfg config) (bench.Sample, error)
}{
	{"floor", "one etcd put seen by a watch on another client: the least a handover can cost; beside it, a departure-shaped transaction", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Floor(env, bench.FloorPutsPerHandover*cfg.handovers)
	}},
	{"handover", "a plain member shuts down; gap until the other holds its role, against the floor measured beside it", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Handover(env, false, cfg.handovers)
	}},
	{"handover-leader", "the leader shuts down; gap until the other holds its role, against the floor measured beside it", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Handover(env, true, cfg.handovers)
	}},
	{"failover", "TTL 2 s; the holder is cut off etcd: when it fences, when the other holds its roles", func(env bench.Env, _ config) (bench.Sample, error) {
		return bench.Failover(env)
	}},
	{"scale-out", "4 -> 5 members, 1,024 roles: roles moved and role contexts cancelled", func(env bench.Env, _ config) (bench.Sample, error) {
		return bench.ScaleOut(env)
	}},
	{"crash-moves", "5 members, 1,024 roles; index 1 crashes: roles moved against its roles", func(env bench.Env, _ config) (bench.Sample, error) {
		return bench.CrashMoves(env)
	}},
	{"rolling", "4 members x 1,024 roles replaced one by one: acquisitions, gaps per move, unheld time", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Rolling(env, cfg.plot)
	}},
	{"warm", "a cache on 4 members (64 shards, 2,048 Zipf keys, a 2 ms store) through a rolling deploy and a scale-out to 5, warm-up off and on, drain timeout 1 s: hit rates, switch gap, drain waits (targets: warm hit rates >= 0.95 and 2x closer to 1 than cold, gap p50 <= 1.5x handover's)", func(env bench.Env, _ config) (bench.Sample, error) {
		return bench.Warm(env)
	}},
	{"steady-cost", "8 members holding 10,000 roles and recording load: etcd requests per second, renewals, keys, load writes", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.SteadyCost(env, cfg.hold)
	}},
	{"load", "8 members, -load-roles roles with a Zipf load (exponent 1.1), balanced by load: imbalance by count, after, bound; rounds, moves", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.LoadBalance(env, nil, cfg.loadRoles, bench.NextLoadSeed())
	}},
	{"load-capacity", "as load, with capacities 1,1,1,1,2,2,4,4", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.LoadBalance(env, []float64{1, 1, 1, 1, 2, 2, 4, 4}, cfg.loadRoles, bench.NextLoadSeed())
	}},
	{"load-shift", "as load, with the hot set drawn anew every -shift-every, -shifts times: imbalance p95 over time, most slots moved per round, oscillations", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.LoadShift(env, cfg.loadRoles, cfg.shiftEvery, cfg.shifts, bench.NextLoadSeed())
	}},
	{"drain", "a member runs two roles under Run with a drain timeout, one slow to wind down (100 ms), and shuts down: the other role's handover gap, with and without the drain", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Drain(env, 10)
	}},
	{"replicas", "3 zones x 3 members, 2 replicas per slot, 1,024 roles, TTL 2 s: slots in distinct zones at rest; primary moves per role in a rolling deploy; a plain member crashes: roles promoted warm, failover; the leader's zone is lost: primaries moved against the zone's (targets: fractions 1, 1 move per role, failover median <= TTL + 0.4 s, moved = the zone's, 0 overlaps)", func(env bench.Env, _ config) (bench.Sample, error) {
		return bench.Replicas(env)
	}},
	{"sidecar", "handovers through rinkd (a member per rinkd.Server, its app an HTTP/JSON client; the holder's sidecar drained, or its app's session closed) alternating with in-process ones (the holder shuts down): the gaps at the apps' side against the in-process gap (target: p50_to_inprocess <= 1.5)", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Sidecar(env, cfg.handovers)
	}},
	{"scale", "breadth: -scale-members members on one client per 100 (at least 4), one join and one leave, and what each cost etcd; depth: 2 members awaiting -scale-roles roles, the holder leaves", func(env bench.Env, cfg config) (bench.Sample, error) {
		return bench.Scale(env, cfg.scaleConfig())
	}},
}

// sizes splits a scenario's configuration into the configurations it runs
// as results of their own: one per -scale-members size for scale.
func sizes(name string, cfg config) []config {
	if name != "scale" || len(cfg.scaleMembers) < 2 {
		return []config{cfg}
	}
	var out []config
	for _, n := range cfg.scaleMembers {
		c := cfg
		c.scaleMembers = []int{n}
		if c.scaleProfile != "" {
			ext := filepath.Ext(c.scaleProfile)
			c.scaleProfile = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(c.scaleProfile, ext), n, ext)
		}
		out = append(out, c)
	}
	return out
}

// scaleConfig is the scale scenario's configuration for its (first) size.
func (cfg config) scaleConfig() bench.ScaleConfig {
	return bench.ScaleConfig{Members: cfg.scaleMembers[0], Slots: cfg.scaleSlots, TTL: cfg.scaleTTL, Roles: cfg.scaleRoles, Profile: cfg.scaleProfile, LoadInterval: cfg.scaleLoadInterval, Joins: cfg.scaleJoins, Writes: os.Stderr}
}

// about says, for a scenario's heading, what configuration it ran.
func (cfg config) about(name string) string {
	if name != "scale" {
		return ""
	}
	sc := cfg.scaleConfig()
	if sc.Slots == 0 {
		sc.Slots = bench.ScaleSlots(sc.Members)
	}
	if sc.TTL == 0 {
		sc.TTL = bench.ScaleTTL(sc.Members)
	}
	return fmt.Sprintf(" (%d members, %d slots, session TTL %v)", sc.Members, sc.Slots, sc.TTL)
}

// intList is a flag of comma-separated integers.
type intList []int

func (l *intList) String() string {
	var out []string
	for _, n := range *l {
		out = append(out, strconv.Itoa(n))
	}
	return strings.Join(out, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q: want comma-separated integers", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

type config struct {
	scenario  string
	runs      int
	handovers int
	hold      time.Duration
	plot      string
	json      bool
	noFsync   bool
	etcdLog   string

	scaleMembers           []int
	scaleRoles, scaleSlots int
	scaleJoins             int // joins the scale scenario measures, one at a time (its time and CPU figures are their medians)
	scaleTTL               time.Duration
	scaleProfile           string
	scaleLoadInterval      time.Duration // of the scale scenario's members: 0, the default; the tests shorten it
	loadRoles              int
	shiftEvery             time.Duration
	shifts                 int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.scenario, "scenario", "all", "scenarios to run, comma-separated: "+names()+", or all")
	flag.IntVar(&cfg.runs, "runs", 5, "runs per scenario")
	flag.IntVar(&cfg.handovers, "handovers", 50, "handovers per run of the handover scenarios (the floor scenario makes 4 puts and 2 departure transactions per handover)")
	flag.DurationVar(&cfg.hold, "hold", 30*time.Second, "how long the steady-cost scenario holds its roles")
	flag.StringVar(&cfg.plot, "plot", "", "draw the first rolling deploy's roles per member over time to this PNG file")
	flag.BoolVar(&cfg.json, "json", false, "print one JSON object per scenario")
	flag.BoolVar(&cfg.noFsync, "nofsync", false, "run etcd without fsync (faster, less like production)")
	flag.StringVar(&cfg.etcdLog, "etcd-log", "", "write the embedded etcd's warnings and errors to this file (slow applies, slow fsyncs, lease troubles)")
	cfg.scaleMembers = []int{1000}
	flag.Var((*intList)(&cfg.scaleMembers), "scale-members", "members of the scale scenario's breadth part; comma-separated sizes (1000,10000) run as results of their own")
	flag.IntVar(&cfg.scaleSlots, "scale-slots", 0, "slots of the scale scenario's rink (0: the least power of two that is at least the members and 1024)")
	flag.DurationVar(&cfg.scaleTTL, "scale-ttl", 0, "session TTL of the scale scenario's members (0: 10s, or 3 s per 1,000 members where that is longer, to keep renewals at 1,000 a second)")
	flag.IntVar(&cfg.scaleRoles, "scale-roles", 100000, "roles of the scale scenario's depth part")
	flag.IntVar(&cfg.scaleJoins, "scale-joins", 5, "joins the scale scenario measures, one at a time, the rink at rest between them: join_converge_s and join_cpu_ms are their medians (the cost counters are the first's)")
	flag.StringVar(&cfg.scaleProfile, "scale-cpuprofile", "", "write a CPU profile of the scale scenario's one join (of its last run) to this file, one of its leave to the file with .leave added, and a heap and a goroutine profile of the rink built and at rest to the file with .heap and .goroutines added (with several -scale-members, to one file per size, named with the size)")
	flag.IntVar(&cfg.loadRoles, "load-roles", 10000, "roles of the load scenarios")
	flag.DurationVar(&cfg.shiftEvery, "shift-every", time.Minute, "how often the load-shift scenario draws a new hot set")
	flag.IntVar(&cfg.shifts, "shifts", 10, "how many hot sets the load-shift scenario draws")
	flag.Parse()
	if cfg.scaleProfile != "" {
		// (kill -USR1 writes the heap of a scale run still building its rink.)
		defer bench.HeapProfileOnSignal(cfg.scaleProfile + ".sig")()
	}
	if err := run(os.Stdout, os.Stderr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "rinkbench:", err)
		os.Exit(1)
	}
}

func names() string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return strings.Join(out, ", ")
}

// jsonResult is the JSON form of one scenario's result.
type jsonResult struct {
	Scenario string                   `json:"scenario"`
	Runs     int                      `json:"runs"`
	Figures  map[string]bench.Summary `json:"figures"`
	Samples  []bench.Sample           `json:"samples"`
}

func run(out, errOut io.Writer, cfg config) error {
	if cfg.loadRoles == 0 {
		cfg.loadRoles = 10000 // a config made in code, as by the tests
	}
	if cfg.shiftEvery == 0 {
		cfg.shiftEvery, cfg.shifts = time.Minute, 10
	}
	if cfg.scaleJoins == 0 {
		cfg.scaleJoins = 1
	}
	if cfg.runs < 1 || cfg.handovers < 1 || cfg.hold <= 0 || cfg.scaleRoles < 1 || cfg.scaleJoins < 1 || cfg.loadRoles < 1 || cfg.shiftEvery < time.Second || cfg.shifts < 1 {
		return fmt.Errorf("-runs, -handovers, -scale-roles and -scale-joins must be at least 1, -hold above 0")
	}
	if len(cfg.scaleMembers) == 0 {
		return fmt.Errorf("-scale-members: no size")
	}
	for _, n := range cfg.scaleMembers {
		if n < 2 {
			return fmt.Errorf("-scale-members must be at least 2")
		}
	}
	if cfg.scaleSlots < 0 || cfg.scaleSlots > rink.MaxSlots {
		return fmt.Errorf("-scale-slots must be 0 to %d", rink.MaxSlots)
	}
	if cfg.scaleTTL != 0 && (cfg.scaleTTL < rink.MinSessionTTL || cfg.scaleTTL%time.Second != 0) {
		return fmt.Errorf("-scale-ttl must be 0 or whole seconds, at least %v", rink.MinSessionTTL)
	}
	want := map[string]bool{}
	for _, n := range strings.Split(cfg.scenario, ",") {
		want[strings.TrimSpace(n)] = true
	}
	for n := range want {
		if n != "all" && !strings.Contains(","+names()+",", ", "+n+",") && !strings.HasPrefix(names(), n+",") {
			return fmt.Errorf("unknown scenario %q (have %s)", n, names())
		}
	}
	opts := embedetcd.Options{NoFsync: cfg.noFsync}
	if cfg.etcdLog != "" {
		zc := zap.NewProductionConfig()
		zc.Level, zc.OutputPaths, zc.ErrorOutputPaths = zap.NewAtomicLevelAt(zap.WarnLevel), []string{cfg.etcdLog}, []string{cfg.etcdLog}
		lg, err := zc.Build()
		if err != nil {
			return err
		}
		defer func() { _ = lg.Sync() }()
		opts.Logger = lg
	}
	srv, err := embedetcd.Start(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	env := bench.Env{Endpoints: []string{srv.Endpoint()}, NewProxy: newProxy(srv.Endpoint()), Diag: errOut}
	if !cfg.json {
		fmt.Fprintf(out, "rinkbench: embedded etcd at %s (fsync %v), %d runs per scenario\n\n", srv.Endpoint(), !cfg.noFsync, cfg.runs)
	}
	for _, s := range scenarios {
		if !want["all"] && !want[s.name] {
			continue
		}
		for _, cfg := range sizes(s.name, cfg) {
			if err := runScenario(out, env, cfg, s.name, s.about, s.run); err != nil {
				return err
			}
		}
	}
	return nil
}

// runScenario runs one scenario -runs times and prints its result.
func runScenario(out io.Writer, env bench.Env, cfg config, name, about string, runOnce func(bench.Env, config) (bench.Sample, error)) error {
	res := bench.Result{Scenario: name}
	began := time.Now()
	for i := 0; i < cfg.runs; i++ {
		runCfg := cfg
		if i > 0 {
			runCfg.plot = "" // the first run draws
		}
		sample, err := runOnce(env, runCfg)
		if err != nil {
			return fmt.Errorf("%s%s, run %d: %w", name, cfg.about(name), i+1, err)
		}
		res.Runs = append(res.Runs, sample)
	}
	if cfg.json {
		return json.NewEncoder(out).Encode(jsonResult{name, cfg.runs, res.Summaries(), res.Runs})
	}
	fmt.Fprintf(out, "%s%s — %s (%v)\n", name, cfg.about(name), about, time.Since(began).Round(time.Second))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmin\tmedian\tmax\t")
	sums := res.Summaries()
	for _, f := range res.Figures() {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t\n", f, sums[f].Min, sums[f].Median, sums[f].Max)
	}
	tw.Flush()
	fmt.Fprintln(out)
	return nil
}

// newProxy makes proxies in front of etcd (go.etcd.io/etcd/pkg/v3/proxy)
// that a scenario can cut off.
func newProxy(target string) func() (string, func(), func(), func(), error) {
	return func() (string, func(), func(), func(), error) {
		from, err := embedetcd.FreeURL()
		if err != nil {
			return "", nil, nil, nil, err
		}
		from.Scheme = "tcp"
		p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: url.URL{Scheme: "tcp", Host: target}})
		select {
		case <-p.Ready():
		case err := <-p.Error():
			return "", nil, nil, nil, err
		}
		cut := func() { p.PauseTx(); p.PauseRx() }
		heal := func() { p.UnpauseTx(); p.UnpauseRx() }
		return from.Host, cut, heal, func() { heal(); p.Close() }, nil
	}
}
