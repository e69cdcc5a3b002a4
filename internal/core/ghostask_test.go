package core

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestGhostAskTTLZeroIsAlive drives the ghost's lease question with canned
// answers: a TTL of 0 (under a second left) is a live lease, asked about
// again after the poll's wait; only a TTL below zero ends the questions,
// with a map read after it when the core is to be told; errors wait what
// retry draws, and a failed map read starts the questions again.
func TestGhostAskTTLZeroIsAlive(t *testing.T) {
	now := time.Unix(100, 0)
	retry := func() time.Duration { return 7 * time.Millisecond }
	g, step := NewGhostAsk("a", 0x10, true, 2*time.Second, now, retry, zap.NewNop())
	if !step.AskTTL || step.After != 0 {
		t.Fatalf("first step %+v, want a question at once", step)
	}
	for i, c := range []struct {
		ttl   int64
		err   error
		after time.Duration
	}{
		{0, nil, 50 * time.Millisecond},  // under a second left: alive
		{5, nil, 100 * time.Millisecond}, // alive, the poll doubles
		{0, errors.New("unavailable"), 7 * time.Millisecond},
		{1, nil, 400 * time.Millisecond}, // the error counted as a question
		{9, nil, 500 * time.Millisecond}, // a quarter of the session TTL at most
	} {
		step = g.TTL(c.ttl, c.err, now)
		if !step.AskTTL || step.ReadMap || step.Done || step.After != c.after {
			t.Fatalf("answer %d (ttl %d, err %v): %+v, want another question after %v", i, c.ttl, c.err, step, c.after)
		}
	}
	if step = g.TTL(-1, nil, now); !step.ReadMap || step.Done {
		t.Fatalf("lease gone: %+v, want the map read", step)
	}
	if step = g.MapRead(0, 0, errors.New("timeout")); !step.AskTTL || step.After != 7*time.Millisecond {
		t.Fatalf("map read failed: %+v, want a question after the retry", step)
	}
	if step = g.TTL(0, nil, now); step.After != 50*time.Millisecond {
		t.Fatalf("after a failed map read: %+v, want the poll from its start", step)
	}
	g.TTL(-1, nil, now)
	if step = g.MapRead(40, 33, nil); !step.Done || step.Rev != 40 || step.MapRev != 33 {
		t.Fatalf("map read: %+v, want done with revisions 40 and 33", step)
	}

	// Not telling the core: a gone lease ends the questions, with no read.
	g, _ = NewGhostAsk("a", 0x11, false, 2*time.Second, now, retry, zap.NewNop())
	if step = g.TTL(0, nil, now); step.Done {
		t.Fatal("a TTL of 0 ended the questions")
	}
	if step = g.TTL(-1, nil, now); !step.Done || step.ReadMap {
		t.Fatalf("lease gone, not telling: %+v, want done", step)
	}
}

// TestGhostPoll: 50 ms doubling per answer, capped by the lease's time
// left and a quarter of the session TTL, never under 50 ms.
func TestGhostPoll(t *testing.T) {
	for _, c := range []struct {
		asked int
		left  int64
		want  time.Duration
	}{
		{0, 10, 50 * time.Millisecond},
		{3, 10, 400 * time.Millisecond},
		{8, 10, 2500 * time.Millisecond},
		{20, 10, 2500 * time.Millisecond},
		{8, 1, time.Second},
		{8, 0, 50 * time.Millisecond},
	} {
		if got := GhostPoll(c.asked, c.left, 10*time.Second); got != c.want {
			t.Errorf("GhostPoll(%d, %d, 10s) = %v, want %v", c.asked, c.left, got, c.want)
		}
	}
}
