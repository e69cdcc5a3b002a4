package rink

import (
	"context"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Load. A holder tells rink how much work it does per role (AddLoad); each
// member keeps, per slot it holds, a rate that decays over the load window,
// and publishes a summary of its held slots in one key of its own, bound to
// its lease: rink/<name>/.load/<member>. It writes the key at most once per
// load interval, and only when the summary changed noticeably, so a rink
// costs O(members) keys and at most one write per member per interval.
// The key sorts before the acknowledgement keys, outside the range members
// follow: only observers and the leader's acknowledgement aggregator read
// it (the leader balances by load with WithImbalanceTolerance).
//
// Beside the load a member reports how many distinct roles it has awaited
// (AwaitRole, AwaitRoleContext, Run, Watch) in each slot it holds, and in
// every other slot (Await): every role this Rink was ever asked for
// counts, up to maxTrackedRoles. Awaited roles are reported at once, not at
// the next load interval: when the member joins (or rejoins) and whenever
// a role it had not awaited before is awaited, after reportPause, so that
// the leader knows them when it first spreads slots over the members
// (see fillNewcomers) and a rink is balanced by roles from its first
// spread on, with no load round after it.

// reportPause is how long a member waits, after it joins or awaits a new
// role, before it writes its summary: a burst of AwaitRole calls (a member
// awaiting its roles right after New) costs one write.
const reportPause = 50 * time.Millisecond

// loadAcc is the per-slot accumulator AddLoad adds to, and the awaited
// roles. AddLoad touches only acc; the reporter goroutine owns the rest of
// the load state.
type loadAcc struct {
	acc slotAcc // units added since the last tick

	mu    sync.Mutex
	roles map[string]struct{} // distinct roles awaited
	count map[int]int32       // roles per slot (slots with none left out)

	// kick wakes the reporter: a role was awaited for the first time, or
	// the member joined again (buffered: a kick waiting is enough).
	kick chan struct{}
}

func newLoadAcc(slots int) *loadAcc {
	return &loadAcc{acc: newSlotAcc(slots), roles: map[string]struct{}{}, count: map[int]int32{}, kick: make(chan struct{}, 1)}
}

// slotAcc is a float64 accumulator per slot, safe for concurrent use,
// whose memory grows with the slots added to (in chunks of accChunk), not
// with the rink's slots: a member adds load to the few it holds (issue 25).
type slotAcc struct {
	chunks []atomic.Pointer[[accChunk]atomic.Uint64]
}

const accChunk = 64

func newSlotAcc(slots int) slotAcc {
	return slotAcc{chunks: make([]atomic.Pointer[[accChunk]atomic.Uint64], (slots+accChunk-1)/accChunk)}
}

// add adds units to slot s's sum.
func (a *slotAcc) add(s int, units float64) {
	c := a.chunks[s/accChunk].Load()
	if c == nil {
		a.chunks[s/accChunk].CompareAndSwap(nil, new([accChunk]atomic.Uint64))
		c = a.chunks[s/accChunk].Load()
	}
	v := &c[s%accChunk]
	for {
		old := v.Load()
		if v.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+units)) {
			return
		}
	}
}

// load returns slot s's sum.
func (a *slotAcc) load(s int) float64 {
	if c := a.chunks[s/accChunk].Load(); c != nil {
		return math.Float64frombits(c[s%accChunk].Load())
	}
	return 0
}

// takeAll empties every sum, calling f with each slot's that is not 0.
func (a *slotAcc) takeAll(f func(s int, units float64)) {
	for i := range a.chunks {
		c := a.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if u := math.Float64frombits(c[j].Swap(0)); u != 0 {
				f(i*accChunk+j, u)
			}
		}
	}
}

// wake asks the reporter to write the member's summary soon.
func (l *loadAcc) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// AddLoad records units of work done for role (a request served, bytes
// handled, CPU seconds: any measure, as long as every member uses the
// same). Each member reports, per slot it holds, the rate of the units
// added over the last load window (WithLoadWindow) in its load key, and
// Observers show it (MemberState.Load). A slot's rate below half a unit
// per window counts as none: choose units so that a busy role adds many
// per window. AddLoad takes nanoseconds and does not allocate: call it on
// the hot path. A role with an empty name, units that are not positive
// and finite, and any units once the rink has stopped, are ignored.
func (r *Rink) AddLoad(role string, units float64) {
	if role == "" || !(units > 0) || math.IsInf(units, 1) {
		return
	}
	r.load.acc.add(wire.SlotOf(role, r.opts.slots), units)
}

// awaiting reports whether any role is awaited (false on a nil l: a Rink
// built by hand, with no reporter).
func (l *loadAcc) awaiting() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.count) > 0
}

// noteRole counts role as awaited in slot s.
func (l *loadAcc) noteRole(role string, s int) {
	l.mu.Lock()
	added := false
	if _, ok := l.roles[role]; !ok && len(l.roles) < wire.MaxTrackedRoles {
		l.roles[role] = struct{}{}
		l.count[s]++
		added = true
	}
	l.mu.Unlock()
	if added {
		l.wake()
	}
}

// rolesIn returns how many distinct roles this member has awaited in
// slot s (see Event.Roles); 0 without an accumulator (the tests' cores
// built by hand have none).
func (l *loadAcc) rolesIn(s int) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.count[s])
}

// reportLoad is the reporter goroutine: every load interval it folds in
// what AddLoad added, and writes the member's load key when the summary
// changed noticeably (or the member joined again since the last write).
// Woken (a join, a role awaited for the first time), it writes the rates
// of the last interval with the roles awaited now, reportPause later.
func (r *Rink) reportLoad() {
	interval, window := r.opts.loadEvery, r.opts.loadWindow
	meter := core.NewLoadMeter()
	roles := map[int]int32{}
	roleOf := func(s int) int32 { return roles[s] }
	var held []core.HeldLoad
	units := map[int]float64{}
	var last, rates wire.LoadReport // the last summary written; the last interval's
	var lastInc *incarnation
	var woke time.Time // the last write woken early
	ticked := false    // a load interval has passed: rates measures one
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var now time.Time
		woken := false
		select {
		case <-r.ctx.Done():
			return
		case now = <-t.C:
		case <-r.load.kick:
			// At most one early write per tenth of an interval: a member
			// that keeps awaiting new roles writes no more often.
			if !sleep(r.ctx, max(reportPause, time.Until(woke.Add(interval/10)))) {
				return
			}
			woken, woke = true, time.Now()
		}
		r.load.mu.Lock()
		clear(roles)
		maps.Copy(roles, r.load.count)
		r.load.mu.Unlock()
		if !woken {
			clear(units)
			r.load.acc.takeAll(func(s int, u float64) { units[s] = u })
			held = held[:0]
			r.slots.each(func(s int, st *slotState) {
				if st.ctx != nil && st.ctx.Err() == nil {
					held = append(held, core.HeldLoad{Slot: s, Units: units[s], Since: st.at})
				}
			})
			rates, ticked = meter.Tick(now, held, roleOf, interval, window), true
		}
		var owned []int
		byLoad := false
		r.ownersMu.RLock() // (the table may be written in place: see applyInPlace)
		if m := r.owners.Load(); m != nil {
			byLoad = m.ByLoad
			i := -1
			if rk := r.rank.Load(); rk != nil && rk.rank.Version == m.Version {
				i = rk.rank.Index // (found once per map by the run goroutine)
			} else {
				i = m.Index(r.opts.member)
			}
			if i >= 0 {
				for s, o := range plan.PrimaryMap(*m).Table {
					if int(o) == i {
						owned = append(owned, s)
					}
				}
			}
		}
		r.ownersMu.RUnlock()
		rep := wire.WithRoles(rates, roleOf, owned)
		rep.Unmeasured = !ticked
		inc := r.loadInc.Load()
		if inc != nil && inc != lastInc && inc.JoinLoad != nil {
			last, lastInc = *inc.JoinLoad, inc // (written with the member key)
			r.emit(Event{Kind: EventLoadReported, Slot: -1})
		}
		if inc == nil || inc.ctx.Err() != nil || inc == lastInc && (!core.LoadChanged(last, rep) || !byLoad && wire.IdleAlike(last, rep)) {
			continue
		}
		if r.writeLoad(inc, rep) {
			last, lastInc = rep, inc
			rate, n := rep.Total()
			r.emit(Event{Kind: EventLoadReported, Slot: -1, Load: rate, Roles: n})
		}
	}
}

// writeLoad writes the member's load key, bound to inc's lease, if inc's
// member key is still the member's.
func (r *Rink) writeLoad(inc *incarnation, rep wire.LoadReport) bool {
	ctx, cancel := context.WithTimeout(inc.ctx, r.opts.loadEvery)
	defer cancel()
	key := r.keys.Member(r.opts.member)
	resp, err := r.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", inc.CreateRev),
			clientv3.Compare(clientv3.LeaseValue(key), "=", inc.Lease),
		).
		Then(clientv3.OpPut(r.keys.Load(r.opts.member), string(rep.Encode()), clientv3.WithLease(clientv3.LeaseID(inc.Lease)))).
		Commit()
	if err != nil {
		if inc.ctx.Err() == nil {
			r.log.Info("writing the load summary failed; retrying at the next interval", zap.Error(err))
		}
		return false
	}
	return resp.Succeeded
}
