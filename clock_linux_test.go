//go:build linux

package rink

import (
	"errors"
	"math"
	"testing"
	"time"
)

// fakeClocks drives a bootClock: the monotonic clock, the wall clock and
// CLOCK_BOOTTIME, and counts the system calls.
type fakeClocks struct {
	mono, wall, slept int64
	step              int64 // added to mono and wall after each read of Go's clocks
	calls             int
	err               error
}

func (f *fakeClocks) goNow() (int64, int64) {
	m, w := f.mono, f.wall
	f.mono += f.step
	f.wall += f.step
	return m, w
}

func (f *fakeClocks) boot() (int64, error) {
	f.calls++
	return f.mono + f.slept, f.err
}

func TestBootClock(t *testing.T) {
	f := &fakeClocks{mono: 5e9, wall: 1.7e18, slept: 3e9}
	c := &bootClock{goNow: f.goNow, boot: f.boot}
	if got := c.now(); got != 8e9 || f.calls != 1 {
		t.Fatalf("first read %d after %d calls, want 8e9 after 1", got, f.calls)
	}
	f.mono, f.wall = f.mono+1e9, f.wall+1e9+int64(100*time.Microsecond) // slewing
	if got := c.now(); got != 9e9 || f.calls != 1 {
		t.Fatalf("read %d after %d calls, want 9e9 from the cached offset", got, f.calls)
	}
	// A suspend of 10 s: the kernel adds it to the wall clock and to
	// CLOCK_BOOTTIME, not to the monotonic clock.
	f.wall += 10e9
	f.slept += 10e9
	if got := c.now(); got != 19e9 || f.calls != 2 {
		t.Fatalf("read after a suspend %d after %d calls, want 19e9 after 2", got, f.calls)
	}
	if got := c.now(); got != 19e9 || f.calls != 2 {
		t.Fatalf("read %d after %d calls, want 19e9 from the cached offset", got, f.calls)
	}
	// A wall clock step back (NTP) is read again, and changes nothing.
	f.wall -= 2e9
	if got := c.now(); got != 19e9 || f.calls != 3 {
		t.Fatalf("read after a step %d after %d calls, want 19e9 after 3", got, f.calls)
	}
	// Slow readings: the offset is taken from the tightest of three, and
	// errs towards early deadlines.
	f.wall += 5e9
	f.step = int64(time.Millisecond)
	if got := c.now(); got < f.mono-f.step+f.slept || f.calls != 6 {
		t.Fatalf("slow read %d (now %d) after %d calls, want at least the time after 6", got, f.mono+f.slept, f.calls)
	}
	f.step = 0
	f.wall += 5e9
	f.err = errors.New("EINVAL")
	if got := c.now(); got != math.MaxInt64 {
		t.Fatalf("read with a failing clock %d, want the end of time", got)
	}
}

// TestFenceClockCountsLikeMonotonic checks the real CLOCK_BOOTTIME reading
// against Go's monotonic clock over a short interval.
func TestFenceClockCountsLikeMonotonic(t *testing.T) {
	b0, m0 := fenceClock(), time.Now()
	time.Sleep(20 * time.Millisecond)
	db, dm := time.Duration(fenceClock()-b0), time.Since(m0)
	if d := db - dm; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("fence clock advanced %v while the monotonic clock advanced %v", db, dm)
	}
}
