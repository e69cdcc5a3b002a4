package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// World is one simulated history: a virtual clock, one seeded source of
// randomness, the model of etcd, and the events scheduled on them. It runs
// in one goroutine: every delay, every delivery and every fault is an
// event drawn from the seed, so a seed gives one history, byte for byte
// (see Trace).
//
// Invariants: now only rises; every event in queue is at now or later;
// events at one time run in the order they were scheduled (seq); the etcd
// model's clock is now, and its leases due by now have expired.
type World struct {
	Seed  uint64
	Etcd  *Etcd
	rng   *rand.Rand
	now   time.Duration
	queue eventQueue
	seq   uint64
	trace strings.Builder
	// watched is every watch a client opened, by ID, for the pump (see
	// pump): after a write, each owes its events.
	watched map[int64]*Watch
	// Quiet drops the trace (a fast run; a failing seed is replayed with
	// it).
	Quiet bool
	// FailUntil: until then etcd fails half the requests (see do).
	FailUntil time.Duration
}

// NewWorld returns an empty world at time 0 (minTTL: see NewEtcd).
func NewWorld(seed uint64, minTTL int64) *World {
	return &World{Seed: seed, Etcd: NewEtcd(minTTL), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), watched: map[int64]*Watch{}}
}

// Now returns the virtual time.
func (w *World) Now() time.Duration { return w.now }

// Rand returns the world's source of randomness: everything the history
// draws comes from it.
func (w *World) Rand() *rand.Rand { return w.rng }

// Between draws a duration in [lo, hi].
func (w *World) Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

// After schedules fn to run d from now (d < 0 counts as 0).
func (w *World) After(d time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.queue, &event{at: w.now + max(d, 0), seq: w.seq, fn: fn})
}

// Step runs the next event: the clock moves to its time (leases due by
// then expire first) and it runs. It returns false when nothing is
// scheduled.
func (w *World) Step() bool {
	if w.queue.Len() == 0 {
		return false
	}
	e := heap.Pop(&w.queue).(*event)
	w.advance(e.at)
	e.fn()
	return true
}

// RunUntil runs every event up to time t, and leaves the clock at t.
func (w *World) RunUntil(t time.Duration) {
	for w.queue.Len() > 0 && w.queue[0].at <= t {
		w.Step()
	}
	w.advance(t)
}

// advance moves the clock to t, expiring the leases due by then, and
// pumps the watches if that wrote anything.
func (w *World) advance(t time.Duration) {
	if t <= w.now {
		return
	}
	rev := w.Etcd.Rev()
	w.Etcd.Advance(t - w.now)
	w.now = t
	if w.Etcd.Rev() != rev {
		w.Tracef("etcd: leases expired, revision %d", w.Etcd.Rev())
		w.pump()
	}
}

// Tracef adds a line to the trace, stamped with the virtual time.
func (w *World) Tracef(format string, args ...any) {
	if w.Quiet {
		return
	}
	fmt.Fprintf(&w.trace, "%12.6f  ", w.now.Seconds())
	fmt.Fprintf(&w.trace, format, args...)
	w.trace.WriteByte('\n')
}

// Trace returns the trace so far: what happened, line by line.
func (w *World) Trace() string { return w.trace.String() }

// event is one scheduled thing.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// eventQueue orders events by time, then by scheduling order.
type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
