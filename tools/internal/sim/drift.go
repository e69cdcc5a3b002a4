package sim

// Clock drift (Config.Drift, rink-sim -drift): each member process's clock
// runs at a rate 1+e of the world's time, which is the etcd leader's and
// the one its leases expire by. A member's fence deadline is TTL/8 short
// of the lease's expiry by its own clock, so a clock slow by more than
// 1/8 (7/8 of a TTL on it lasting more than a TTL of the world's) lets a cut-off member act after its lease has expired and its slots
// have gone to others: drift beyond the margin is a planted bug that the
// simulator must find (TestDriftBeyondTheMarginIsFound), drift within it
// one the core must survive (TestRinkDriftHistories).

// driftStream is the second word of the seed of the stream that draws the
// processes' clock rates ("drift"): the world's stream, that everything
// else draws from, is left as it was, so a seed with drift draws the same
// faults at first, and differs from its history without drift only by its
// members' clocks (and by what they do differently then).
const driftStream = 0x6472696674

// drawDrift draws the next process's clock drift e, |e| ≤ Config.Drift:
// a third of the processes run slow by the whole bound, a third fast by
// it, and a third anywhere between (the bounds are where bugs are). It
// draws nothing without Config.Drift.
func (h *history) drawDrift() float64 {
	if h.drift == nil {
		return 0
	}
	d := h.cfg.Drift
	switch h.drift.IntN(3) {
	case 0:
		return -d
	case 1:
		return d
	}
	return d * (2*h.drift.Float64() - 1)
}
