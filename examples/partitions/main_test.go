package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// TestExactlyOnce runs producers and 3 workers through a rolling
// replacement and a crash; run fails unless every task was processed
// exactly once.
func TestExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{workers: 3, partitions: 64, tasks: 600, ttl: 2 * time.Second}
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.b.String())
	}
	got := out.b.String()
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
		if err := run(context.Background(), &buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
