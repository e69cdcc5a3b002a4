package core

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"sort"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// AckView is the leader's view of the members, their acknowledgements and
// the map, as of one revision, for computing the floor.
type AckView struct {
	Members map[string]AckMember // live member keys
	Acks    map[string]AckKey
	Lineage int64 // the map key's create revision; 0 while it is absent
	Version int64
	Seq     int64            // the map key's etcd version
	Ranked  map[string]bool  // the members the map ranks
	Marks   []MapMark        // the map's puts seen in this lineage, oldest first (see seqAt)
	Changes ChangeLog        // which map put last changed each member (see still.go)
	MapRev  int64            // the map key's mod revision
	Whole   *wire.Map        // the map of seq, when the view knows it (see records.go)
	Snap    *mvccpb.KeyValue // the snapshot key as last seen
	Floor   []byte           // the floor key's value; nil while it is absent
	// MaxMarks bounds Marks (0: maxMarks; at least 2: the simulator
	// lowers it, see simhook.Knobs).
	MaxMarks int
}

// AckMember is a live member key in the leader's view.
type AckMember struct {
	Lease     int64
	CreateRev int64
	// Carried is the acknowledgement the member wrote under an earlier
	// lease of the same key (a resume rebinds the key to a new lease, and
	// the old lease takes the old ack key with it), if the view saw it.
	// An acknowledgement speaks of the process, whose view never goes
	// back, whatever its lease: it stays a bound until the member writes
	// one under its new lease.
	Carried wire.AckValue
}

// MapMark is one put of the map key: its mod revision and seq.
type MapMark struct{ Rev, Seq int64 }

// maxMarks bounds how many map puts the view remembers.
const maxMarks = 1024

type AckKey struct {
	Lease int64
	wire.AckValue
}

func (v *AckView) Put(k wire.Keys, kv *mvccpb.KeyValue, listed bool) {
	key := string(kv.Key)
	switch {
	case k.IsMember(key):
		// Stray member keys are left out, as members leave them out of
		// their views (the run goroutine logs them); a put that makes a
		// key stray takes its member out.
		name, ok := k.LiveMember(kv)
		if !ok {
			delete(v.Members, name)
			v.Changes.Forget(name)
			return
		}
		m := AckMember{Lease: kv.Lease, CreateRev: kv.CreateRevision}
		if old, ok := v.Members[name]; ok && old.CreateRev == m.CreateRev {
			m.Carried = old.Carried
			if a, ok := v.Acks[name]; ok && old.Lease != m.Lease && a.Lease == old.Lease && a.Seq > 0 {
				m.Carried = a.AckValue // a resume: the old lease's ack key goes next
			}
		}
		v.Members[name] = m
	case k.IsAck(key):
		a := AckKey{Lease: kv.Lease}
		_ = json.Unmarshal(kv.Value, &a.AckValue) // an unreadable value acknowledges nothing
		v.Acks[k.AckName(key)] = a
	case k.IsMap(key):
		var version int64
		var shape *MapShape // nil: unknown (a change record this view cannot apply)
		if c, ok := wire.DecodeRecord(kv.Value); ok {
			version = c.Version
			switch {
			case v.Snap != nil && v.Snap.ModRevision == kv.ModRevision:
				shape = v.ShapeOf(v.Snap.Value)
			case v.Whole != nil && !listed && kv.CreateRevision == v.Lineage && kv.Version == v.Seq+1:
				if m, err := wire.Apply(v.Whole, &c); err == nil {
					v.Whole, shape = &m, &MapShape{Members: m.Members, Table: m.Table}
				}
			}
		} else {
			var m struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal(kv.Value, &m) // an unusable map: members refuse it, the floor follows its version
			version, shape = m.Version, v.ShapeOf(kv.Value)
		}
		if kv.CreateRevision != v.Lineage || listed || shape == nil {
			v.Marks = v.Marks[:0]
			v.Changes.Reset()
		}
		if n := cmp.Or(v.MaxMarks, maxMarks); len(v.Marks) == n {
			v.Marks = append(v.Marks[:0], v.Marks[n/2:]...)
		}
		v.Marks = append(v.Marks, MapMark{kv.ModRevision, kv.Version})
		v.Lineage, v.Version, v.Seq, v.MapRev = kv.CreateRevision, version, kv.Version, kv.ModRevision
		if shape == nil {
			v.Whole = nil // (ranked stays as it was: it only says when the rink is at rest)
			return
		}
		v.SeeShape(*shape)
	case k.IsSnapshot(key):
		v.Snap = kv
		if v.Whole == nil && v.MapRev == kv.ModRevision && v.Seq > 0 {
			// The whole map written with a record this view could not apply.
			if shape := v.ShapeOf(kv.Value); shape != nil {
				v.Changes.Reset()
				v.SeeShape(*shape)
			}
		}
	case k.IsFloor(key):
		v.Floor = kv.Value
	}
}

// ShapeOf decodes a whole map for the view, keeping it (whole) for the
// change records that follow; nil when it does not decode.
func (v *AckView) ShapeOf(value []byte) *MapShape {
	m, err := wire.DecodeMap(value, wire.PeekSlots(value))
	if err != nil {
		v.Whole = nil
		return nil
	}
	v.Whole = &m
	return &MapShape{Members: m.Members, Table: m.Table}
}

// SeeShape records the shape of the map of the view's seq.
func (v *AckView) SeeShape(shape MapShape) {
	v.Changes.See(v.Seq, shape)
	clear(v.Ranked)
	for _, name := range shape.Members {
		v.Ranked[name] = true
	}
}

// Present reports whether a member may still hold slots: its key, or its
// acknowledgement key (bound to its lease), is in the view.
func (v *AckView) Present(name string) bool {
	_, member := v.Members[name]
	_, acked := v.Acks[name]
	return member || acked
}

// Unkeyed counts the members the map ranks that have no member key in
// the view, other than covered (see aggregation's floor: they count as
// ghosts whose bounds it does not know).
func (v *AckView) Unkeyed(covered map[string]bool) int {
	n := 0
	for name := range v.Ranked {
		if _, ok := v.Members[name]; !ok && !covered[name] {
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
func CoverGhosts(f *wire.AckFloor, v *AckView, ghosts map[int64]string) (uncovered int, names map[string]bool) {
	for _, lease := range slices.Sorted(maps.Keys(ghosts)) {
		name := ghosts[lease]
		a, ok := v.Acks[name]
		if !ok || a.Lease != lease || a.Lineage != v.Lineage || a.Seq < 1 || a.Seq > v.Seq {
			uncovered++
			continue
		}
		ack := a.Ack
		if ack > v.Version {
			ack = 0
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = LowerLagging(f.Complete, f.Lagging, name, ack, v.Version)
		f.SeqFloor = min(f.SeqFloor, a.Seq)
		f.SeqComplete, f.SeqLagging = LowerLagging(f.SeqComplete, f.SeqLagging, name, a.Seq, v.Seq)
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
func LowerLagging(complete bool, lagging map[string]int64, name string, ack, top int64) (bool, map[string]int64) {
	if was, ok := lagging[name]; ok && complete {
		lagging[name] = min(was, ack)
		return complete, lagging
	}
	return AddLagging(complete, lagging, name, ack, top)
}

func (v *AckView) Del(k wire.Keys, key string) {
	switch {
	case k.IsMember(key):
		delete(v.Members, k.MemberName(key))
		v.Changes.Forget(k.MemberName(key))
	case k.IsAck(key):
		delete(v.Acks, k.AckName(key))
	case k.IsMap(key):
		v.Lineage, v.Version, v.Seq, v.Marks = 0, 0, 0, v.Marks[:0]
		v.MapRev, v.Whole = 0, nil
		v.Changes.Reset()
		clear(v.Ranked)
	case k.IsFloor(key):
		v.Floor = nil
	}
}

// SeqAt returns the seq of the map that was current at revision rev, or 0
// when the view cannot tell (the map changed since, and the put that made
// that map current came before the view's first sight of the lineage).
func (v *AckView) SeqAt(rev int64) int64 {
	i := sort.Search(len(v.Marks), func(i int) bool { return v.Marks[i].Rev > rev })
	if i == 0 {
		return 0
	}
	return v.Marks[i-1].Seq
}

// Compute computes the floor of the view, or nil while there is no map.
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
func (v *AckView) Compute() *wire.AckFloor {
	if v.Lineage == 0 || v.Version < 1 || v.Seq < 1 {
		return nil
	}
	f := &wire.AckFloor{Lineage: v.Lineage, Version: v.Version, Floor: v.Version, Complete: true, Lagging: map[string]int64{},
		Seq: v.Seq, SeqFloor: v.Seq, SeqComplete: true, SeqLagging: map[string]int64{},
		Still: true, Base: v.Changes.Base}
	for name, m := range v.Members {
		var ack, seq int64 // unknown: no ack key yet, another lineage, or an ended incarnation's
		if a, ok := v.Acks[name]; ok && a.Lease == m.Lease && a.Lineage == v.Lineage {
			ack, seq = a.Ack, a.Seq
		}
		if ack > v.Version {
			ack = 0
		}
		if seq > v.Seq {
			seq = 0
		}
		if seq >= 1 {
			if seq = v.Changes.Still(name, seq); seq == v.Seq && ack >= 1 {
				ack = v.Version // nothing changed it since: see still.go
			}
		}
		bound, verBound := seq, ack
		if ack < 1 && seq < 1 {
			if c := m.Carried; c.Lineage == v.Lineage && c.Seq > 0 && c.Seq <= v.Seq {
				bound = c.Seq
			} else {
				bound = v.SeqAt(m.CreateRev)
			}
			bound = v.Changes.Still(name, bound)
			if bound == v.Seq {
				verBound = v.Version // (the one map version the seq names)
			}
			if !v.Ranked[name] {
				seq, ack = bound, verBound
			}
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = AddLagging(f.Complete, f.Lagging, name, verBound, v.Version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = AddLagging(f.SeqComplete, f.SeqLagging, name, bound, v.Seq)
	}
	for name, a := range v.Acks {
		// An ack key without a member key: its lease lives (ack keys are
		// bound to it), and so may its member, whose key an operator
		// deleted (a ghost), or which departed a moment ago. Members that
		// follow the narrow view know no live set (see view.go): its
		// acknowledgement, as written, stays its bound until the lease
		// goes. (Not raised by still: the log forgot its changes with
		// its key.)
		if _, ok := v.Members[name]; ok || a.Lineage != v.Lineage {
			continue
		}
		ack, seq := a.Ack, a.Seq
		if ack > v.Version {
			ack = 0
		}
		if seq > v.Seq {
			seq = 0
		}
		f.Floor = min(f.Floor, ack)
		f.Complete, f.Lagging = AddLagging(f.Complete, f.Lagging, name, ack, v.Version)
		f.SeqFloor = min(f.SeqFloor, seq)
		f.SeqComplete, f.SeqLagging = AddLagging(f.SeqComplete, f.SeqLagging, name, seq, v.Seq)
	}
	return f
}

// addLagging lists a member whose acknowledgement is below top, until
// more than maxLagging lag: then the list is dropped (incomplete).
func AddLagging(complete bool, lagging map[string]int64, name string, ack, top int64) (bool, map[string]int64) {
	if ack >= top || !complete {
		return complete, lagging
	}
	if len(lagging) == wire.MaxLagging {
		return false, nil
	}
	lagging[name] = ack
	return true, lagging
}

// Unreported lists, sorted, the first MaxUnreported of the ranked members
// with a live key whose load summary is not in loads (see
// wire.AckFloor.Unreported). The bound keeps the floor, which every member
// reads, small after an operator deletes every load key of a large rink:
// the next names are listed as the first write theirs.
func (v *AckView) Unreported(loads map[string]wire.LoadReport) []string {
	var out []string
	for name := range v.Ranked {
		if _, live := v.Members[name]; live {
			if _, ok := loads[name]; !ok {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out[:min(len(out), MaxUnreported)]
}

// MaxUnreported bounds the names a floor lists as unreported.
const MaxUnreported = 32
