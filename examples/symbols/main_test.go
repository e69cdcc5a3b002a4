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

func TestSymbols(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := config{members: 3, orders: 120, pairs: []string{"BTC/ETH", "ETH/USDT", "SOL/USDC", "XRP/USDT", "ADA/USDT"}}
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.b.String())
	}
	got := out.b.String()
	for _, want := range []string{"orders persisted: 120 of 120 sent", "trader-0 leaves"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "late write") && !strings.Contains(got, "stale owner: write refused") {
		t.Errorf("a stale write was not refused:\n%s", got)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{members: 1, orders: 1, pairs: []string{"A/B"}},
		{members: 2, orders: 0, pairs: []string{"A/B"}},
		{members: 2, orders: 1, pairs: []string{""}},
	} {
		if err := run(context.Background(), &buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
