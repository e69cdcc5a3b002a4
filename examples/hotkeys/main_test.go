package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/testutil"
)

func TestHotkeys(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, &out, config{members: 3, keys: 60, seconds: 6}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// Balanced by load, the most loaded member serves less above the mean
	// than balanced by count (the tolerance is 10 %; the test allows more,
	// for a machine busy with other tests).
	m := regexp.MustCompile(`(?m)^balanced by (slot count|load).*serves ([0-9.]+)× the mean$`).FindAllStringSubmatch(out.String(), -1)
	if len(m) != 2 {
		t.Fatalf("output:\n%s", out.String())
	}
	byCount, _ := strconv.ParseFloat(m[0][2], 64)
	byLoad, _ := strconv.ParseFloat(m[1][2], 64)
	if byLoad > 1.25 || byLoad > byCount {
		t.Errorf("by load %.2f× the mean, by count %.2f×:\n%s", byLoad, byCount, out.String())
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []config{{members: 1, keys: 1, seconds: 3}, {members: 2, keys: 0, seconds: 3}, {members: 2, keys: 1, seconds: 2}} {
		if err := run(context.Background(), &testutil.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
