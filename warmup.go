package rink

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// warmupState: the slots the applied map announces to this member, the
// version that first announced them, the role sets yet to warm them up,
// and the newest announcement this member is ready for; and, while
// leaving with a warm-up, the wait for heirs.
type warmupState struct {
	incoming  []int
	incomingV int64
	warmWait  int
	warmReady bool
	warmed    int64
	warmedIn  int64 // the lineage warmed is a version of (see warmedNow)
	// leaving: a Shutdown with a warm-up waits for the leader to move this
	// member's slots, until leaveBy fires at the latest.
	leaving  bool             // (timerLeaveBy)
	heirWarm map[string]int64 // while leaving: each member's warm-up readiness (see watchHeirs)
}

// Warm-up (WithWarmup). A planned move takes a slot from a member that is
// alive: a waiting member ranked after the rebalance delay, a scale-out, a
// load round, a member that leaves with a warm-up. Its heir can prepare
// while the owner still serves, so the leader makes such moves in two
// maps:
//
//  1. an announcement: the map it would proclaim anyway, except that every
//     live owner keeps its slots, with "incoming" naming, per heir, the
//     slots coming to it. Heirs emit EventIncoming and call Handler.Warm;
//     once every Warm call has returned, an heir says so in its
//     acknowledgement ("warm": the announcement's version);
//  2. once every heir is ready, or the warm-up time has passed, the move
//     itself, through the usual barrier (with a drain, if set).
//
// Moves whose owner is gone (a crash, a partition) are made at once: there
// is nothing to warm from. Members and leaders that do not know the fields
// ignore them: a leader that does not announce simply moves, and a member
// that does not warm up never says it is ready, so the leader waits the
// warm-up time for it.
//
// A member that shuts down with a warm-up sets "leaving" in its member key
// and keeps serving; the leader plans without it and announces its slots
// to their heirs. The member follows the acknowledgements itself (see
// watchHeirs): once every heir of its slots is ready for the newest map,
// it hands over with its departure transaction, as any member does on
// Shutdown (see depart) — one write on the switch's path, where a map
// telling it to would add a map write and every member's acknowledgement.
// When the warm-up time has passed the leader lists it in the map's
// "leave" instead, and it departs then; it also leaves once no map ranks
// it, and, if nothing of this happens within the warm-up time and a TTL
// (a leader of an older release), hands over all the same.

// warmState is the leader's pending announcement.
type warmState struct {
	moves   map[int]string // slot → heir
	at      time.Time      // when these moves were first planned
	version int64          // the map version that announced them (0: not yet)
	made    bool           // the moves are being made (logged once)
	leaveAt time.Time      // when leaving members were first told to leave
}

// plannedMoves returns the slots that target takes from a member with a
// member key, and their heirs.
func (r *Rink) plannedMoves(cur, target wire.Map) map[int]string {
	if len(cur.Table) != len(target.Table) {
		return nil
	}
	var moves map[int]string
	for s := range min(len(target.Table), target.Slots) { // (primaries: a secondary is the warm-up)
		from, to := cur.Owner(s), target.Owner(s)
		if from == to || from == "" || to == "" {
			continue
		}
		if _, alive := r.st.members[from]; !alive {
			continue
		}
		if moves == nil {
			moves = map[int]string{}
		}
		moves[s] = to
	}
	return moves
}

// holdForWarmup turns next, the map the leader plans to proclaim, into
// one that announces its planned moves instead of making them, until
// every heir is ready or the warm-up time has passed. keep plans the same
// map with leaving members still ranked.
func (r *Rink) holdForWarmup(next *wire.Map, keep func() wire.Map, now time.Time) {
	st := &r.st
	l := st.lead
	moves := r.plannedMoves(st.cur, *next)
	if len(moves) == 0 {
		l.warm = nil
		next.Incoming = nil
		return
	}
	switch {
	case l.warm == nil:
		l.warm = &warmState{moves: moves, at: now}
		r.log.Info("announcing planned moves: their heirs warm up first", zap.Int("slots", len(moves)), zap.Duration("warmup", r.opts.warmup))
	case !maps.Equal(l.warm.moves, moves):
		// Other moves (the load or the members changed): announced anew,
		// but the warm-up time still counts from the first announcement,
		// so that moves that keep changing are made all the same.
		l.warm.moves, l.warm.version, l.warm.made, l.warm.leaveAt = moves, 0, false, time.Time{}
	}
	var leavers []string
	for _, name := range st.cur.Members {
		if st.members[name].leaving && next.Index(name) < 0 {
			leavers = append(leavers, name)
		}
	}
	ready := false
	due := l.warm.at.Add(r.opts.warmup)
	if !now.Before(due) || len(leavers) == 0 && l.warm.version > 0 && r.heirsReady(l.warm) {
		// (A leaving member watches its heirs itself and departs as soon
		// as they are ready: a map telling it to would cost a write and
		// every member's acknowledgement right on the switch's path.)
		if !l.warm.made {
			l.warm.made = true
			if r.simEarly != nil && now.Before(due) {
				r.simEarly(maps.Clone(moves))
			}
			r.log.Info("making the announced moves", zap.Int("slots", len(moves)), zap.Bool("heirsReady", now.Before(due)), zap.Duration("after", now.Sub(l.warm.at)))
		}
		if l.warm.leaveAt.IsZero() && len(leavers) > 0 {
			l.warm.leaveAt = now
		}
		if len(leavers) == 0 || now.Sub(l.warm.leaveAt) >= r.opts.ttl {
			// (A member told to leave that has not left within a TTL is
			// not leaving, whatever its key says: its moves are made
			// through the barrier, as any.)
			next.Incoming = nil // make the moves
			return
		}
		// Leaving members hand over with their own departure transaction,
		// as in any graceful shutdown: one write on the switch's path
		// instead of a map, an acknowledgement and a floor.
		ready = true
	}
	hold := *next
	if len(leavers) > 0 {
		hold = keep()
	}
	hold.Table = slices.Clone(hold.Table)
	for s := range hold.Table {
		o := st.cur.Owner(s)
		if _, alive := st.members[o]; o != "" && alive {
			if i := hold.Index(o); i >= 0 {
				hold.Table[s] = int32(i)
				continue
			}
		}
		// An orphan: it moves now, and not to a leaving member, which is
		// on its way out: to its owner in the plan without them.
		if h := hold.Owner(s); h != "" && st.members[h].leaving {
			if i := hold.Index(next.Owner(s)); i >= 0 {
				hold.Table[s] = int32(i)
			}
		}
	}
	hold.Incoming = map[string][]int{}
	for s, heir := range moves {
		hold.Incoming[heir] = append(hold.Incoming[heir], s)
	}
	for _, slots := range hold.Incoming {
		slices.Sort(slots)
	}
	if ready {
		hold.Leave = leavers
	}
	if l.warm.version == 0 && maps.EqualFunc(hold.Incoming, st.cur.Incoming, slices.Equal) && !r.warmAckedPast(l.warm, st.cur.Version) {
		// Announced already, by this leader's predecessor: heirs say
		// they are ready for the newest map that announces it. (Not an
		// older map put back by hand, which an heir's readiness for a
		// later announcement, of other slots, would seem to answer:
		// that one is announced anew.)
		l.warm.version = st.cur.Version
	}
	*next = r.placedAround(hold)
	switch {
	case !ready:
		st.SetTimer(core.TimerWarm, l.warm.at.Add(r.opts.warmup))
	default:
		st.SetTimer(core.TimerWarm, l.warm.leaveAt.Add(r.opts.ttl))
	}
}

// warmAckedPast reports whether an heir of w has said it is ready for an
// announcement after version v: v is an older map put back.
func (r *Rink) warmAckedPast(w *warmState, v int64) bool {
	for _, heir := range w.moves {
		if r.st.lead.warmAcks[heir] > v {
			return true
		}
	}
	return false
}

// heirsReady reports whether every heir of w has said it is ready for w's
// announcement.
func (r *Rink) heirsReady(w *warmState) bool {
	for _, heir := range w.moves {
		if r.st.lead.warmAcks[heir] < w.version {
			return false
		}
	}
	return true
}

// applyIncoming follows the slots the applied map announces to this
// member: it emits EventIncoming for each, and asks the role sets to warm
// them up; with no set to ask, the member is ready at once.
func (r *Rink) applyIncoming() {
	st := &r.st
	var in []int
	idx := r.rankedIndex(r.opts.member)
	for _, s := range st.cur.Incoming[r.opts.member] {
		if s >= 0 && s < len(st.cur.Table) && (idx < 0 || int(st.cur.Table[s]) != idx) {
			in = append(in, s)
		}
	}
	slices.Sort(in)
	in = slices.Compact(in)
	if slices.Equal(in, st.incoming) {
		if st.warmReady && len(in) > 0 {
			st.warmed, st.warmedIn = st.cur.Version, st.lineage // still ready: say so for this map too
		}
		return
	}
	st.incoming, st.incomingV, st.warmReady = in, st.cur.Version, false
	for _, s := range in {
		r.emit(Event{Kind: EventIncoming, Slot: s, From: st.cur.Owner(s)})
	}
	sets := r.setsPub.Load()
	st.warmWait = 0
	if sets != nil {
		for _, set := range *sets {
			set.warmUp(st.incomingV, in)
			st.warmWait++
		}
	}
	if st.warmWait == 0 && len(in) > 0 {
		st.warmReady, st.warmed, st.warmedIn = true, st.cur.Version, st.lineage
	}
}

// warmedNow is the newest announcement this member is ready for, as its
// acknowledgement says it: none when that was of another lineage (whose
// versions a new lineage, after a restore or the map key's deletion,
// counts again from 1: a leader took a readiness for version 22 of the
// old lineage as readiness for version 15 of the new, seed 2345 of the
// simulator with warm-up).
func (r *Rink) warmedNow() int64 {
	st := &r.st
	if st.warmedIn != st.lineage {
		return 0
	}
	return st.warmed
}

// onWarmed counts a role set ready for the announcement of version v.
func (r *Rink) onWarmed(v int64) {
	st := &r.st
	if v != st.incomingV || st.warmWait == 0 || len(st.incoming) == 0 {
		return
	}
	st.warmWait--
	if st.warmWait == 0 {
		// Ready for the slots announced since v, and so for the newest map,
		// which announces the same ones.
		st.warmReady, st.warmed, st.warmedIn = true, st.cur.Version, st.lineage
		r.sendAck()
	}
}

// startLeaving begins a Shutdown with a warm-up: the member says in its
// member key that it is leaving and keeps serving until the leader has
// moved its slots. It reports false when there is nothing to wait for:
// among others when the member holds no slot (a newcomer whose slots are
// still announced to it, or not started yet): there is nothing to warm
// up from it.
func (r *Rink) startLeaving() bool {
	st := &r.st
	if r.opts.warmup <= 0 || st.inc == nil || !st.selfSeen || st.incompatible != nil || r.hushed() || r.rankedIndex(r.opts.member) < 0 ||
		!st.mine.anyHeld() {
		return false
	}
	st.leaving = true
	st.SetTimer(core.TimerLeaveBy, r.now().Add(r.opts.warmup+r.opts.ttl))
	inc := st.inc
	r.rewriteMemberKey(inc, r.ownMemberValue(true),
		"shutdown: could not say that this member is leaving; it hands over when its warm-up time is up")
	r.fx().watchHeirs(inc)
	r.log.Info("shutdown: leaving once this member's heirs have warmed up", zap.Duration("warmup", r.opts.warmup))
	return true
}

// watchHeirs follows, for a member leaving with a warm-up, the warm-up
// readiness in every member's acknowledgement, and hands it to the run
// goroutine (the newest only).
func (r *Rink) watchHeirs(ctx context.Context) {
	warm := map[string]int64{}
	follow(ctx, r.cli, r.keys.Acks(), clientv3.GetPrefixRangeEnd(r.keys.Acks()), r.log, func(b watchBatch) bool {
		r.foldHeirs(warm, b)
		return true
	})
}

// foldHeirs folds a batch of the ack keys (a listing, or a watch's
// events) into warm, each member's warm-up readiness, and hands the run
// goroutine a copy (see watchHeirs; the simulator's driver calls it too).
func (r *Rink) foldHeirs(warm map[string]int64, b watchBatch) {
	put := func(kv *mvccpb.KeyValue) {
		var a wire.AckValue
		if json.Unmarshal(kv.Value, &a) == nil && a.Warm > 0 {
			warm[r.keys.AckName(string(kv.Key))] = a.Warm
		} else {
			delete(warm, r.keys.AckName(string(kv.Key)))
		}
	}
	if b.snapshot {
		clear(warm)
		for _, kv := range b.kvs {
			put(kv)
		}
	}
	for _, ev := range b.events {
		if ev.Type == clientv3.EventTypePut {
			put(ev.Kv)
		} else {
			delete(warm, r.keys.AckName(string(ev.Kv.Key)))
		}
	}
	heirs := maps.Clone(warm)
	r.inbox.send(func(m *mail) { m.heirs, m.heirsSet = heirs, true })
}

// heirsWarm reports whether, for a member leaving with a warm-up, the
// applied map announces every slot it holds to an heir, and every such
// heir has said it is ready for this map. Slots the map gives it that it
// has not started (still behind the barrier) have nothing to warm up from:
// they wait for nobody's heir, and a member that holds no slot may leave.
// A leaving member still starts the slots it owns once they are free
// (see tryAcquire): the leader keeps them ranked to it while it leaves,
// and nobody else would serve them meanwhile.
func (r *Rink) heirsWarm() bool {
	st := &r.st
	idx := r.rankedIndex(r.opts.member)
	if idx < 0 {
		return false
	}
	mine := func(s int) bool {
		return s >= 0 && s < len(st.cur.Table) && int(st.cur.Table[s]) == idx && st.mine.isHeld(s)
	}
	held := 0
	for s := range st.cur.Table {
		if mine(s) {
			held++
		}
	}
	announced := 0
	for heir, slots := range st.cur.Incoming {
		n := 0
		for _, s := range slots {
			if mine(s) {
				n++
			}
		}
		if n > 0 && st.heirWarm[heir] < st.cur.Version {
			return false
		}
		announced += n
	}
	return announced == held
}

// ownKeyEdited reports whether v, a value of this member's key in its
// current incarnation, is not what this member writes: somebody else wrote
// it (an edit by hand, a script), saying, say, that it leaves when it does
// not, or speaks protocols it does not, which would keep it unranked for
// good. The value it wrote before it began to leave is not an edit: its
// write of the leaving flag follows.
func (r *Rink) ownKeyEdited(v []byte) bool {
	want := r.ownMemberValue(r.st.leaving)
	return string(v) != want && !(r.st.leaving && string(v) == r.ownMemberValue(false))
}

// writeOwnKeyBack writes this member's key as this member writes it, over
// the value somebody else wrote into it at mod revision rev (see
// ownKeyEdited), retrying while inc lasts and the key is still at rev (a
// write since is seen, and judged, in turn).
func (r *Rink) writeOwnKeyBack(inc *incarnation, rev int64) {
	r.log.Warn("own member key holds a value this member did not write: writing it back", zap.Int64("revision", rev))
	r.fx().repairKey(inc, core.NewKeyRepair(r.keys.Member(r.opts.member), rev, r.ownMemberValue(r.st.leaving), &inc.Inc, r.newBackoff().Next))
}

// rewriteMemberKey puts value into this member's key, on a goroutine,
// provided the key is still inc's (its create revision and lease), and
// logs failure with why while inc lasts.
func (r *Rink) rewriteMemberKey(inc *incarnation, value, why string) {
	r.fx().rewriteMemberKey(inc, value, why)
}

// leftWarm reports whether a member leaving with a warm-up may now shut
// down: no map ranks it and its drains are done, or its time is up.
func (r *Rink) leftWarm() bool {
	st := &r.st
	if !st.leaving {
		return false
	}
	select {
	case <-r.stopCtx.Done():
		return true
	default:
	}
	return st.inc == nil || r.rankedIndex(r.opts.member) < 0 && len(st.draining) == 0 || slices.Contains(st.cur.Leave, r.opts.member) || r.heirsWarm()
}

// keepRound puts back into next the moves of the last load round that are
// still to be made while their heirs warm up: a round runs once, and the
// plans that follow it would otherwise forget them. A move that was made,
// or that a change of members made moot, is dropped.
func (r *Rink) keepRound(next *wire.Map) {
	l := r.st.lead
	cur := r.st.cur
	if len(next.Table) != len(cur.Table) {
		l.roundMoves = nil
		return
	}
	next.Table = slices.Clone(next.Table)
	for s, heir := range l.roundMoves {
		i := next.Index(heir)
		if cur.Owner(s) == heir || i < 0 || next.Owner(s) != cur.Owner(s) {
			delete(l.roundMoves, s)
			continue
		}
		next.Table[s] = int32(i)
	}
	*next = r.placedAround(*next)
}

// placedAround returns m with its secondaries placed again around its
// primaries, keeping every one still allowed and moving none to balance
// (planInput.Hold), when it has more than one replica per slot: a map
// whose primaries were set apart from its plan (an announcement's, which
// keeps the owners of the map before; a load round's moves put back) may
// name a slot's new primary as its secondary too, and leave it without
// one (found in review).
func (r *Rink) placedAround(m wire.Map) wire.Map {
	if m.ReplicaCount() == 1 || len(m.Table) != m.TableLen() {
		return m
	}
	members := r.plannedMembers()
	return plan.WithPrimaries(m, slices.Clone(m.Table[:m.Slots]), plan.Input{Replicas: m.ReplicaCount(), Zones: zones(members), Capacity: capacities(members), Hold: true})
}
