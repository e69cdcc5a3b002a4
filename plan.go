package rink

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	"go.uber.org/zap"
)

// plan runs after every event while this member leads: when membership, the
// map or a timer changed something, it derives the next map and proclaims it
// if it differs from the current one.
func (r *Rink) plan() {
	st := &r.st
	l := st.lead
	if l != nil && st.inc != nil && st.taint != 0 && st.taint == st.lineage && st.curRev != 0 && st.dropAsked != st.inc {
		// A leader plans nothing in a lineage a restore brought back: it
		// asks for its map key's deletion itself, once per incarnation
		// (each retried while it lasts), since no next map of that
		// lineage will (see dropLineage).
		st.dropAsked = st.inc
		r.dropLineage(st.curRev)
	}
	if l == nil || !st.view.wide || !st.dirty || l.busy || st.rev < l.waitRev || st.stopping || st.incompatible != nil && !waitsOut(st.incompatible) ||
		st.inc == nil || !st.selfSeen || st.taint != 0 && st.taint == st.lineage && st.curRev != 0 {
		return
	}
	st.dirty = false
	now := r.now()
	proto, strangers := rinkProtocol(st.members, r.opts.replicas)
	live := withGhosts(st.ghosts, speakers(liveByAge(st.members), st.members, proto), st.members, st.cur)
	if r.hushed() {
		live = withRanked(live, st.cur) // (a restore we slept through: see withRanked)
	}
	var leavers []string
	for _, name := range live {
		if st.members[name].leaving {
			leavers = append(leavers, name)
		}
	}
	for _, name := range leavers {
		live = deleteName(live, name) // planned without, its slots announced first (see warmup.go)
	}
	ranked := make(map[string]bool, len(st.cur.Members))
	for _, name := range st.cur.Members {
		ranked[name] = true
	}
	// A map that ranks a name twice (members that do not lead apply
	// records laxly: an older record put back by hand can make one; see
	// applyAs) is planned from with the repeats vacated, and written whole.
	from, repeated := st.cur, len(ranked) != len(st.cur.Members)
	if repeated {
		from = vacateRepeats(st.cur)
	}
	planned := r.plannedMembers()
	in := plan.Input{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}, Capacity: capacities(planned),
		Replicas: r.opts.replicas, Zones: zones(planned), Handed: handed(leavers)}
	if r.opts.replicas > 1 {
		for _, name := range st.cur.Members {
			if !slices.Contains(live, name) && !slices.Contains(leavers, name) {
				l.crashAt = now // (a crash: promoted, and held a TTL, see below)
				break
			}
		}
	}
	if st.cur.ByLoad && !r.opts.byLoad && st.cur.Version > 0 && !l.modeLogged {
		l.modeLogged = true
		r.log.Warn("the rink's map is balanced by load, and this leader balances by count: proclaiming a map balanced by count (give every member the same WithImbalanceTolerance)")
	}
	if r.opts.byLoad {
		in.Load = r.estimate()
		in.ByLoad = r.loadSeen(in.Load)
	}
	for _, name := range live {
		if !ranked[name] {
			if _, ok := l.since[name]; !ok {
				l.since[name] = now
			}
		}
	}
	var due time.Time
	for name, t := range l.since {
		if _, ok := st.members[name]; !ok || ranked[name] {
			delete(l.since, name)
			continue
		}
		in.Since[name] = t
		if now.Sub(t) >= r.opts.delay {
			in.Ready[name] = true
		}
	}
	if len(in.Ready) > 0 {
		// Rank with them every waiter whose delay runs out soon: a burst of
		// joins is ranked in one map, and no slot moves twice in a row.
		for name, t := range in.Since {
			if now.Sub(t) >= r.opts.delay-batchWindow(r.opts.delay) {
				in.Ready[name] = true
			}
		}
	}
	if hold := r.holdForReports(in, now); !hold.IsZero() {
		// Rank them with the load known (see fillNewcomers): wait for the
		// summaries of the members involved, which they write as they
		// join, for reportWait at most, and rank the batch together.
		clear(in.Ready)
		due = hold
	}
	for name, t := range in.Since {
		if at := t.Add(r.opts.delay); !in.Ready[name] && at.After(now) && (due.IsZero() || at.Before(due)) {
			due = at
		}
	}
	st.SetTimer(core.TimerPlan, due) // (zero: unset)

	// With replicas, the replicas stay where a crash's promotions put them
	// for a TTL (see planInput.Hold); the leader does not say it rests
	// meanwhile, and plans again after.
	// No load round runs meanwhile either: it would move primaries onto
	// members that may be about to go too.
	holding := false
	if r.opts.replicas > 1 && !l.crashAt.IsZero() && now.Before(l.crashAt.Add(r.opts.ttl)) {
		in.Hold = true
		strict := in
		strict.Hold = false
		holding = !plan.PlanMap(from, strict).SameAssignment(plan.PlanMap(from, in))
		if at := l.crashAt.Add(r.opts.ttl); due.IsZero() || at.Before(due) {
			due = at
			st.SetTimer(core.TimerPlan, due)
		}
	}
	next := plan.PlanMap(from, in)
	bare := st.cur
	bare.Incoming = nil
	settling := r.loadPending(in) // a load round would move slots
	if in.ByLoad && l.roundDue && next.SameAssignment(bare) && settling && !in.Hold {
		r.loadRound(&next, in)
		if next.SameAssignment(bare) {
			settling = r.loadPending(in) // a round that moved nothing may have been the last
		}
		if r.opts.warmup > 0 {
			l.roundMoves = r.plannedMoves(st.cur, next)
		}
	} else if len(l.roundMoves) > 0 {
		r.keepRound(&next)
	}
	if l.roundDue && !settling && next.SameAssignment(bare) {
		// No round would move a slot: none runs, and the next may come a
		// load interval from now, as if this one had run. (Rounds keep to
		// the interval's beat, with every member's summary of the last
		// interval in.)
		l.roundDue = false
		st.SetTimer(core.TimerLoad, now.Add(r.opts.loadEvery))
	}
	if r.opts.warmup > 0 {
		r.holdForWarmup(&next, func() wire.Map {
			in.Live = append(slices.Clone(in.Live), leavers...)
			return plan.PlanMap(from, in)
		}, now)
	}
	next.Schema = proto
	if s := strings.Join(strangers, ","); s != l.strangers {
		l.strangers = s
		if s != "" {
			r.log.Warn("members speak none of this member's protocols: they would refuse its maps, and are not ranked", zap.Strings("members", strangers), zap.Ints("protocols", wire.Offered(r.opts.replicas)))
		}
	}
	// A change record this member cannot apply (see underived) is written
	// over with a whole map: nobody who lists the rink can read it, and
	// its version cannot be told.
	underived := st.underivedRev > st.curRev
	next.Leases = leasesFor(next.Members, st.recorded, st.ended, st.members, st.ghosts, r.opts.member, r.ownLease())
	if next.SameAssignment(st.cur) && sameLeases(next.Leases, wire.BaseLeases(st.cur.Members, st.recorded, st.curLeased || len(st.cur.Members) == 0), r.hushed()) && next.Schema == st.cur.Schema && st.cur.Version > 0 && st.curRev != 0 && !st.stale && st.incompatible == nil && !underived && !repeated &&
		!r.rankedReborn() {
		// Nothing changed. (A map key that was deleted is written again;
		// a map whose version does not exceed every earlier one, such as
		// a map put back by hand, is proclaimed again with a new version,
		// for members that tell maps apart by version only.)
		rest := int64(0)
		if len(st.cur.Waiting) == 0 && len(l.since) == 0 && len(st.cur.Incoming) == 0 && len(st.cur.Leave) == 0 &&
			len(leavers) == 0 && l.warm == nil && !settling && !holding {
			rest = st.cur.Version
		}
		r.setRest(rest, settling, in, true)
		return
	}
	r.setRest(0, settling, in, false) // a map goes out (or is refused, below)
	if st.cur.Version == 0 && len(live) == 0 {
		return
	}
	next.Version = r.nextVersion()
	next.Leader = r.opts.member
	if l.warm != nil && next.Incoming != nil && l.warm.version == 0 {
		l.warm.version = next.Version
	}
	if err := r.usable(next); err != nil {
		r.setRest(0, settling, in, true) // no map goes out: say it
		if l.refused != err.Error() {
			l.refused = err.Error()
			r.log.Error("refusing to proclaim a map that members would refuse", zap.Error(err), zap.Int64("version", next.Version))
		}
		return
	}
	l.refused = ""
	l.busy = true
	mapRev, base := st.curRev, st.cur
	base.Leases = wire.BaseLeases(base.Members, st.recorded, st.curLeased) // (what the record changes: see leaseChanges)
	if underived {
		mapRev, base = st.underivedRev, wire.Map{} // (an empty base: the whole map)
	} else if repeated {
		base = wire.Map{}
	}
	t := wire.Transition{View: st.rev, Gone: goneFrom(&base, &next, st.members, st.ghosts), Incs: r.replacedNames(), ByLeader: true}
	if mapRev == 0 && st.cur.Version > 0 {
		l.quietUntil = now.Add(r.opts.ttl) // a lineage that replaces another (see transition.Quiet)
	}
	t.Quiet = now.Before(l.quietUntil)
	st.proclaiming++ // (base shares st.cur's table: see applyInPlace)
	r.fx().proclaim(l, base, next, mapRev, t)
}

// sameLeases reports whether two maps' leases (see leasesFor) say the
// same. For a leader in its quiet time (quiet), a list of zeros records no
// lease, as no list does: it keeps ranked names whose leases ended (see
// withRanked), and would otherwise proclaim the same map again and again.
func sameLeases(a, b []int64, quiet bool) bool {
	zero := func(l []int64) bool { return !slices.ContainsFunc(l, func(x int64) bool { return x != 0 }) }
	if quiet && zero(a) && zero(b) {
		return true
	}
	return slices.Equal(a, b)
}

// ownLease returns this member's lease (0: out of the rink).
func (r *Rink) ownLease() int64 {
	if r.st.inc == nil {
		return 0
	}
	return int64(r.st.inc.Lease)
}

// rankedReborn reports whether the map ranks a name whose member key is
// newer than the view the map was planned from: a process restarted under
// the name, which starts nothing until a map planned with its key in view
// (see transition.View).
func (r *Rink) rankedReborn() bool {
	st := &r.st
	view := r.mapView()
	if view == 0 {
		return false // (a leader that does not say: members do not wait for it)
	}
	for _, name := range st.cur.Members {
		if m, ok := st.members[name]; ok && m.createRev > view {
			return true
		}
	}
	return false
}

// reportWait bounds how long the leader waits for the first load summary
// of a waiting member whose rebalance delay has run out before it ranks
// it: with the summary, it gives the member its share of the awaited
// roles (see fillNewcomers) rather than cold slots that a load round
// would then correct. Members write their first summary as they join
// (see core.ReportPause); members of d85b50e and before only at their first
// load interval, and wait this long.
const reportWait = time.Second

// holdForReports returns until when the waiting members ready to be
// ranked (in.Ready) wait for load summaries, or zero: while the rink is
// balanced by load (some load seen), until every one of them and every
// member owning slots has reported, and at most reportWait after the first
// of them became ready. A rink with no load seen ranks at once: there is
// nothing to place by.
func (r *Rink) holdForReports(in plan.Input, now time.Time) time.Time {
	l := r.st.lead
	if !in.ByLoad || len(in.Ready) == 0 {
		return time.Time{}
	}
	var first time.Time
	missing := !r.allReported(r.st.cur, false)
	for name := range in.Ready {
		if _, ok := l.reports[name]; !ok {
			missing = true
		}
		if at := in.Since[name].Add(r.opts.delay); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if until := first.Add(reportWait); missing && now.Before(until) {
		return until
	}
	return time.Time{}
}

// loadPending reports whether a load round would move slots now: the last
// round spent its budget, or the most loaded member is beyond the
// tolerance and a move would lower its load (slots frozen by recent rounds
// count as movable: they move in a later round). While some member that
// owns slots has not reported, no round runs (see loadRound), and none is
// pending.
func (r *Rink) loadPending(in plan.Input) bool {
	l := r.st.lead
	if !in.ByLoad || in.Load == nil || !r.allReported(r.st.cur, l.estRate) || len(in.Load) != len(plan.PrimaryMap(r.st.cur).Table) {
		return false
	}
	if l.more {
		return true
	}
	_, moved := plan.RebalanceLoad(r.st.cur, plan.LoadInput{Load: in.Load, Capacity: in.Capacity, Tolerance: r.opts.tolerance, Budget: 1})
	return len(moved) > 0
}

// restInfo is what the leader says of the moves it plans, for the floor
// key (see ackFloor.Rest): every member and observer reads it there. It
// speaks of one map: the one of seq seq in lineage lineage.
type restInfo struct {
	lineage, seq int64
	rest         int64 // the map's version when no move is planned after it (0: moves planned)
	round        bool  // a load round would move slots
	imbalance    float64
	tolerance    float64
}

// setRest stores what the leader plans (see restInfo) for its aggregator,
// and wakes the aggregator when it changed and wake is set; an imbalance
// that moved by less than 0.05 is not worth a floor write. (A leader
// about to proclaim a map does not wake it: the floor of the new map
// drops what was said of the old one anyway.)
func (r *Rink) setRest(rest int64, round bool, in plan.Input, wake bool) {
	st := &r.st
	box := st.lead.rest
	if box == nil {
		return // (a leadership made by hand in a test)
	}
	info := restInfo{lineage: st.lineage, seq: st.curSeq, rest: rest, round: round}
	if in.ByLoad && len(in.Load) == len(plan.PrimaryMap(st.cur).Table) && len(st.cur.Members) > 0 {
		info.imbalance = math.Round(plan.Imbalance(st.cur, in.Load, in.Capacity)*100) / 100
		info.tolerance = r.opts.tolerance
	}
	if old := box.info.Load(); old != nil && old.lineage == info.lineage && old.seq == info.seq && old.rest == info.rest &&
		old.round == info.round && math.Abs(old.imbalance-info.imbalance) < 0.05 && old.tolerance == info.tolerance {
		return
	}
	box.info.Store(&info)
	if wake {
		select {
		case box.kick <- struct{}{}:
		default:
		}
	}
}

// batchWindow is how far ahead of its delay a waiter is ranked together
// with one whose delay has run out: a tenth of the delay.
func batchWindow(delay time.Duration) time.Duration { return delay / 10 }

// nextVersion numbers the next map: above every version applied in the
// lineage, so that versions only ever rise, even after a map was written
// back by hand, and above every version this leadership proclaimed: a
// watch batch that has a later put of the map key too (a value damaged
// by hand over it) applies only the later one, and the next map repeated
// the version of the one the leader never applied.
func (r *Rink) nextVersion() int64 {
	v := max(r.st.cur.Version, r.st.topVer)
	if l := r.st.lead; l != nil {
		v = max(v, l.proclaimed)
	}
	return v + 1
}

// usable checks a planned map as members check what they apply: a leader
// never proclaims a map that it would refuse itself.
//
// It checks the map itself, not its encoding: a map holds only strings,
// integers and times, and member names are valid UTF-8 (see validName), so
// what members decode is what the leader planned.
func (r *Rink) usable(m wire.Map) error { return m.UsableBy(r.geometry()) }

// geometry returns what this member requires of the rink's maps.
func (r *Rink) geometry() wire.Geometry {
	return wire.Geometry{Slots: r.opts.slots, Replicas: r.opts.replicas}
}

// vacateRepeats returns m with every name that an earlier index holds
// too made empty: planning takes such an index as departed, and gives its
// slots to others (under the barrier, as any move).
func vacateRepeats(m wire.Map) wire.Map {
	m.Members = slices.Clone(m.Members)
	seen := make(map[string]bool, len(m.Members))
	for i, name := range m.Members {
		if seen[name] {
			m.Members[i] = ""
		}
		seen[name] = true
	}
	return m
}
