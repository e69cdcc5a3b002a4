package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	"go.uber.org/goleak"
)

func TestPeerIndex(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, &out, config{members: 3}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"m0: I am 0 of 1",
		"I am 2 of 3",
		"I am 3 of 4",     // the newcomer after the rebalance
		"m3: I am 1 of 3", // m3 moves into m1's index when m1 leaves
		"jobs 0-15 by the holder of their shard:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestBadConfig(t *testing.T) {
	if err := run(context.Background(), &testutil.Buffer{}, config{members: 1}); err == nil {
		t.Fatal("-members 1 accepted")
	}
}
