package rink

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ackView is the leader's view of the members, their acknowledgements and
// the map, as of one revision, for computing the floor.
type ackView struct {
	members map[string]ackMember // live member keys
	acks    map[string]ackKey
	lineage int64 // the map key's create revision; 0 while it is absent
	version int64
	seq     int64            // the map key's etcd version
	ranked  map[string]bool  // the members the map ranks
	marks   []mapMark        // the map's puts seen in this lineage, oldest first (see seqAt)
	changes core.ChangeLog   // which map put last changed each member (see still.go)
	mapRev  int64            // the map key's mod revision
	whole   *wire.Map        // the map of seq, when the view knows it (see records.go)
	snap    *mvccpb.KeyValue // the snapshot key as last seen
	floor   []byte           // the floor key's value; nil while it is absent
}

// ackMember is a live member key in the leader's view.
type ackMember struct {
	lease     int64
	createRev int64
	// carried is the acknowledgement the member wrote under an earlier
	// lease of the same key (a resume rebinds the key to a new lease, and
	// the old lease takes the old ack key with it), if the view saw it.
	// An acknowledgement speaks of the process, whose view never goes
	// back, whatever its lease: it stays a bound until the member writes
	// one under its new lease.
	carried wire.AckValue
}

// mapMark is one put of the map key: its mod revision and seq.
type mapMark struct{ rev, seq int64 }

// maxMarks bounds how many map puts the view remembers.
const maxMarks = 1024

type ackKey struct {
	lease int64
	wire.AckValue
}

func (v *ackView) put(k keys, kv *mvccpb.KeyValue, listed bool) {
	key := string(kv.Key)
	switch {
	case k.IsMember(key):
		// Stray member keys are left out, as members leave them out of
		// their views (the run goroutine logs them); a put that makes a
		// key stray takes its member out.
		name, ok := k.LiveMember(kv)
		if !ok {
			delete(v.members, name)
			v.changes.Forget(name)
			return
		}
		m := ackMember{lease: kv.Lease, createRev: kv.CreateRevision}
		if old, ok := v.members[name]; ok && old.createRev == m.createRev {
			m.carried = old.carried
			if a, ok := v.acks[name]; ok && old.lease != m.lease && a.lease == old.lease && a.Seq > 0 {
				m.carried = a.AckValue // a resume: the old lease's ack key goes next
			}
		}
		v.members[name] = m
	case k.IsAck(key):
		a := ackKey{lease: kv.Lease}
		_ = json.Unmarshal(kv.Value, &a.AckValue) // an unreadable value acknowledges nothing
		v.acks[k.AckName(key)] = a
	case k.IsMap(key):
		var version int64
		var shape *core.MapShape // nil: unknown (a change record this view cannot apply)
		if c, ok := wire.DecodeRecord(kv.Value); ok {
			version = c.Version
			switch {
			case v.snap != nil && v.snap.ModRevision == kv.ModRevision:
				shape = v.shapeOf(v.snap.Value)
			case v.whole != nil && !listed && kv.CreateRevision == v.lineage && kv.Version == v.seq+1:
				if m, err := wire.Apply(v.whole, &c); err == nil {
					v.whole, shape = &m, &core.MapShape{Members: m.Members, Table: m.Table}
				}
			}
		} else {
			var m struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal(kv.Value, &m) // an unusable map: members refuse it, the floor follows its version
			version, shape = m.Version, v.shapeOf(kv.Value)
		}
		if kv.CreateRevision != v.lineage || listed || shape == nil {
			v.marks = v.marks[:0]
			v.changes.Reset()
		}
		if len(v.marks) == maxMarks {
			v.marks = append(v.marks[:0], v.marks[maxMarks/2:]...)
		}
		v.marks = append(v.marks, mapMark{kv.ModRevision, kv.Version})
		v.lineage, v.version, v.seq, v.mapRev = kv.CreateRevision, version, kv.Version, kv.ModRevision
		if shape == nil {
			v.whole = nil // (ranked stays as it was: it only says when the rink is at rest)
			return
		}
		v.seeShape(*shape)
	case k.IsSnapshot(key):
		v.snap = kv
		if v.whole == nil && v.mapRev == kv.ModRevision && v.seq > 0 {
			// The whole map written with a record this view could not apply.
			if shape := v.shapeOf(kv.Value); shape != nil {
				v.changes.Reset()
				v.seeShape(*shape)
			}
		}
	case k.IsFloor(key):
		v.floor = kv.Value
	}
}

// shapeOf decodes a whole map for the view, keeping it (whole) for the
// change records that follow; nil when it does not decode.
func (v *ackView) shapeOf(value []byte) *core.MapShape {
	m, err := wire.DecodeMap(value, wire.PeekSlots(value))
	if err != nil {
		v.whole = nil
		return nil
	}
	v.whole = &m
	return &core.MapShape{Members: m.Members, Table: m.Table}
}

// seeShape records the shape of the map of the view's seq.
func (v *ackView) seeShape(shape core.MapShape) {
	v.changes.See(v.seq, shape)
	clear(v.ranked)
	for _, name := range shape.Members {
		v.ranked[name] = true
	}
}

// present reports whether a member may still hold slots: its key, or its
// acknowledgement key (bound to its lease), is in the view.
func (v *ackView) present(name string) bool {
	_, member := v.members[name]
	_, acked := v.acks[name]
	return member || acked
}

// unkeyed counts the members the map ranks that have no member key in
// the view, other than covered (see aggregation's floor: they count as
// ghosts whose bounds it does not know).
func (v *ackView) unkeyed(covered map[string]bool) int {
	n := 0
	for name := range v.ranked {
		if _, ok := v.members[name]; !ok && !covered[name] {
			n++
		}
	}
	return n
}

// coverGhosts lowers the floor f's bounds so that they cover the ghosts
// (by lease) whose acknowledgement the view holds, written under the
// ghost's own lease in the floor's lineage: such a ghost holds nothing
// that the maps from that acknowledgement on do not give its name, so it
// holds up only what its name may hold there (issue 42). It lists their
// leases in f.Covered and returns how many ghosts it could not cover (their
// bound is unknown: every acquisition waits for them) and the names it
// covered.
func coverGhosts(f *wire.AckFloor, v *ackView, ghosts map[int64]string) (uncovered int, names map[string]bool) {
	for _, lease := range slices.Sorted(maps.Keys(ghosts)) {
		name := ghosts[lease]
		a, ok := v.acks[name]
		if !ok || a.lease != lease || a.Lineage != v.lineage || a.Seq < 1 || a.Seq > v.seq {
			uncovered++
			continue
		}
		ack := a.Ack
		if ack > v.version {
			ack = 0
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = lowerLagging(f.Complete, f.Lagging, name, ack, v.version)
		f.SeqFloor = min(f.SeqFloor, a.Seq)
		f.SeqComplete, f.SeqLagging = lowerLagging(f.SeqComplete, f.SeqLagging, name, a.Seq, v.seq)
		f.Covered = append(f.Covered, lease)
		if names == nil {
			names = map[string]bool{}
		}
		names[name] = true
	}
	return uncovered, names
}

// lowerLagging is addLagging for a bound that may lower one listed
// already: the lower of the two is kept.
func lowerLagging(complete bool, lagging map[string]int64, name string, ack, top int64) (bool, map[string]int64) {
	if was, ok := lagging[name]; ok && complete {
		lagging[name] = min(was, ack)
		return complete, lagging
	}
	return addLagging(complete, lagging, name, ack, top)
}

func (v *ackView) del(k keys, key string) {
	switch {
	case k.IsMember(key):
		delete(v.members, k.MemberName(key))
		v.changes.Forget(k.MemberName(key))
	case k.IsAck(key):
		delete(v.acks, k.AckName(key))
	case k.IsMap(key):
		v.lineage, v.version, v.seq, v.marks = 0, 0, 0, v.marks[:0]
		v.mapRev, v.whole = 0, nil
		v.changes.Reset()
		clear(v.ranked)
	case k.IsFloor(key):
		v.floor = nil
	}
}

// seqAt returns the seq of the map that was current at revision rev, or 0
// when the view cannot tell (the map changed since, and the put that made
// that map current came before the view's first sight of the lineage).
func (v *ackView) seqAt(rev int64) int64 {
	i := sort.Search(len(v.marks), func(i int) bool { return v.marks[i].rev > rev })
	if i == 0 {
		return 0
	}
	return v.marks[i-1].seq
}

// noteLoad folds a load key's put or deletion into loads, and reports
// whether it was one. A summary that does not decode counts as none.
func (r *Rink) noteLoad(loads map[string]wire.LoadReport, kv *mvccpb.KeyValue, deleted bool) bool {
	key := string(kv.Key)
	if !r.keys.IsLoad(key) {
		return false
	}
	name := r.keys.LoadName(key)
	if rep, ok := wire.DecodeLoad(kv.Value, r.opts.slots); ok && !deleted && validName(name, false) == "" {
		loads[name] = rep
	} else {
		delete(loads, name)
	}
	return true
}

// compute computes the floor of the view, or nil while there is no map.
//
// An acknowledgement beyond the view's map (a version above the map's: an
// older map was written by hand; a seq above the map's: a map the leader
// has not seen) is unknown, never a bound.
//
// A member whose acknowledgement is unknown (it has written none yet, is
// quiet after a resume, refuses the map, or its ack key was deleted) still
// has a bound in seqs, which stands in its seq acknowledgement (SeqLagging,
// for free), so that it blocks only the slots it could hold (issue 22):
//
//   - the acknowledgement it wrote under an earlier lease of its key, if
//     the view saw it (see ackMember.carried);
//   - else the seq of the map current when its key was created: a member
//     acts only once its view has reached its own key (see selfSeen), so
//     it holds no slot that the maps from that one on do not give it.
//
// Not the map current at a resume: a member quiet after a resume holds
// nothing, but its quiet time (see hush) also keeps the slots it owned
// from others, which after a restore of etcd a member nobody sees may
// still act on. Such a bound counts in SeqFloor only for members that the
// map does not rank: the rink is not at rest until every ranked member has
// acknowledged the map.
func (v *ackView) compute() *wire.AckFloor {
	if v.lineage == 0 || v.version < 1 || v.seq < 1 {
		return nil
	}
	f := &wire.AckFloor{Lineage: v.lineage, Version: v.version, Floor: v.version, Complete: true, Lagging: map[string]int64{},
		Seq: v.seq, SeqFloor: v.seq, SeqComplete: true, SeqLagging: map[string]int64{},
		Still: true, Base: v.changes.Base}
	for name, m := range v.members {
		var ack, seq int64 // unknown: no ack key yet, another lineage, or an ended incarnation's
		if a, ok := v.acks[name]; ok && a.lease == m.lease && a.Lineage == v.lineage {
			ack, seq = a.Ack, a.Seq
		}
		if ack > v.version {
			ack = 0
		}
		if seq > v.seq {
			seq = 0
		}
		if seq >= 1 {
			if seq = v.changes.Still(name, seq); seq == v.seq && ack >= 1 {
				ack = v.version // nothing changed it since: see still.go
			}
		}
		bound, verBound := seq, ack
		if ack < 1 && seq < 1 {
			if c := m.carried; c.Lineage == v.lineage && c.Seq > 0 && c.Seq <= v.seq {
				bound = c.Seq
			} else {
				bound = v.seqAt(m.createRev)
			}
			bound = v.changes.Still(name, bound)
			if bound == v.seq {
				verBound = v.version // (the one map version the seq names)
			}
			if !v.ranked[name] {
				seq, ack = bound, verBound
			}
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = addLagging(f.Complete, f.Lagging, name, verBound, v.version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = addLagging(f.SeqComplete, f.SeqLagging, name, bound, v.seq)
	}
	for name, a := range v.acks {
		// An ack key without a member key: its lease lives (ack keys are
		// bound to it), and so may its member, whose key an operator
		// deleted (a ghost), or which departed a moment ago. Members that
		// follow the narrow view know no live set (see view.go): its
		// acknowledgement, as written, stays its bound until the lease
		// goes. (Not raised by still: the log forgot its changes with
		// its key.)
		if _, ok := v.members[name]; ok || a.Lineage != v.lineage {
			continue
		}
		ack, seq := a.Ack, a.Seq
		if ack > v.version {
			ack = 0
		}
		if seq > v.seq {
			seq = 0
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = addLagging(f.Complete, f.Lagging, name, ack, v.version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = addLagging(f.SeqComplete, f.SeqLagging, name, seq, v.seq)
	}
	return f
}

// addLagging lists a member whose acknowledgement is below top, until
// more than maxLagging lag: then the list is dropped (incomplete).
func addLagging(complete bool, lagging map[string]int64, name string, ack, top int64) (bool, map[string]int64) {
	if ack >= top || !complete {
		return complete, lagging
	}
	if len(lagging) == wire.MaxLagging {
		return false, nil
	}
	lagging[name] = ack
	return true, lagging
}
