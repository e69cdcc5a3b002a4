package core

import (
	"math/rand/v2"
	"time"
)

// Backoff doubles a wait from 50 ms to 5 s, with jitter: each wait is
// drawn from [d/2, d].
//
// Invariant: Rnd is set (the simulator's source in a simulated member, one
// of the backoff's own otherwise), and d is 0 or within [50 ms, 5 s].
type Backoff struct {
	d   time.Duration
	Rnd *rand.Rand // the jitter's source
}

// NewBackoff returns a backoff drawing its jitter from rnd.
func NewBackoff(rnd *rand.Rand) *Backoff { return &Backoff{Rnd: rnd} }

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, 50*time.Millisecond), 5*time.Second)
	return b.d/2 + time.Duration(b.Rnd.Int64N(int64(b.d/2)+1))
}

// Reset starts the waits again from 50 ms.
func (b *Backoff) Reset() { b.d = 0 }
