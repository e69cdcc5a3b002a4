//go:build linux

package rink

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// sysFenceClock returns the clock fence deadlines are kept on. On Linux it
// is CLOCK_BOOTTIME, which, unlike CLOCK_MONOTONIC (Go's monotonic clock),
// keeps counting while the host is suspended, as the etcd server's lease
// clock does. A kernel without it (older than 2.6.39) gets the monotonic
// clock.
func sysFenceClock() func() int64 {
	c := &bootClock{goNow: goNow, boot: readBoottime}
	if _, err := c.boot(); err != nil {
		return monoNow
	}
	return c.now
}

// goNow reads Go's clocks (through the vDSO, no system call): the monotonic
// clock as monoNow does, and the wall clock, in nanoseconds.
func goNow() (mono, wall int64) {
	t := time.Now()
	return int64(t.Sub(monoBase)), t.UnixNano()
}

func readBoottime() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, err
	}
	return ts.Nano(), nil
}

// bootClock reads CLOCK_BOOTTIME without a system call on most reads: role
// contexts' Err reads the fence clock on every check, and clock_gettime
// through a system call costs about ten times a read of Go's clocks.
//
// CLOCK_BOOTTIME is the monotonic clock plus the time the host has spent
// suspended, so it keeps a fixed offset from the monotonic clock until the
// next resume; and on a resume the kernel adds the time slept to the wall
// clock as well. So the clock keeps the offset, with the wall clock's own
// offset from the monotonic clock at that time, and reads CLOCK_BOOTTIME
// again whenever the latter has moved by more than bootResync: after a
// resume, or a step or some slewing of the wall clock.
type bootClock struct {
	goNow func() (mono, wall int64)
	boot  func() (int64, error)
	last  atomic.Pointer[bootAnchor]
}

// bootAnchor is what a reading of CLOCK_BOOTTIME established.
type bootAnchor struct {
	skew int64 // wall clock minus monotonic clock
	off  int64 // CLOCK_BOOTTIME minus monotonic clock
}

const (
	// bootResync is how far the wall clock may move against the monotonic
	// clock before CLOCK_BOOTTIME is read again. A suspend shorter than this
	// can go unseen: far below any fence margin (TTL/8).
	bootResync = int64(time.Millisecond)
	// bootBracket bounds the time between the readings of the monotonic
	// clock around a read of CLOCK_BOOTTIME that the offset is taken from.
	bootBracket = int64(50 * time.Microsecond)
)

func (c *bootClock) now() int64 {
	mono, wall := c.goNow()
	if a := c.last.Load(); a != nil && abs64(wall-mono-a.skew) <= bootResync {
		return mono + a.off
	}
	// Take the offset from the tightest of a few brackets: a delay between
	// the readings (preemption) would skew it. The monotonic reading before
	// the system call makes any error an early deadline, never a late one.
	var best *bootAnchor
	width := int64(math.MaxInt64)
	for try := 0; try < 3 && width > bootBracket; try++ {
		if try > 0 {
			mono, wall = c.goNow()
		}
		boot, err := c.boot()
		if err != nil {
			// It worked at start, so this cannot happen; if it does,
			// every deadline has passed: fencing is the safe side.
			return math.MaxInt64
		}
		after, _ := c.goNow()
		if w := after - mono; w < width {
			width, best = w, &bootAnchor{skew: wall - mono, off: boot - mono}
		}
	}
	c.last.Store(best)
	return mono + best.off
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
