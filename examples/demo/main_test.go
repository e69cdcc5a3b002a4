package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	"go.uber.org/goleak"
)

// TestDemo plays the whole story in plain mode and checks what it reports.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{members: 3, roles: 16, ttl: 2 * time.Second, delay: 500 * time.Millisecond, plain: true}
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"embedded etcd at 127.0.0.1:",
		"m3 joined",  // the newcomer of the rolling replacement
		"m1 leaves",  // ...replaces m1
		"m2 crashes", // the crash
		"m4 joined",  // the scale-out
		"the end",    // the story finishes by itself
		"summary: ",  // with a summary of the moves
		"(leader)",   // and shows the leader
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The newcomer took m1's index.
	if !regexp.MustCompile(`partition:\d+ +m1 -> m3`).MatchString(got) {
		t.Errorf("no handover from m1 to m3 in:\n%s", got)
	}
	if t.Failed() {
		t.Log(got)
	}
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []config{
		{members: 1, roles: 1, ttl: 2 * time.Second},
		{members: 2, roles: 0, ttl: 2 * time.Second},
		{members: 2, roles: 1, ttl: time.Second},
		{members: 2, roles: 1, ttl: 2 * time.Second, delay: -1},
	} {
		if err := run(context.Background(), &bytes.Buffer{}, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
