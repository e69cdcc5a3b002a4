package rink

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// leadership is the run goroutine's state while this member leads.
type leadership struct {
	inc *incarnation
	key string // our election key
	rev int64  // its create revision: proclamations are guarded by it

	since   map[string]time.Time // when each waiting member was first seen (monotonic)
	busy    bool                 // a proclamation is in flight
	waitRev int64                // plan only once the view has reached this revision
	timer   *time.Timer          // next rebalance or retry
	retry   *backoff
	stopAgg context.CancelFunc // stops the acknowledgement aggregator
	refused string             // why the last planned map was not proclaimed (logged once)
	// strangers: the members that speak none of our protocols (logged once)
	strangers string

	// Balancing by load (WithImbalanceTolerance; see loadplan.go).
	reports   map[string]loadReport // members' load summaries, from the aggregator
	est       []float64             // each slot's estimated load
	estOK     []bool                // est holds a reported figure
	estRate   bool                  // est is of rates (else of awaited roles)
	round     int                   // load rounds so far
	movedAt   map[int]int           // slot -> the round that last moved it
	loadTimer *time.Timer           // next load round
	roundDue  bool                  // a load round may run
	more      bool                  // the last round spent its budget: go on with the next
	// modeLogged: a map balanced the other way was logged once
	modeLogged bool

	// Warm-up (WithWarmup; see warmup.go): the pending announcement, its
	// deadline's timer, each member's newest announcement it is ready
	// for (from the aggregator), and a load round's moves kept until made.
	warm       *warmState
	warmTimer  *time.Timer
	warmAcks   map[string]int64
	roundMoves map[int]string

	// rest carries what the leader says of the moves it plans to this
	// leadership's aggregator (see setRest).
	rest *restBox
	// rolesOf caches, per member, the roles its summary says it awaits
	// per slot (held or not), built from reports when needed (nil:
	// reports changed since).
	rolesOf map[string]map[int]int
}

// restBox is shared by a leadership's run goroutine, which stores what it
// plans in info and wakes the aggregator through kick, and its aggregator,
// which writes it into the floor key. One per leadership, so that an
// aggregator that is stopping cannot take a wake-up meant for the next.
type restBox struct {
	info   atomic.Pointer[restInfo]
	ghosts atomic.Int64 // how many ghosts the leader knows (see ackFloor.Ghosts)
	kick   chan struct{}
}

// publishGhosts tells this leadership's aggregator how many ghosts the
// leader knows, when that changed.
func (r *Rink) publishGhosts() {
	st := &r.st
	if st.lead == nil || st.lead.rest == nil || st.lead.rest.ghosts.Load() == int64(len(st.ghosts)) {
		return
	}
	st.lead.rest.ghosts.Store(int64(len(st.ghosts)))
	select {
	case st.lead.rest.kick <- struct{}{}:
	default:
	}
}

type elected struct {
	inc *incarnation
	key string
	rev int64
}

type proclaimResult struct {
	lead    *leadership
	version int64
	rev     int64 // ok: the revision of our write; otherwise the map key's mod revision
	based   int64 // the map key's mod revision the plan was based on
	ok      bool  // the map was written
	lost    bool  // our election key is gone
	err     error
}

// campaign starts a goroutine that runs for leadership for the life of inc.
//
// It runs etcd's election recipe, as concurrency.Election does: the
// candidate's key (rink/<name>/election/<lease hex>, bound to inc's lease,
// written with the member key: see candidacy) leads once no election key
// with a lower create revision is left, and the candidate waits for the
// deletion of the one just below its own. Unlike concurrency.Election it
// deletes that key, guarded by its revision, when no campaign made it (a
// stray: see stray.go): the member next in line may follow the narrow view
// (see view.go), which shows it no stray, and a stray below it would keep
// the rink without a leader for good. It never resigns: the key goes with
// the lease, as the member leaves.
func (r *Rink) campaign(inc *incarnation) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		b := newBackoff()
		for inc.ctx.Err() == nil {
			e, err := r.runFor(inc)
			if err == nil {
				select {
				case r.handoffCh <- handoff{kind: handElected, elected: e}:
				case <-inc.ctx.Done():
				}
				return
			}
			if inc.ctx.Err() != nil {
				return
			}
			wait := b.next()
			r.log.Warn("campaign failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
			sleep(inc.ctx, wait)
		}
	}()
}

// runFor writes inc's election key if it is missing and returns once it
// leads (see campaign).
func (r *Rink) runFor(inc *incarnation) (elected, error) {
	ctx := inc.ctx
	key := r.keys.electionKey(int64(inc.lease))
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, r.opts.member, clientv3.WithLease(inc.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return elected{}, err
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return elected{}, fmt.Errorf("rink: election key %s went while campaigning", key)
		}
		rev = kvs[0].CreateRevision
	}
	for {
		below, err := r.cli.Get(ctx, r.keys.election(), append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
		if err != nil {
			return elected{}, err
		}
		if len(below.Kvs) == 0 {
			return elected{inc: inc, key: key, rev: rev}, nil
		}
		kv := below.Kvs[0]
		if !r.keys.isCandidate(kv) {
			del, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit()
			if err != nil {
				return elected{}, err
			}
			if del.Succeeded {
				r.log.Warn("deleted a stray key", zap.String("key", string(kv.Key)))
			}
			continue
		}
		if err := waitChanged(ctx, r.cli, string(kv.Key), below.Header.Revision); err != nil {
			return elected{}, err
		}
	}
}

// waitChanged returns once key is put or deleted after revision rev (a
// put may make an election key a stray: see runFor), or ctx ends.
func waitChanged(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	return ctx.Err()
}

func (r *Rink) onElected(e elected) {
	st := &r.st
	if e.inc != st.inc || st.stopping {
		return
	}
	r.log.Info("elected leader", zap.Int64("version", st.cur.Version))
	st.lead = &leadership{inc: e.inc, key: e.key, rev: e.rev, since: map[string]time.Time{}, retry: newBackoff(), movedAt: map[int]int{},
		rest: &restBox{kick: make(chan struct{}, 1)}}
	if r.opts.byLoad {
		st.lead.loadTimer = time.NewTimer(r.opts.loadEvery)
	}
	st.dirty = true
	var ctx context.Context
	ctx, st.lead.stopAgg = context.WithCancel(e.inc.ctx)
	box := st.lead.rest // (st is the run goroutine's: read it here, not in the aggregator)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.aggregate(ctx, e.key, e.rev, box)
	}()
}

func (r *Rink) stopLeading() {
	st := &r.st
	if st.lead == nil {
		return
	}
	if st.lead.timer != nil {
		st.lead.timer.Stop()
	}
	if st.lead.loadTimer != nil {
		st.lead.loadTimer.Stop()
	}
	if st.lead.warmTimer != nil {
		st.lead.warmTimer.Stop()
	}
	st.lead.stopAgg()
	st.lead = nil
}

// plan runs after every event while this member leads: when membership, the
// map or a timer changed something, it derives the next map and proclaims it
// if it differs from the current one.
func (r *Rink) plan() {
	st := &r.st
	l := st.lead
	if l == nil || !st.view.wide || !st.dirty || l.busy || st.rev < l.waitRev || st.stopping || st.incompatible != nil && !waitsOut(st.incompatible) ||
		st.inc == nil || !st.selfSeen || st.taint != 0 && st.taint == st.lineage && st.curRev != 0 {
		return
	}
	st.dirty = false
	now := time.Now()
	proto, strangers := rinkProtocol(st.members)
	live := withGhosts(st.ghosts, speakers(liveByAge(st.members), st.members, proto), st.members, st.cur)
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
	in := planInput{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}, Capacity: capacities(st.members)}
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
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if !due.IsZero() {
		l.timer = time.NewTimer(time.Until(due))
	}

	next := plan(st.cur, in)
	bare := st.cur
	bare.Incoming = nil
	settling := r.loadPending(in) // a load round would move slots
	if in.ByLoad && l.roundDue && next.sameAssignment(bare) && settling {
		r.loadRound(&next, in)
		if next.sameAssignment(bare) {
			settling = r.loadPending(in) // a round that moved nothing may have been the last
		}
		if r.opts.warmup > 0 {
			l.roundMoves = r.plannedMoves(st.cur, next)
		}
	} else if len(l.roundMoves) > 0 {
		r.keepRound(&next)
	}
	if l.roundDue && !settling && next.sameAssignment(bare) {
		// No round would move a slot: none runs, and the next may come a
		// load interval from now, as if this one had run. (Rounds keep to
		// the interval's beat, with every member's summary of the last
		// interval in.)
		l.roundDue = false
		l.loadTimer = time.NewTimer(r.opts.loadEvery)
	}
	if r.opts.warmup > 0 {
		r.holdForWarmup(&next, func() rankMap {
			in.Live = append(slices.Clone(in.Live), leavers...)
			return plan(st.cur, in)
		}, now)
	}
	next.Schema = proto
	if s := strings.Join(strangers, ","); s != l.strangers {
		l.strangers = s
		if s != "" {
			r.log.Warn("members speak none of this member's protocols: they would refuse its maps, and are not ranked", zap.Strings("members", strangers), zap.Ints("protocols", speaks))
		}
	}
	// A change record this member cannot apply (see underived) is written
	// over with a whole map: nobody who lists the rink can read it, and
	// its version cannot be told.
	underived := st.underivedRev > st.curRev
	if next.sameAssignment(st.cur) && next.Schema == st.cur.Schema && st.cur.Version > 0 && st.curRev != 0 && !st.stale && st.incompatible == nil && !underived {
		// Nothing changed. (A map key that was deleted is written again;
		// a map whose version does not exceed every earlier one, such as
		// a map put back by hand, is proclaimed again with a new version,
		// for members that tell maps apart by version only.)
		rest := int64(0)
		if len(st.cur.Waiting) == 0 && len(l.since) == 0 && len(st.cur.Incoming) == 0 && len(st.cur.Leave) == 0 &&
			len(leavers) == 0 && l.warm == nil && !settling {
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
	if underived {
		mapRev, base = st.underivedRev, rankMap{} // (an empty base: the whole map)
	}
	t := transition{Gone: goneFrom(&base, &next, st.members), Incs: r.replacedNames()}
	st.proclaiming++ // (base shares st.cur's table: see applyInPlace)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(l.inc.ctx, r.opts.ttl)
		res := r.proclaim(ctx, l, base, next, mapRev, t)
		cancel()
		select {
		case r.handoffCh <- handoff{kind: handProclaimed, proclaimed: res}:
		case <-r.ctx.Done():
		}
	}()
}

// reportWait bounds how long the leader waits for the first load summary
// of a waiting member whose rebalance delay has run out before it ranks
// it: with the summary, it gives the member its share of the awaited
// roles (see fillNewcomers) rather than cold slots that a load round
// would then correct. Members write their first summary as they join
// (see reportPause); members of d85b50e and before only at their first
// load interval, and wait this long.
const reportWait = time.Second

// holdForReports returns until when the waiting members ready to be
// ranked (in.Ready) wait for load summaries, or zero: while the rink is
// balanced by load (some load seen), until every one of them and every
// member owning slots has reported, and at most reportWait after the first
// of them became ready. A rink with no load seen ranks at once: there is
// nothing to place by.
func (r *Rink) holdForReports(in planInput, now time.Time) time.Time {
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
func (r *Rink) loadPending(in planInput) bool {
	l := r.st.lead
	if !in.ByLoad || in.Load == nil || !r.allReported(r.st.cur, l.estRate) || len(in.Load) != len(r.st.cur.Table) {
		return false
	}
	if l.more {
		return true
	}
	_, moved := rebalanceLoad(r.st.cur, loadPlanInput{Load: in.Load, Capacity: in.Capacity, Tolerance: r.opts.tolerance, Budget: 1})
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
func (r *Rink) setRest(rest int64, round bool, in planInput, wake bool) {
	st := &r.st
	box := st.lead.rest
	if box == nil {
		return // (a leadership made by hand in a test)
	}
	info := restInfo{lineage: st.lineage, seq: st.curSeq, rest: rest, round: round}
	if in.ByLoad && len(in.Load) == len(st.cur.Table) && len(st.cur.Members) > 0 {
		info.imbalance = math.Round(imbalance(st.cur, in.Load, in.Capacity)*100) / 100
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
// back by hand.
func (r *Rink) nextVersion() int64 { return max(r.st.cur.Version, r.st.topVer) + 1 }

// usable checks a planned map as members check what they apply: a leader
// never proclaims a map that it would refuse itself.
//
// It checks the map itself, not its encoding: a map holds only strings,
// integers and times, and member names are valid UTF-8 (see validName), so
// what members decode is what the leader planned.
func (r *Rink) usable(m rankMap) error { return m.usableBy(r.opts.slots) }

// mapOps returns the puts that write next as the rink's map over base, the
// map the map key holds at mapRev (0: the key is absent). In protocol 2
// the map key holds the whole map. From protocol 3 it holds a change
// record from base, and the snapshot key holds the whole map, written in
// the same transaction: members apply the record, and read the whole map
// only when they cannot (see readMap). The whole map goes into the map
// key alone when the key is absent (a lineage starts whole) and when the
// record would be no smaller.
func (r *Rink) mapOps(base, next *rankMap, mapRev int64, t transition) []clientv3.Op {
	wholeJSON := next.encode()
	whole := string(wholeJSON)
	if next.Schema < 3 {
		return []clientv3.Op{clientv3.OpPut(r.keys.rankMap(), whole)}
	}
	if mapRev == 0 || base.Version == 0 {
		return []clientv3.Op{clientv3.OpPut(r.keys.rankMap(), whole)}
	}
	c := diff(base, next)
	t.From = base.Version
	c.transition = t
	rec := c.encode()
	if alone := withTransition(wholeJSON, c.transition); len(rec) >= len(alone) {
		// A change as large as the map (a hole closed in a small rink
		// renumbers half the slots): the whole map alone, which members
		// read as one. The whole map beside the key would double what
		// the transaction writes, on the path of a handover.
		return []clientv3.Op{clientv3.OpPut(r.keys.rankMap(), string(alone))}
	}
	return []clientv3.Op{clientv3.OpPut(r.keys.rankMap(), string(rec)), clientv3.OpPut(r.keys.snapshot(), whole)}
}

// proclaim writes m as the rink's map, provided we still lead and the map
// key is still at mapRev. Extra operations join the same transaction.
func (r *Rink) proclaim(ctx context.Context, l *leadership, base, m rankMap, mapRev int64, t transition, extra ...clientv3.Op) proclaimResult {
	res := proclaimResult{lead: l, version: m.Version, based: mapRev}
	ops := append(r.mapOps(&base, &m, mapRev, t), extra...)
	resp, err := r.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev),
			clientv3.Compare(clientv3.ModRevision(r.keys.rankMap()), "=", mapRev),
		).
		Then(ops...).
		Else(clientv3.OpGet(l.key), clientv3.OpGet(r.keys.rankMap())).
		Commit()
	if err != nil {
		res.err = err
		return res
	}
	res.rev, res.ok = resp.Header.Revision, resp.Succeeded
	if !resp.Succeeded {
		// Wait for the map write that beat us, not for the header revision:
		// in an etcd shared with others that may be a write our watch of
		// the rink's keys never sees.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		res.lost = len(kvs) == 0 || kvs[0].CreateRevision != l.rev
		res.rev = 0
		if m := resp.Responses[1].GetResponseRange().Kvs; len(m) > 0 {
			res.rev = m[0].ModRevision
		}
	}
	return res
}

func (r *Rink) onProclaimed(res proclaimResult) {
	st := &r.st
	l := st.lead
	if l == nil || res.lead != l {
		return
	}
	l.busy = false
	st.dirty = true
	switch {
	case res.err != nil:
		wait := l.retry.next()
		r.log.Warn("proclaiming the map failed, retrying", zap.Error(res.err), zap.Int64("version", res.version), zap.Duration("backoff", wait))
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timer = time.NewTimer(wait)
		st.dirty = false // the timer sets it again
	case res.ok:
		l.retry.reset()
		l.waitRev = res.rev
		r.log.Info("proclaimed map", zap.Int64("version", res.version), zap.Int64("revision", res.rev))
	case res.lost:
		r.log.Warn("lost leadership: our election key is gone")
		r.stopLeading()
		if st.inc != nil && st.inc.ctx.Err() == nil {
			r.campaign(st.inc)
		}
	case res.rev == 0:
		// The map key is gone but our view still shows it: retry shortly,
		// once the watch has delivered the deletion.
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timer = time.NewTimer(l.retry.next())
		st.dirty = false // the timer sets it again
	case res.rev < res.based:
		// The key's mod revision only rises (a deleted key comes back at a
		// higher one): etcd went back in time.
		r.restored(fmt.Sprintf("the map key is at revision %d, below revision %d seen before", res.rev, res.based))
	case res.rev == res.based:
		// The map is where our plan found it, yet the guard failed: our
		// view is wrong in a way waiting will not mend. Back off and plan
		// again rather than spin.
		wait := l.retry.next()
		r.log.Warn("proclaiming the map failed although the view is current, retrying",
			zap.Int64("map_revision", res.rev), zap.Int64("view_revision", st.rev), zap.Duration("backoff", wait))
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timer = time.NewTimer(wait)
		st.dirty = false // the timer sets it again
	default:
		// The map changed under us: plan again once the view has caught up.
		l.waitRev = res.rev
	}
}

// depart is a ranked member's last act when it shuts down: one
// transaction proclaims a map without this member (promoting the
// longest-waiting member into its index, or moving the highest index into
// it) and deletes this member's key, so that the members taking over its
// slots see both in one watch event and start at once. Any member may do
// it, leader or not: the transaction is guarded by the map's mod revision
// (a leader's concurrent proclamation fails, or makes this one fail), and
// by a comparison over the member keys' create revisions, so that a member
// that joined after this member's view (a newcomer whose New returned the
// moment before this Shutdown) is never passed over. When a guard fails it
// plans again from the listing the failed transaction returns. It reports
// whether the map was written; if not, the caller's lease revocation
// deletes the key, and the leader proclaims the map.
//
// release ends this member's holdings; depart calls it right before its
// first transaction, once the map is planned and encoded, so that
// planning is not on the handover's path (the caller calls it anyway).
func (r *Rink) depart(ctx context.Context, release func()) bool {
	st := &r.st
	self := r.opts.member
	key := r.keys.member(self)
	members, cur, curRev, curSeq, viewRev := st.members, st.cur, st.curRev, st.curSeq, st.rev
	version := r.nextVersion()
	if st.inc == nil || st.incompatible != nil || curRev == 0 || cur.index(self) < 0 || st.taint != 0 && st.taint == st.lineage {
		return false // not ranked, or no usable map: nothing to hand over
	}
	ghosts := st.ghosts
	// relisted plans again from the rink as a listing (resp) saw it: its
	// last response the whole map, the others the member keys and the map
	// key among others.
	relisted := func(resp *clientv3.TxnResponse) bool {
		members, viewRev = map[string]memberInfo{}, resp.Header.Revision
		ours := false
		var snap *mvccpb.KeyValue
		last := len(resp.Responses) - 1
		if kvs := resp.Responses[last].GetResponseRange().Kvs; len(kvs) > 0 {
			snap = kvs[0]
		}
		prevRev := curRev
		curRev = 0
		var kvs []*mvccpb.KeyValue
		for _, rr := range resp.Responses[:last] {
			kvs = append(kvs, rr.GetResponseRange().Kvs...)
		}
		for _, kv := range kvs {
			k := string(kv.Key)
			switch {
			case r.keys.isMember(k):
				if name, ok := r.keys.liveMember(kv); ok {
					protocols, capacity := metaOf(kv.Value)
					members[name] = memberInfo{createRev: kv.CreateRevision, protocols: protocols, capacity: capacity, leaving: leavingOf(kv.Value)}
				}
				ours = ours || k == key && kv.CreateRevision == st.inc.createRev && clientv3.LeaseID(kv.Lease) == st.inc.lease
			case r.keys.isMap(k):
				m, err := readMap(kv, snap, &cur, prevRev != 0, curSeq, st.lineage, r.opts.slots)
				if kv.ModRevision == prevRev {
					m, err = cur, nil // (the guard failed on the member keys)
				}
				if err != nil || kv.CreateRevision != st.lineage || kv.Version < curSeq {
					return false // unusable, another lineage, or etcd went back: leave it to the leader
				}
				cur, curRev, curSeq = m, kv.ModRevision, kv.Version
				version = max(version, m.Version+1)
			}
		}
		return curRev != 0 && cur.index(self) >= 0 && ours // (our key is not ours any more: leave it to the leader)
	}
	if !st.view.wide {
		// The narrow view has no member keys (see view.go): list them.
		// Ranked members without a key stay ranked in the plan: this
		// member cannot tell a crash from a ghost, and the leader moves
		// them as it finds out.
		// (Shutdown ends the roles when its context ends first: see
		// Shutdown. The departure still goes out, as any.)
		resp, err := r.listRink(ctx)
		if err != nil || !relisted(resp) {
			return false
		}
		ghosts = map[int64]string{}
		for i, name := range cur.Members {
			if _, ok := members[name]; !ok {
				ghosts[-int64(i)-1] = name
			}
		}
	}
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		live := deleteName(withGhosts(ghosts, speakers(liveByAge(members), members, cur.Schema), members, cur), self)
		for _, name := range live {
			if members[name].leaving {
				live = deleteName(live, name) // it is on its way out: no heir
			}
		}
		next := plan(cur, planInput{Live: live, Ready: map[string]bool{}, Since: map[string]time.Time{}, Capacity: capacities(members), ByLoad: cur.ByLoad})
		next.Version, next.Leader = version, cur.Leader
		next.Schema = cur.Schema // a departure changes no protocol
		if st.lead != nil {
			next.Leader = self
		}
		if err := r.usable(next); err != nil {
			r.log.Error("hand-over: refusing to proclaim a map that members would refuse", zap.Error(err))
			return false
		}
		fkey, fend := r.keys.followed()
		ops := append(r.mapOps(&cur, &next, curRev, transition{Gone: []string{self}}), clientv3.OpDelete(key))
		release()
		r.awaitDrains(r.stopCtx)
		resp, err := r.cli.Txn(ctx).
			If(
				clientv3.Compare(clientv3.ModRevision(r.keys.rankMap()), "=", curRev),
				clientv3.Compare(clientv3.CreateRevision(r.keys.members()), "<", viewRev+1).WithPrefix(),
				clientv3.Compare(clientv3.CreateRevision(key), "=", st.inc.createRev),
				clientv3.Compare(clientv3.LeaseValue(key), "=", st.inc.lease),
			).
			Then(ops...).
			Else(clientv3.OpGet(fkey, clientv3.WithRange(fend)), clientv3.OpGet(r.keys.snapshot())).
			Commit()
		if err != nil {
			r.log.Warn("hand-over failed; successors wait for the lease to be revoked", zap.Error(err))
			return false
		}
		if resp.Succeeded {
			r.log.Info("handed over", zap.Int64("version", next.Version), zap.Int("attempt", attempt))
			return true
		}
		if !relisted(resp) {
			return false
		}
	}
	return false
}

// replacedNames returns, for each ghost (see ghosts.go) whose name a live
// member key holds now (a process restarted under the name after an
// operator deleted the old key), that key's create revision: the
// transition of the leader's maps carries them (see transition.Incs).
func (r *Rink) replacedNames() map[string]int64 {
	st := &r.st
	var incs map[string]int64
	for _, name := range st.ghosts {
		if m, ok := st.members[name]; ok {
			if incs == nil {
				incs = map[string]int64{}
			}
			incs[name] = m.createRev
		}
	}
	return incs
}

// goneFrom returns the members that base ranks or lists as waiting, that
// next drops, and that have no member key in members: they hold nothing
// (a ghost, whose key went while its lease lives, stays ranked: see
// withGhosts). Members that follow only the map learn it from the
// transition written with next.
func goneFrom(base, next *rankMap, members map[string]memberInfo) []string {
	var gone []string
	drop := func(name string) {
		if _, live := members[name]; !live && next.index(name) < 0 && !next.waits(name) && !slices.Contains(gone, name) {
			gone = append(gone, name)
		}
	}
	for _, name := range base.Members {
		drop(name)
	}
	for _, w := range base.Waiting {
		drop(w.Name)
	}
	return gone
}

// withGhosts returns live (names of members with keys, oldest first) with
// the ghosts that cur ranks (see ghosts.go) after them: planning keeps a
// ghost ranked, with its slots, until etcd says its lease is gone. Its
// member may still hold them, cut off etcd, until it fences; a map giving
// them to others would let a newcomer that never saw the key go (and so
// knows no ghost) start them at once (issue 22).
func withGhosts(ghosts map[int64]string, live []string, members map[string]memberInfo, cur rankMap) []string {
	for _, name := range ghosts {
		if _, ok := members[name]; !ok && cur.index(name) >= 0 && !slices.Contains(live, name) {
			live = append(live, name)
		}
	}
	return live
}

// capacities returns the members' capacities other than 1, for planInput.
func capacities(members map[string]memberInfo) map[string]float64 {
	var out map[string]float64
	for name, m := range members {
		if m.capacity != 1 && m.capacity != 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[name] = m.capacity
		}
	}
	return out
}

func deleteName(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// estimate returns each slot's estimated load, from the members' load
// summaries. The figures are rates where any member records load, and
// awaited roles otherwise.
//
//   - A rate comes from the owner's summary once the owner has held the
//     slot for half a load window; until then (a slot that moved) the
//     previous figure stands.
//   - Roles: a slot counts the roles its owner awaits in it, held or not
//     (see loadReport.Await): a slot is worth what its owner will run.
//     So the figure does not change while the owner is fenced, or before
//     an heir that has just taken it over holds it; while the owner's
//     summary does not list the slot (written before it owned it), the
//     previous figure stands.
//
// It returns nil while no summary is known.
func (r *Rink) estimate() []float64 {
	st := &r.st
	l := st.lead
	if len(l.reports) == 0 {
		return nil
	}
	S := r.opts.slots
	rate := false
	for _, rep := range l.reports {
		for _, e := range rep.Slots {
			rate = rate || e.Rate > 0
		}
	}
	if l.est == nil || rate != l.estRate {
		l.est, l.estOK, l.estRate = make([]float64, S), make([]bool, S), rate
	}
	if !rate {
		if l.rolesOf == nil {
			l.rolesOf = make(map[string]map[int]int, len(l.reports))
			for name, rep := range l.reports {
				m := make(map[int]int, len(rep.Slots)+len(rep.Await))
				for _, e := range rep.Slots {
					m[e.Slot] = e.Roles
				}
				for _, e := range rep.Await {
					m[e.Slot] = e.Roles
				}
				l.rolesOf[name] = m
			}
		}
		roles := make([]map[int]int, len(st.cur.Members)) // by index
		for i, name := range st.cur.Members {
			roles[i] = l.rolesOf[name]
		}
		for s, o := range st.cur.Table {
			if o < 0 || int(o) >= len(roles) || s >= S {
				continue
			}
			if n, ok := roles[o][s]; ok {
				l.est[s] = float64(n)
			} // (a slot its owner's summary does not list: the previous figure stands)
		}
		return slices.Clone(l.est)
	}
	mature := r.opts.loadWindow.Seconds() / 2
	for name, rep := range l.reports {
		for _, e := range rep.Slots {
			if e.Slot >= S || st.cur.owner(e.Slot) != name || l.estOK[e.Slot] && e.Age < mature {
				continue
			}
			l.est[e.Slot], l.estOK[e.Slot] = e.Rate, true
		}
	}
	return slices.Clone(l.est)
}

// loadSeen reports whether the leader balances by load: when some slot
// carries load (a rate, or an awaited role). With none, it balances by
// count, as without WithImbalanceTolerance, so that a rink whose members
// use only ranks and slots keeps even slot counts. A map balanced by load
// stays so until every member owning slots has reported none: a leader
// just elected keeps its predecessor's load moves while the summaries
// come in.
func (r *Rink) loadSeen(est []float64) bool {
	for _, v := range est {
		if v > 0 {
			return true
		}
	}
	return r.st.cur.ByLoad && !r.allReported(r.st.cur, false)
}

// allReported reports whether every member owning slots in m has
// reported its load; with measured, its rates over a load interval.
func (r *Rink) allReported(m rankMap, measured bool) bool {
	seen := make([]bool, len(m.Members))
	for _, i := range m.Table {
		if i < 0 || int(i) >= len(seen) || seen[i] {
			continue
		}
		seen[i] = true
		if rep, ok := r.st.lead.reports[m.Members[i]]; !ok || measured && rep.Unmeasured {
			return false
		}
	}
	return true
}

// loadRound runs one round of load balancing on next (see rebalanceLoad),
// once every ranked member that owns slots has reported its load, and
// starts the timer of the next round.
func (r *Rink) loadRound(next *rankMap, in planInput) {
	st := &r.st
	l := st.lead
	l.roundDue = false
	l.loadTimer = time.NewTimer(r.opts.loadEvery)
	if in.Load == nil {
		return
	}
	if !r.allReported(*next, l.estRate) {
		return // some member's load is unknown yet
	}
	frozen := make([]bool, len(next.Table))
	for s, at := range l.movedAt {
		if l.round-at < loadFreeze {
			frozen[s] = true
		} else {
			delete(l.movedAt, s)
		}
	}
	before := imbalance(*next, in.Load, in.Capacity)
	budget := max(1, len(next.Table)*loadBudgetPercent/100)
	table, moved := rebalanceLoad(*next, loadPlanInput{Load: in.Load, Capacity: in.Capacity, Tolerance: r.opts.tolerance, Budget: budget, Frozen: frozen, Continue: l.more})
	l.round++
	l.more = len(moved) >= budget
	if len(moved) == 0 {
		r.emit(Event{Kind: EventLoadBalanced, Slot: -1, Imbalance: before})
		return
	}
	next.Table = table
	r.emit(Event{Kind: EventLoadBalanced, Slot: -1, Imbalance: imbalance(*next, in.Load, in.Capacity), Moved: len(moved)})
	for _, s := range moved {
		l.movedAt[s] = l.round
	}
	r.log.Info("balancing by load", zap.Int("slots", len(moved)), zap.Float64("imbalance", before),
		zap.Float64("expected", imbalance(*next, in.Load, in.Capacity)))
}

// A load round moves at most loadBudgetPercent of the slots, and a slot it
// moved stays put for loadFreeze rounds.
const (
	loadBudgetPercent = 5
	loadFreeze        = 3
)
