// Command rink-sim plays simulated histories of a rink: members' real
// cores, in one goroutine, in virtual time, against a model of etcd, with
// faults drawn from each history's seed. It reports the histories played,
// the member-steps per minute of wall time, the faults of each kind, and
// the violations, each with the seed that replays it.
//
//	go run ./tools/cmd/rink-sim -duration 1m -members 5 [-replicas K -zones Z] [-keys] [-drift E] [-drain D] [-seed S] [-json]
//
// With -keys each seed also draws an operator's deletions of live members'
// keys (sim.KeyFaultKinds: election-delete, member-keys-delete,
// tail-delete); without, a seed plays what it played before they existed.
//
// With -drift E each member process's clock runs at a rate 1+e of etcd's,
// |e| ≤ E, drawn per process from a stream of its own (sim.Config.Drift):
// 0.02 (sim.DriftBound) is well within what the fence margin, TTL/8,
// covers, and the core must survive it; 0.3 is far beyond it, a planted
// bug the simulator must find. Without, every clock is etcd's, and a seed
// plays what it played before drift existed.
//
// With -drain D the members drain given-away slots for up to D
// (rink.WithDrainTimeout), functions run on their holdings and outlast
// them, and every acquisition checks that no other member's function
// still runs on the slot within the drain timeout (sim.Config.Drain).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rink-go/rink/internal/simhook"
	"github.com/rink-go/rink/tools/internal/sim"
)

func main() {
	duration := flag.Duration("duration", time.Minute, "how long to play histories for (wall time)")
	members := flag.Int("members", 5, "members at the start of each history (3 to 50)")
	seed := flag.Uint64("seed", 0, "play this seed alone, with its trace (0: seeds from 1 on, for -duration)")
	first := flag.Uint64("first", 1, "the first seed to play")
	asJSON := flag.Bool("json", false, "end with one JSON object of the figures")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	faults := flag.Duration("faults", sim.DefaultConfig().Faults, "how long each history draws faults for (virtual time)")
	kindsFlag := flag.String("kinds", "", "the fault kinds to draw from, comma-separated (default: drawn per seed; "+strings.Join(sim.NamedKinds, ", ")+" are drawn only when named)")
	shrink := flag.Bool("shrink", false, "shrink the first failing history (fewer members, faults, kinds) and print the command that replays it")
	replicas := flag.Int("replicas", 1, "replicas per slot, the primary included (rink.WithReplicas)")
	zones := flag.Int("zones", 0, "zones the members sit in, member i in zone z<i mod zones> (rink.WithZone; 0: none, and no zone-loss fault)")
	keyFaults := flag.Bool("keys", false, "also draw an operator's deletions of live members' keys ("+strings.Join(sim.KeyFaultKinds, ", ")+"), from a stream of their own (without: every seed plays as before they existed)")
	drift := flag.Float64("drift", 0, "bound the members' clock drift: each process's clock runs at a rate 1+e of etcd's, |e| ≤ drift, drawn from a stream of its own (0.02 is within the fence margin, 0.3 far beyond it; 0: none, and every seed plays as before drift existed)")
	ttl := flag.Duration("ttl", sim.DefaultConfig().TTL, "the members' session TTL (whole seconds, at least 1s)")
	load := flag.Bool("load", false, "the members do work on their holdings (a Zipf rate per slot, moving once) and balance by it with a tolerance of 0.1, and the end checks the balance (without: they report the roles they watch, as production's members do, and every seed plays as before)")
	slots := flag.Int("slots", 0, "the rink's slots (0: 16, or twice the members)")
	warmup := flag.Duration("warmup", 0, "the members' warm-up (rink.WithWarmup): heirs warm up what is announced to them, taking a while, and no planned move may be made before the heir is ready or the warm-up has passed (0: none, and every seed plays as before)")
	drain := flag.Duration("drain", 0, "the members' drain timeout (rink.WithDrainTimeout): functions run on their holdings and outlast them, and no heir may start a slot while one still runs within it (0: no drain, and every seed plays as before)")
	capacitiesFlag := flag.Bool("capacities", false, "member i has capacity 1, 2, 0.5 or 3 (i mod 4; rink.WithCapacity) (without: every capacity is 1, and every seed plays as before)")
	observer := flag.Bool("observer", false, "an Observer (rink.NewObserver) follows the rink, and every map it shows is checked against the map key's history; observer-cut, named in -kinds, resets its connection (without: none, and every seed plays as before)")
	knobs := flag.Bool("knobs", false, "lower the members' bounds on what they remember (handover history, the leader's map puts and losses), drawn per history from a stream of its own, so that what happens past them happens in a short history (without: production's, and every seed plays as before)")
	plant := flag.String("plant", "", "plant a known bug in every member's core, to show that it is found: "+strings.Join(simhook.Plants, ", "))
	flag.Parse()
	if *plant != "" && !slices.Contains(simhook.Plants, *plant) {
		fmt.Fprintf(os.Stderr, "rink-sim: no bug called %q to plant (there are %s)\n", *plant, strings.Join(simhook.Plants, ", "))
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rink-sim:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rink-sim:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *members < 1 {
		fmt.Fprintln(os.Stderr, "rink-sim: -members must be at least 1")
		os.Exit(2)
	}
	if *drift < 0 || *drift >= 1 {
		fmt.Fprintln(os.Stderr, "rink-sim: -drift must be at least 0 and below 1")
		os.Exit(2)
	}
	if *drain < 0 {
		fmt.Fprintln(os.Stderr, "rink-sim: -drain must not be negative")
		os.Exit(2)
	}
	if *replicas < 1 || *zones < 0 {
		fmt.Fprintln(os.Stderr, "rink-sim: -replicas must be at least 1, -zones at least 0")
		os.Exit(2)
	}
	cfg := sim.DefaultConfig()
	cfg.Members = *members
	cfg.Slots = max(cfg.Slots, 2**members)
	cfg.Plant = *plant
	cfg.Faults = *faults
	cfg.Replicas, cfg.Zones = *replicas, *zones
	cfg.KeyFaults = *keyFaults
	cfg.Drift = *drift
	cfg.Drain = *drain
	cfg.Warmup = *warmup
	cfg.Load = *load
	cfg.Knobs = *knobs
	cfg.Observer = *observer
	cfg.Capacities = *capacitiesFlag
	if *ttl < time.Second || *ttl%time.Second != 0 {
		fmt.Fprintln(os.Stderr, "rink-sim: -ttl must be a whole number of seconds, at least 1s")
		os.Exit(2)
	}
	cfg.TTL = *ttl
	if *slots > 0 {
		cfg.Slots = *slots
	}
	if *kindsFlag != "" {
		cfg.Kinds = strings.Split(*kindsFlag, ",")
		for _, k := range cfg.Kinds {
			if !sim.KnownKind(k) {
				fmt.Fprintf(os.Stderr, "rink-sim: no fault kind called %q (there are %s; drawn only when named: %s; with -keys: %s)\n", k,
					strings.Join(sim.FaultKinds, ", "), strings.Join(sim.NamedKinds, ", "), strings.Join(sim.KeyFaultKinds, ", "))
				os.Exit(2)
			}
		}
	}
	replay := func(c sim.Config, s uint64) string {
		cmd := fmt.Sprintf("go run ./tools/cmd/rink-sim -members %d -faults %v -seed %d", c.Members, c.Faults, s)
		if c.Replicas > 1 || c.Zones > 0 {
			cmd += fmt.Sprintf(" -replicas %d -zones %d", max(1, c.Replicas), c.Zones)
		}
		if c.Kinds != nil {
			cmd += " -kinds " + strings.Join(c.Kinds, ",")
		} else if c.KeyFaults {
			cmd += " -keys"
		}
		if c.Drift != 0 {
			cmd += fmt.Sprintf(" -drift %g", c.Drift)
		}
		if c.Load {
			cmd += " -load"
		}
		if c.Knobs {
			cmd += " -knobs"
		}
		if c.Observer {
			cmd += " -observer"
		}
		if c.Capacities {
			cmd += " -capacities"
		}
		if c.TTL != sim.DefaultConfig().TTL {
			cmd += fmt.Sprintf(" -ttl %v", c.TTL)
		}
		if c.Slots != max(16, 2*c.Members) {
			cmd += fmt.Sprintf(" -slots %d", c.Slots)
		}
		if c.Warmup != 0 {
			cmd += fmt.Sprintf(" -warmup %v", c.Warmup)
		}
		if c.Drain != 0 {
			cmd += fmt.Sprintf(" -drain %v", c.Drain)
		}
		if c.Plant != "" {
			cmd += " -plant " + c.Plant
		}
		return cmd
	}
	shrunk := func(s uint64) {
		c, res := sim.Shrink(s, cfg, 200)
		fmt.Printf("seed %d shrinks to %d members, %v of faults, kinds %s: %s (replay: %s)\n",
			s, c.Members, c.Faults, strings.Join(c.Kinds, ","), res.Violation, replay(c, s))
	}
	if *seed != 0 {
		cfg.Trace = true
		res := sim.Run(*seed, cfg)
		fmt.Print(res.Trace)
		if res.Violation != "" {
			fmt.Printf("seed %d: VIOLATION at %.3fs: %s\n", *seed, res.At.Seconds(), res.Violation)
			if *shrink {
				cfg.Trace = false
				shrunk(*seed)
			}
			os.Exit(1)
		}
		fmt.Printf("seed %d: no violation (%d events, %d member-steps)\n", *seed, res.Events, res.MemberSteps)
		return
	}
	began := time.Now()
	var histories, steps, violations, promotions int
	firstViolation := -1.0
	ops := map[string]int{}
	for s := *first; time.Since(began) < *duration; s++ {
		res := sim.Run(s, cfg)
		histories++
		steps += res.MemberSteps
		promotions += res.Promotions
		for k, n := range res.Ops {
			ops[k] += n
		}
		if res.Violation != "" {
			violations++
			if firstViolation < 0 {
				firstViolation = time.Since(began).Seconds()
			}
			fmt.Printf("seed %d: VIOLATION at %.3fs: %s (replay: %s)\n", s, res.At.Seconds(), res.Violation, replay(cfg, s))
			if *shrink && violations == 1 {
				shrunk(s)
			}
		}
	}
	wall := time.Since(began)
	perMin := float64(steps) / wall.Minutes()
	kinds := make([]string, 0, len(ops))
	for k := range ops {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Printf("%d histories (seeds %d..%d), %d member-steps, %.0f member-steps per minute, %d violations\n",
		histories, *first, *first+uint64(histories)-1, steps, perMin, violations)
	for _, k := range kinds {
		fmt.Printf("  %-10s %d\n", k, ops[k])
	}
	if *asJSON {
		out := map[string]any{"histories": histories, "member_steps": steps, "member_steps_per_min": perMin,
			"violations": violations, "ops": ops, "members": *members, "first_seed": *first,
			"replicas": *replicas, "zones": *zones}
		if *drift != 0 {
			out["drift"] = *drift
		}
		if *replicas > 1 {
			out["promotions_checked"] = promotions
		}
		if firstViolation >= 0 {
			out["first_violation_s"] = firstViolation
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	}
}
