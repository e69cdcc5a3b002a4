package rink

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		t.Skip("no RUSAGE_THREAD:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Shutdown waits for drains in awaitDrains, on the inbox's wake channel.
// Mail other than a drain (the leader's load summaries, a leaving member's
// heirs' readiness, a ghost gone, the client closed...) stays in the box;
// when takeDrained signalled for it again, the next select returned at
// once and awaitDrains spun on a core until the drain ended (found in
// review; it used 355 ms of CPU in a 400 ms drain). The mail is signalled
// again when the wait ends.
func TestAwaitDrainsDoesNotSpin(t *testing.T) {
	r := &Rink{inbox: newInbox(), log: zap.NewNop()}
	h := &slotState{changed: make(chan struct{})}
	h.runners.Store(1) // a function still runs on a given-away slot
	now := time.Now()
	const drain = 400 * time.Millisecond
	r.st.draining = map[*slotState]drainEntry{h: {slot: 0, since: now, deadline: now.Add(drain)}}
	r.inbox.send(func(m *mail) { m.heirs, m.heirsSet = map[string]int64{"b": 2}, true })
	done := make(chan time.Duration)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		before := threadCPU(t)
		r.awaitDrains(context.Background())
		done <- threadCPU(t) - before
	}()
	cpu := <-done
	if cpu > drain/8 {
		t.Fatalf("awaitDrains used %v of CPU waiting %v for a drain: it spins on the wake token", cpu, drain)
	}
	select {
	case <-r.inbox.wake:
	default:
		t.Fatal("the mail left in the box is not signalled after the wait")
	}
	if m := r.inbox.take(); !m.heirsSet {
		t.Fatal("the mail left in the box is gone")
	}
}
