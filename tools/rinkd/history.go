package rinkd

import (
	"context"
	"sync"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// historyLen is how many map changes rinkd keeps for watches that resume.
const historyLen = 1024

// history keeps the latest changes of the rink's map, as the Observer saw
// them, for WatchAssignments.
type history struct {
	mu      sync.Mutex
	cur     rink.State
	entries []entry       // the newest historyLen, oldest first; seqs consecutive
	next    uint64        // the seq of the next entry
	changed chan struct{} // closed (and replaced) when an entry is added
}

// entry is one observed change: the map went from prev to version.
type entry struct {
	seq           uint64
	lineage       int64
	prev, version int64
	changes       []rink.Change
}

func newHistory(st rink.State) *history {
	return &history{cur: st, changed: make(chan struct{})}
}

// follow records the Observer's states until ctx ends.
func (h *history) follow(ctx context.Context, obs *rink.Observer) {
	st := obs.State()
	h.mu.Lock()
	h.cur = st
	h.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-obs.Done():
			return
		case <-st.Changed():
		}
		next := obs.State()
		if next.Version != st.Version || next.Lineage != st.Lineage {
			h.add(st, next)
		} else {
			h.mu.Lock()
			h.cur = next
			h.mu.Unlock()
		}
		st = next
	}
}

func (h *history) add(prev, next rink.State) {
	e := entry{lineage: next.Lineage, prev: prev.Version, version: next.Version, changes: rink.Diff(prev, next)}
	if prev.Lineage != next.Lineage {
		e.prev = 0
	}
	h.mu.Lock()
	e.seq = h.next
	h.next++
	h.entries = append(h.entries, e)
	if len(h.entries) > historyLen {
		h.entries = append(h.entries[:0:0], h.entries[len(h.entries)-historyLen:]...)
	}
	h.cur = next
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// since returns the entries after (lineage, version) when the history
// still has them all; ok is false when it does not (a snapshot is needed).
// seq is the seq of the entry after the last returned. A version the
// history shows more than once (an operator wrote an older map back, which
// members follow as the next map) cannot tell which map the watcher saw:
// it needs a snapshot too.
func (h *history) since(lineage, version int64) (es []entry, seq uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if version == 0 {
		return nil, h.next, false
	}
	if len(h.entries) == 0 {
		return nil, h.next, lineage == h.cur.Lineage && version == h.cur.Version
	}
	// at: the map was at (lineage, version) before entries[at]; n: how
	// many times the history shows it.
	at, n := 0, 0
	if e := h.entries[0]; e.lineage == lineage && e.prev == version {
		n++
	}
	for i, e := range h.entries {
		if e.lineage == lineage && e.version == version {
			at = i + 1
			n++
		}
	}
	if n != 1 || at < len(h.entries) && h.entries[at].lineage != lineage {
		return nil, h.next, false // (across a new lineage: a snapshot too)
	}
	return append([]entry(nil), h.entries[at:]...), h.next, true
}

// after returns the entries from seq on, and the channel closed at the next
// addition; ok is false when seq has fallen out of the history.
func (h *history) after(seq uint64) (es []entry, next uint64, changed <-chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq == h.next {
		return nil, seq, h.changed, true
	}
	if len(h.entries) == 0 || seq < h.entries[0].seq {
		return nil, h.next, h.changed, false
	}
	return append([]entry(nil), h.entries[seq-h.entries[0].seq:]...), h.next, h.changed, true
}

func (h *history) snapshot() (*rinkv1.AssignmentEvent, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.cur
	ev := &rinkv1.AssignmentEvent{Version: st.Version, Lineage: st.Lineage, Snapshot: true}
	for _, m := range st.Members {
		ev.Members = append(ev.Members, &rinkv1.MemberInfo{Name: m.Name, Index: int32(m.Index), Slots: int32(m.Slots),
			Secondaries: int32(m.Secondaries), Zone: m.Zone})
	}
	return ev, h.next
}

func changesEvent(e entry) *rinkv1.AssignmentEvent {
	ev := &rinkv1.AssignmentEvent{Version: e.version, Lineage: e.lineage}
	for _, c := range e.changes {
		ev.Changes = append(ev.Changes, &rinkv1.Change{Kind: c.Kind, Member: c.Member, Index: int32(c.Index),
			From: int32(c.From), Slots: int32(c.Slots), Text: c.String()})
	}
	return ev
}

// WatchAssignments implements rinkv1.RinkServer.
func (s *Server) WatchAssignments(req *rinkv1.WatchAssignmentsRequest, stream rinkv1.Rink_WatchAssignmentsServer) error {
	es, seq, ok := s.hist.since(req.GetLineage(), req.GetFromVersion())
	if !ok {
		snap, next := s.hist.snapshot()
		snap.Reset_ = req.GetFromVersion() != 0
		if err := stream.Send(snap); err != nil {
			return err
		}
		seq = next
	}
	for _, e := range es {
		if err := stream.Send(changesEvent(e)); err != nil {
			return err
		}
	}
	for {
		es, next, changed, ok := s.hist.after(seq)
		if !ok { // fell behind the history: start again from a snapshot
			snap, n := s.hist.snapshot()
			snap.Reset_ = true
			if err := stream.Send(snap); err != nil {
				return err
			}
			seq = n
			continue
		}
		for _, e := range es {
			if err := stream.Send(changesEvent(e)); err != nil {
				return err
			}
		}
		seq = next
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-s.ctx.Done():
			return status.Error(codes.Unavailable, "rinkd: stopped")
		}
	}
}
