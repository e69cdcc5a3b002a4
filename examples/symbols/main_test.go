package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	"go.uber.org/goleak"
)

func TestSymbols(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := config{members: 3, orders: 120, pairs: []string{"BTC/ETH", "ETH/USDT", "SOL/USDC", "XRP/USDT", "ADA/USDT"}}
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"orders persisted: 120 of 120 sent", "trader-0 leaves", "a newer holder claimed the pair: write refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []config{
		{members: 1, orders: 1, pairs: []string{"A/B"}},
		{members: 2, orders: 0, pairs: []string{"A/B"}},
		{members: 2, orders: 1, pairs: []string{""}},
	} {
		if err := run(context.Background(), &testutil.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
