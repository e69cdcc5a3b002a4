package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	"go.uber.org/goleak"
)

// TestExactlyOnce runs producers and 3 workers through a rolling
// replacement and a crash; run fails unless every task was processed
// exactly once.
func TestExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{workers: 3, partitions: 64, tasks: 600, ttl: 2 * time.Second}
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"worker-0 leaves (rolling replacement by worker-3)",
		"worker-1 crashes",
		"processed=false",
		"tasks: 600 produced, 600 processed exactly once, 0 more than once, 0 missing; 1 stale attempts refused",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{workers: 1, partitions: 1, tasks: 1, ttl: 2 * time.Second},
		{workers: 2, partitions: 0, tasks: 1, ttl: 2 * time.Second},
		{workers: 2, partitions: 1, tasks: 0, ttl: 2 * time.Second},
		{workers: 2, partitions: 1, tasks: 1, ttl: time.Second},
	} {
		if err := run(context.Background(), &testutil.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
