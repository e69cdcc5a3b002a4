package rink

import (
	"encoding/json"
	"errors"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// observerView is what an Observer knows of its rink, and every decision
// it makes on what its watch hands it: which map it shows, the members,
// the election, the acknowledgements, the loads and the floor. It starts
// no goroutine and reads no clock: Observer.run feeds it the production
// watcher's batches, and the simulator's observer (simobserver.go) the
// batches of its watcher of the model, so that the simulator checks the
// maps it shows against the map key's history.
type observerView struct {
	name string
	keys keys
	log  *zap.Logger

	members map[string]memberInfo
	elect   map[string]electInfo
	acks    map[string]core.AckKey
	loads   map[string]memberLoad
	cur     wire.Map
	floor   wire.AckFloor
	lineage int64
	seq     int64
	rev     int64
	mapErr  string
	snap    *mvccpb.KeyValue // the snapshot key (see records.go)
	mapRev  int64            // the map key's mod revision
	derived bool             // cur is the map at mapRev
	strays  strayLog
}

func newObserverView(name string, k keys, log *zap.Logger) *observerView {
	return &observerView{name: name, keys: k, log: log, members: map[string]memberInfo{}, elect: map[string]electInfo{},
		acks: map[string]core.AckKey{}, loads: map[string]memberLoad{}}
}

// batch takes in one batch of the watcher's, a listing or a watch
// response's events, and returns the State it makes.
func (v *observerView) batch(b watchBatch) State {
	if b.snapshot {
		clear(v.members)
		clear(v.elect)
		clear(v.acks)
		clear(v.loads)
		v.floor = wire.AckFloor{}
		for _, kv := range b.kvs {
			v.apply(kv, false)
		}
	} else {
		for _, ev := range b.events {
			v.apply(ev.Kv, ev.Type == clientv3.EventTypeDelete)
		}
	}
	v.rev = max(v.rev, b.rev)
	return v.state()
}

// apply takes in one key as listed, put or deleted.
func (v *observerView) apply(kv *mvccpb.KeyValue, deleted bool) {
	key, kvVal, createRev := string(kv.Key), kv.Value, kv.CreateRevision
	switch {
	case v.keys.IsMember(key):
		name, ok := v.keys.ValidMember(key)
		if !ok {
			if !deleted {
				v.strays.note(v.log, key, "not a member name")
			}
			return
		}
		if deleted || kv.Lease == 0 {
			if !deleted {
				v.strays.note(v.log, key, "bound to no lease")
			}
			delete(v.members, name)
			return
		}
		protocols, capacity := wire.MetaOf(kvVal)
		v.members[name] = memberInfo{createRev: createRev, lease: kv.Lease, protocols: protocols, capacity: capacity, zone: wire.ZoneOf(kvVal)}
	case v.keys.IsAck(key):
		name := v.keys.AckName(key)
		if deleted {
			delete(v.acks, name)
			return
		}
		a := core.AckKey{Lease: kv.Lease}
		_ = json.Unmarshal(kvVal, &a.AckValue)
		v.acks[name] = a
	case v.keys.IsLoad(key):
		name := v.keys.LoadName(key)
		if deleted {
			delete(v.loads, name)
			return
		}
		if rep, ok := wire.DecodeLoad(kvVal, MaxSlots); ok {
			v.loads[name] = memberLoad{lease: kv.Lease, report: rep}
		} else {
			delete(v.loads, name)
		}
	case v.keys.IsFloor(key):
		v.floor = wire.AckFloor{}
		if !deleted && json.Unmarshal(kvVal, &v.floor) != nil {
			v.floor = wire.AckFloor{} // unreadable: nothing is known
		}
	case v.keys.IsElection(key):
		if deleted || !v.keys.IsCandidate(kv) {
			if !deleted {
				v.strays.note(v.log, key, "not made by a campaign")
			}
			delete(v.elect, key)
			return
		}
		v.elect[key] = electInfo{createRev: createRev, value: candidateName(kvVal)}
	case v.keys.IsMap(key):
		v.applyMap(kv, deleted)
	case v.keys.IsSnapshot(key):
		if deleted {
			v.snap = nil
			return
		}
		v.snap = kv
		if !v.derived && v.mapRev == kv.ModRevision {
			if m, err := wire.DecodeMap(kvVal, wire.PeekSlots(kvVal)); err == nil {
				v.cur, v.mapErr, v.derived = m, "", true
			}
		}
	}
}

// applyMap takes in the map key, as listed, put or deleted.
func (v *observerView) applyMap(kv *mvccpb.KeyValue, deleted bool) {
	if deleted {
		// The leader writes it again: keep showing the last map, when
		// it is the one the key held. After a put the view could not
		// read (a record it has not the map before of: derived is
		// false), the map it showed before is outdated, perhaps of an
		// earlier lineage, and lineage and seq are the put's: it shows
		// none until the next map.
		if v.derived {
			v.mapErr = ""
		}
		return
	}
	// Observers take any slot count. A change record applies to the map
	// before it, or comes with the whole map in the snapshot key (see
	// readMap).
	m, err := wire.ReadMap(kv, v.snap, &v.cur, v.mapErr == "" && v.cur.Version > 0, v.seq, v.lineage, wire.Geometry{})
	v.mapRev = kv.ModRevision
	switch {
	case errors.Is(err, wire.ErrUnderived):
		v.mapErr, v.derived = err.Error(), false // (the snapshot key follows, in this batch)
		v.seq, v.lineage = kv.Version, kv.CreateRevision
		return
	case err != nil:
		v.mapErr = err.Error()
	default:
		// Any decodable put is the next map, as for members (see
		// applyMap), even one whose version went back.
		v.cur, v.lineage, v.seq, v.mapErr, v.derived = m, kv.CreateRevision, kv.Version, "", true
	}
	if v.mapErr != "" {
		v.log.Warn("the rink's map cannot be used", zap.String("error", v.mapErr))
	}
}

// state returns the State the view makes now.
func (v *observerView) state() State {
	cur, lineage, seq, rev, floor, mapErr, members, elect, acks, loads := v.cur, v.lineage, v.seq, v.rev, &v.floor, v.mapErr, v.members, v.elect, v.acks, v.loads
	s := State{Rink: v.name, Version: cur.Version, Lineage: lineage, Slots: cur.Slots, Revision: rev, MapError: mapErr, table: cur.Table, names: cur.Members, changed: make(chan struct{})}
	if cur.Version > 0 {
		s.Protocol, s.Replicas = cur.Schema, cur.ReplicaCount()
	}
	s.ByLoad = cur.ByLoad
	s.Leader = elect[lowestKey(elect)].value
	count, secondaries := slotCounts(&cur)
	loadOf, rolesOf := memberFigures(&cur, members, loads)
	listed := map[string]bool{}
	for i, name := range cur.Members {
		m, live := members[name]
		ack := int64(-1)
		if a, ok := acks[name]; live && ok && a.Lease == m.lease && a.Lineage == lineage {
			ack = a.Ack
		}
		if floor.Still && floor.Lineage == lineage && floor.Seq == seq && live {
			// The leader counts a member whose slots no map since its
			// acknowledgement changed as having acknowledged its map
			// (see still.go): it writes none for such maps.
			if b := floor.Of(name); b > ack && b <= cur.Version {
				ack = b
			}
		}
		ms := MemberState{Name: name, Index: i, Slots: count[i], Secondaries: secondaries[i], Zone: m.zone, Ack: ack, Live: live, Protocols: m.protocols, Capacity: m.capacity}
		if live && loadOf != nil {
			ms.Load, ms.Roles = loadOf[i], rolesOf[i]
		}
		s.Members = append(s.Members, ms)
		listed[name] = true
	}
	for _, w := range cur.Waiting {
		m := members[w.Name]
		s.Waiting = append(s.Waiting, WaitingState{Name: w.Name, Since: w.Since, Protocols: m.protocols, Capacity: m.capacity, Zone: m.zone})
		listed[w.Name] = true
	}
	for _, name := range liveByAge(members) {
		if !listed[name] {
			s.Joining = append(s.Joining, name)
		}
	}
	settleState(&s, cur, lineage, seq, floor)
	return s
}
