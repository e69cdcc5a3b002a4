package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/testutil"
)

// quick is a small, short run: 3 members, a short rebalance delay and
// warm-up, a short tail.
var quick = config{members: 3, shards: 32, keys: 512, preload: 12, rate: 300,
	latency: 2 * time.Millisecond, warmup: time.Second, drain: time.Second, delay: 2 * time.Second, tail: 300 * time.Millisecond}

// TestCache runs the example and checks the shape of its output: a hit
// rate for each change, with warm-up off and on, and with warm-up off no
// move announced and no key preloaded. It does not compare the hit rates:
// they depend on the machine's load.
func TestCache(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, &out, quick); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	re := regexp.MustCompile(`(?m)^warm-up (off|on \(1s\)), (rolling deploy \(3 members replaced\)|scale-out 3 → 4): hit rate ([0-9.]+) \(([0-9]+) requests, ([0-9]+) misses, [0-9]+ routed again\) over [^;]+; [0-9]+ slots drained \(longest [^)]+\), ([0-9]+) moves announced ahead, ([0-9]+) keys preloaded$`)
	m := re.FindAllStringSubmatch(got, -1)
	want := [][2]string{{"off", "rolling"}, {"off", "scale-out"}, {"on (1s)", "rolling"}, {"on (1s)", "scale-out"}}
	if len(m) != len(want) {
		t.Fatalf("%d lines of hit rates, want %d:\n%s", len(m), len(want), got)
	}
	for i, w := range want {
		line := m[i]
		if line[1] != w[0] || !strings.HasPrefix(line[2], w[1]) {
			t.Errorf("line %d is %q, want warm-up %s, %s", i+1, line[0], w[0], w[1])
		}
		rate, _ := strconv.ParseFloat(line[3], 64)
		requests, _ := strconv.Atoi(line[4])
		misses, _ := strconv.Atoi(line[5])
		if requests == 0 || rate < 0 || rate > 1 || misses > requests {
			t.Errorf("line %d: %q", i+1, line[0])
		}
		if w[0] == "off" && (line[6] != "0" || line[7] != "0") {
			t.Errorf("warm-up off, yet moves announced or keys preloaded: %q", line[0])
		}
	}
	if !regexp.MustCompile(`(?m)^misses during the changes: [0-9]+ with warm-up off, [0-9]+ with warm-up on$`).MatchString(got) {
		t.Errorf("no summary line:\n%s", got)
	}
}

func TestBadConfig(t *testing.T) {
	for _, change := range []func(*config){
		func(c *config) { c.members = 1 },
		func(c *config) { c.shards = 0 },
		func(c *config) { c.keys = c.shards - 1 },
		func(c *config) { c.preload = 0 },
		func(c *config) { c.rate = 0 },
		func(c *config) { c.latency = -time.Second },
		func(c *config) { c.warmup = 0 },
		func(c *config) { c.delay = c.warmup },
	} {
		cfg := quick
		change(&cfg)
		if err := run(context.Background(), &testutil.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
