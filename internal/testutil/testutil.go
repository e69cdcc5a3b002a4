// Package testutil holds small helpers shared by the tests of rink's
// commands and examples.
package testutil

import (
	"flag"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer collects output written by one goroutine while tests read it from
// another.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Eventually polls cond until it holds, failing the test if it does not
// within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Parallel sets -test.parallel to n unless the command line set it, for a
// TestMain, after flag.Parse, whose package's parallel tests wait on etcd
// and timers more than they compute: GOMAXPROCS at a time, go test's
// default, would leave the machine idle.
func Parallel(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
