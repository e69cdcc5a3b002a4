package rink

import "go.uber.org/zap"

// publishRank publishes this member's rank if it changed.
func (r *Rink) publishRank() {
	st := &r.st
	rk := Rank{Member: r.opts.member, Index: -1, Size: len(st.cur.Members), Version: st.cur.Version}
	stopped := st.stopping && st.inc == nil
	if stopped {
		rk.Size = 0 // shut down: no longer part of any rink
	}
	if st.inc != nil && st.selfSeen && st.incompatible == nil {
		rk.Index = r.rankedIndex(r.opts.member)
		for _, w := range st.cur.Waiting {
			rk.Waiting = rk.Waiting || w.Name == r.opts.member
		}
	}
	if _, ok := st.elect[st.leader]; !ok {
		st.leader = lowestKey(st.elect)
	}
	rk.Leader = st.elect[st.leader].value
	if !st.view.wide && !r.wideView.Load() {
		// The narrow view has no election keys: the newest leader's floor
		// names it (a map, when the floor is of an older build).
		rk.Leader = st.cur.Leader
		if st.floor.Leader != "" {
			rk.Leader = st.floor.Leader
		}
	}
	if stopped {
		rk.Leader = "" // (it follows the rink no more)
	}
	rk.Settled = rk.Index >= 0 && r.settled()
	if rk.Index >= 0 || rk.Waiting {
		r.listed.Store(true)
	}
	old := r.rank.Load()
	if old != nil {
		o := old.rank
		o.changed = nil
		if o == rk {
			return
		}
	}
	next := &rankState{rank: rk, changed: make(chan struct{})}
	next.rank.changed = next.changed
	r.rank.Store(next)
	if old != nil {
		close(old.changed)
	}
	if old == nil || old.rank.Index != rk.Index || old.rank.Waiting != rk.Waiting {
		// Being ranked, promoted, moved or unranked is a state change worth
		// a line; size and leader changes show in the leader's own logs.
		r.log.Info("rank changed", zap.Int("index", rk.Index), zap.Int("size", rk.Size),
			zap.Bool("waiting", rk.Waiting), zap.Int64("version", rk.Version))
	}
	r.emit(Event{Kind: EventRankChanged, Slot: -1, Rank: rk})
	if rk.Settled && (old == nil || !old.rank.Settled) {
		r.log.Info("the rink is at rest", zap.Int64("version", rk.Version))
		r.emit(Event{Kind: EventSettled, Slot: -1, Version: rk.Version, Rank: rk})
	}
}

// settled reports whether the rink is at rest as this member sees it (see
// Rank.Settled): the leader's floor says that it plans no move after the
// applied map and that every live member acknowledged it, the map
// announces nothing and lists nobody waiting or leaving, and this member
// holds, and is letting go of, nothing but what the map gives it.
func (r *Rink) settled() bool {
	st := &r.st
	if !(st.curRev != 0 && !st.stale && st.floor.Settled(st.lineage, st.cur.Version, st.curSeq) &&
		len(st.cur.Waiting) == 0 && len(st.cur.Incoming) == 0 && len(st.cur.Leave) == 0 &&
		st.pending.n == 0 && st.waiting == 0 && len(st.draining) == 0) {
		return false
	}
	// And every ranked member's key is there: a leader that died said
	// rest in a floor that outlives it. (The narrow view has no member
	// keys: a departure shows in the leader's next map and floor.)
	return !st.view.wide || len(st.unlisted) == 0
}
