package rink

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
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
// a role it had not awaited before is awaited, after core.ReportPause, so that
// the leader knows them when it first spreads slots over the members
// (see fillNewcomers) and a rink is balanced by roles from its first
// spread on, with no load round after it.

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
	// again: the leader lacks this member's summary (see unreported); the
	// reporter writes it at its next decision, changed or not.
	again atomic.Bool
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

// unreported writes the member's load summary again, soon, when the floor
// names it among the members whose summaries the leader lacks (see
// wire.AckFloor.Unreported): its load key was deleted or erased, and it
// does not follow that key itself.
func (r *Rink) unreported() {
	if r.load != nil && slices.Contains(r.st.floor.Unreported, r.opts.member) {
		r.load.again.Store(true)
		r.load.wake()
	}
}

// takeAgain hands the reporter the floor's request to write again (see
// unreported), once.
func (l *loadAcc) takeAgain(rep *core.LoadReporter) {
	if l.again.Swap(false) {
		rep.Forget()
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

// reportLoad is the reporter goroutine: it drives a core.LoadReporter
// (which decides what to write and when) with the clock, the units AddLoad
// added and the Rink's state, and writes what it decides. Every load
// interval it ticks; woken (a join, a role awaited for the first time), it
// writes the last interval's rates with the roles awaited now, after
// core.ReportPause.
func (r *Rink) reportLoad() {
	rep := core.NewLoadReporter(r.opts.loadEvery, r.opts.loadWindow)
	in := newLoadInputs()
	t := time.NewTicker(rep.Interval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case now := <-t.C:
			rep.Tick(now, r.heldLoads(in), in.roleOf)
		case <-r.load.kick:
			if !sleep(r.ctx, rep.WakeDelay(time.Now())) {
				return
			}
			rep.Woke(time.Now())
		}
		inc := r.loadInc.Load()
		var ci *core.Inc
		live := false
		if inc != nil {
			ci, live = &inc.Inc, inc.ctx.Err() == nil
		}
		owned, byLoad := r.ownedSlots(in)
		r.load.takeAgain(rep)
		next := rep.Next(ci, live, in.roleOf, owned, byLoad)
		if next.Joined {
			r.emit(Event{Kind: EventLoadReported, Slot: -1})
		}
		if next.Write && r.writeLoad(inc, next.Report) {
			r.loadWritten(rep, inc, next.Report)
		}
	}
}

// loadInputs is what a reporter's driver gathers for its LoadReporter, kept
// between ticks to spare allocations.
type loadInputs struct {
	roles map[int]int32 // the roles awaited, by slot (see loadAcc.count)
	units map[int]float64
	held  []core.HeldLoad
}

func newLoadInputs() *loadInputs {
	return &loadInputs{roles: map[int]int32{}, units: map[int]float64{}}
}

func (in *loadInputs) roleOf(s int) int32 { return in.roles[s] }

// heldLoads takes the units AddLoad added since the last tick, and returns
// the slots held now with them.
func (r *Rink) heldLoads(in *loadInputs) []core.HeldLoad {
	clear(in.units)
	r.load.acc.takeAll(func(s int, u float64) { in.units[s] = u })
	in.held = in.held[:0]
	r.slots.each(func(s int, st *slotState) {
		if st.ctx != nil && st.ctx.Err() == nil {
			in.held = append(in.held, core.HeldLoad{Slot: s, Units: in.units[s], Since: st.at})
		}
	})
	return in.held
}

// ownedSlots reads the roles awaited now into in, and returns the slots
// the applied map gives this member, and whether it balances by load.
func (r *Rink) ownedSlots(in *loadInputs) (owned []int, byLoad bool) {
	r.load.mu.Lock()
	clear(in.roles)
	maps.Copy(in.roles, r.load.count)
	r.load.mu.Unlock()
	r.ownersMu.RLock() // (the table may be written in place: see applyInPlace)
	defer r.ownersMu.RUnlock()
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
	return owned, byLoad
}

// loadWritten notes a summary written for inc, and reports it.
func (r *Rink) loadWritten(rep *core.LoadReporter, inc *incarnation, written wire.LoadReport) {
	rep.Written(&inc.Inc, written)
	rate, n := written.Total()
	r.emit(Event{Kind: EventLoadReported, Slot: -1, Load: rate, Roles: n})
}

// writeLoad writes the member's load key, bound to inc's lease, if inc's
// member key is still the member's (see core.LoadTxn).
func (r *Rink) writeLoad(inc *incarnation, rep wire.LoadReport) bool {
	ctx, cancel := context.WithTimeout(inc.ctx, r.opts.loadEvery)
	defer cancel()
	resp, err := execTxn(ctx, r.cli, core.LoadTxn(r.keys, r.opts.member, &inc.Inc, rep))
	if err != nil {
		if inc.ctx.Err() == nil {
			r.log.Info("writing the load summary failed; retrying at the next interval", zap.Error(err))
		}
		return false
	}
	return resp.Succeeded
}
