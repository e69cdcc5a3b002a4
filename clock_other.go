//go:build !linux

package rink

// sysFenceClock returns the clock fence deadlines are kept on: Go's
// monotonic clock here. On Linux it is CLOCK_BOOTTIME, which also counts
// time the host spent suspended; elsewhere a member whose host was suspended
// longer than its deadline trusts its lease until a renewal fails.
func sysFenceClock() func() int64 { return monoNow }
