package sim

import (
	"slices"
	"time"
)

// "restore-unseen" is a restore of etcd that the members which could
// notice it do not see happen, and that the members which see it cannot
// notice. It is drawn only when named in Config.Kinds (rink-sim -kinds),
// so that every seed draws and plays as before it was added.
//
// What an operator does, and what the network does meanwhile: a snapshot
// of etcd is saved (etcdctl snapshot save, as a periodic backup does) just
// as some members, "behind", are cut off etcd or stopped (a partition, a
// SIGSTOP, a suspended VM) and apply no map from then on; the rink goes on
// without them for a while (maps, joins, acknowledgements, leases granted).
// Then the rest of the rink, "ahead", loses etcd at the same moment (the
// site that holds etcd and them goes dark: each ahead process is cut off,
// stopped, or crashes with its machine) and etcd is restored from that
// snapshot elsewhere (etcdutl snapshot restore --bump-revision
// --mark-compacted, see restore.go). Behind comes back soon after, into a
// restored history whose map is the one it last applied: nothing it sees
// went back, so it notices nothing. The ahead processes that were cut off
// or stopped come back later, or never before their deadlines; they may
// hold slots that maps erased by the restore gave them, and may notice
// the restore (and drop the restored lineage) only when they come back.
//
// The draws: behind is each live member with probability 1/2 (at least
// one, and not all), cut off or stopped (1/2 each) from the snapshot until
// the restore plus [0, TTL/2], and half the time a new process joins in
// [0, TTL/2] in its place (a controller that gives up on a node it cannot
// reach starts the pod elsewhere, under a new name). The restore comes
// [TTL/4, 2 TTL] after the snapshot (within the time of faults), so that
// behind sometimes outlives its lease's deadline (it fences and rejoins,
// and its restored key is its own again) and sometimes does not. At the
// restore each ahead process is, with probability 1/5 each, left alone
// (it sees the restore at once, as with "restore"), cut off, stopped,
// crashed, or shut down gracefully (its hand-over begun at that instant,
// so that its requests reach the restored etcd); a cut or a stop lasts
// [0, 2 TTL], and a crashed process starts again under its name (as a
// restarted pod), and one that left is replaced by a new process, as
// after "leave", while there are fewer live ones than Config.Members. As
// after "restore", no process starts within a TTL of the restore
// (docs/operations.md), and one still joining then is stopped and started
// again after.
//
// One such fault is under way at a time; a draw while one is does nothing.
//
// "restore-unseen-lag" (drawn only when named, so that restore-unseen's
// seeds play as before) is the same fault, but each ahead process left
// alone at the restore has its watch streams lag for [0, TTL/2] from it
// (a congested stream, or one behind a proxy that is slow to pass etcd's
// cancellation on): its requests reach the restored etcd and are answered
// while its watches, cancelled by the restore's compaction, have not said
// so yet. An answer it gets then (a ghost's lease gone, granted after
// the snapshot) is of a history its view does not follow (see rink's
// endGhost).

// unseenRestore is a restore-unseen under way: its snapshot, and the
// processes cut off or stopped behind it.
type unseenRestore struct {
	snap   *Snapshot
	behind []*simMember
	at     time.Duration // when etcd is restored
	lag    bool          // restore-unseen-lag: the processes left alone have their watches lag
}

// isolate cuts m off, or stops it (stop), for d.
func (h *history) isolate(m *simMember, stop bool, d time.Duration) {
	if stop {
		m.env.pausedUntil = max(m.env.pausedUntil, h.w.now+d)
		h.w.Tracef("fault: restore-unseen: %s stopped for %v", m.name, d)
		return
	}
	h.w.Tracef("fault: restore-unseen: %s cut off for %v", m.name, d)
	m.c.Cut(d)
}

// restoreUnseen begins a restore-unseen (see above): it saves the
// snapshot, isolates behind, and schedules the restore. It reports
// whether it did anything.
func (h *history) restoreUnseen(live []*simMember, lag bool) bool {
	w := h.w
	if h.unseen != nil || len(live) < 2 {
		return false
	}
	ttl := h.cfg.TTL
	var behind []*simMember
	for _, m := range live {
		if h.rng.IntN(2) == 0 {
			behind = append(behind, m)
		}
	}
	switch len(behind) {
	case 0:
		behind = append(behind, live[h.rng.IntN(len(live))])
	case len(live):
		i := h.rng.IntN(len(behind))
		behind = slices.Delete(behind, i, i+1)
	}
	// (Within the time of faults: the quiet time after it must see the
	// rink settle.)
	u := &unseenRestore{snap: w.Etcd.Snapshot(), behind: behind, at: min(w.now+w.Between(ttl/4, 2*ttl), max(h.cfg.Faults, w.now)), lag: lag}
	h.unseen = u
	w.Tracef("fault: restore-unseen: snapshot saved at %d, etcd restored from it in %v", u.snap.Rev(), u.at-w.now)
	n := len(live) // (live processes, and the replacements started: as join, at most twice the members)
	for _, m := range behind {
		h.isolate(m, h.rng.IntN(2) == 0, u.at-w.now+w.Between(0, ttl/2))
		if h.rng.IntN(2) == 0 && n < 2*h.cfg.Members {
			n++
			// A replacement for it (a controller that gives up on a
			// node it cannot reach starts the pod elsewhere).
			w.Tracef("fault: restore-unseen: a replacement for %s joins", m.name)
			h.spawn(w.Between(0, ttl/2))
		}
	}
	w.After(u.at-w.now, func() { h.unseenRestored(u) })
	return true
}

// unseenRestored isolates (or crashes) the processes ahead of u's
// snapshot, and restores etcd from it.
func (h *history) unseenRestored(u *unseenRestore) {
	w := h.w
	ttl := h.cfg.TTL
	h.unseen = nil
	left := 0
	for _, m := range slices.Clone(h.members) {
		if !m.alive || m.doomed || slices.Contains(u.behind, m) {
			continue
		}
		switch h.rng.IntN(5) {
		case 0: // it sees the restore (late, with restore-unseen-lag)
			if u.lag {
				m.c.LagWatches(w.Between(0, ttl/2))
			}
		case 1:
			h.isolate(m, false, w.Between(0, 2*ttl))
		case 2:
			h.isolate(m, true, w.Between(0, 2*ttl))
		case 3:
			m.alive = false
			m.m.Crash()
			h.forget(m)
			w.Tracef("fault: restore-unseen: %s crashes", m.name)
			h.start(m.idx, w.Between(0, ttl)) // (no sooner than a TTL after the restore: see restoreFrom)
		case 4:
			// Shut down gracefully as etcd comes back (a rolling
			// restart, or the site drained): its hand-over's requests
			// reach the restored etcd.
			m.alive = false
			h.leave(m)
			h.forget(m)
			w.Tracef("fault: restore-unseen: %s leaves", m.name)
			left++
		}
	}
	// As after "leave", new processes take the place of those that left
	// (no sooner than a TTL after the restore: see restoreFrom).
	live := 0
	for _, m := range h.members {
		if m.alive && !m.doomed {
			live++
		}
	}
	for ; left > 0 && live < h.cfg.Members; left-- {
		live++
		h.spawn(w.Between(0, 2*ttl))
	}
	h.restoreFrom(u.snap)
}
