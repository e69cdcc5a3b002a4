package rink

import (
	"math"
	"slices"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/plan"
	"github.com/rink-go/rink/internal/wire"
	"go.uber.org/zap"
)

// estimate returns each slot's estimated load, from the members' load
// summaries. The figures are rates where any member records load, and
// awaited roles otherwise.
//
//   - A rate comes from the owner's summary once the owner has held the
//     slot for half a load window; until then (a slot that moved) the
//     previous figure stands. A slot with no figure yet takes its owner's
//     first one, and is young (estYoung) until a mature one comes: a new
//     owner's first figures run low (the holder adds load only once it
//     holds the roles, some time after it gained the slot, and the meter
//     divides by the time since the gain), so no load round runs on them
//     (see loadRound).
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
		l.est, l.estOK, l.estYoung, l.estRate = make([]float64, S), make([]bool, S), make([]int, S), rate
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
			if e.Slot >= S || st.cur.Owner(e.Slot) != name || l.estOK[e.Slot] && e.Age < mature {
				continue
			}
			l.est[e.Slot], l.estOK[e.Slot] = e.Rate, true
			switch {
			case e.Age >= mature:
				l.estYoung[e.Slot] = 0
			case l.estYoung[e.Slot] == 0:
				l.estYoung[e.Slot] = l.ticks + 1
			}
		}
	}
	for s, ok := range l.estOK {
		if !ok && l.estYoung[s] == 0 {
			l.estYoung[s] = l.ticks + 1 // no figure yet: as young as can be
		}
	}
	return slices.Clone(l.est)
}

// loadSeen reports whether the leader balances by load: when some slot
// carries load (a rate, or an awaited role). With none, it balances by
// count, as without WithImbalanceTolerance, so that a rink whose members
// use only ranks and slots keeps even slot counts. A map balanced by load
// stays so until every member owning slots has reported none over a load
// interval: a leader just elected keeps its predecessor's load moves while
// the summaries come in. (A summary written as its member joined, before
// it owned a slot, lists no role: taken for "none", it made a leader
// elected in a rink's first load interval rebalance by count, and move
// slots a rolling deploy had just handed over.)
func (r *Rink) loadSeen(est []float64) bool {
	for _, v := range est {
		if v > 0 {
			return true
		}
	}
	return r.st.cur.ByLoad && !r.allReported(r.st.cur, true)
}

// allReported reports whether every member owning slots in m has
// reported its load; with measured, its rates over a load interval.
func (r *Rink) allReported(m wire.Map, measured bool) bool {
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
func (r *Rink) loadRound(next *wire.Map, in plan.Input) {
	st := &r.st
	l := st.lead
	l.roundDue = false
	r.st.SetTimer(core.TimerLoad, r.now().Add(r.opts.loadEvery))
	if in.Load == nil {
		return
	}
	if !r.allReported(*next, l.estRate) {
		// Some member's load is unknown yet. (A summary a member joined
		// with names the roles it awaits, and no rates: enough for a rink
		// balanced by roles, which must not wait a load interval for a
		// measured one after every join. A rink whose members record load
		// may move slots by roles on such summaries as it starts, before
		// the first rates come: a cost of its start only.)
		return
	}
	l.ticks++
	if r.youngEstimate() {
		return // some slot's only figure is its new owner's first (see estimate)
	}
	frozen := make([]bool, next.Slots)
	for s, at := range l.movedAt {
		if l.round-at < loadFreeze {
			frozen[s] = true
		} else {
			delete(l.movedAt, s)
		}
	}
	before := plan.Imbalance(*next, in.Load, in.Capacity)
	budget := max(1, next.Slots*loadBudgetPercent/100)
	table, moved := plan.RebalanceLoad(*next, plan.LoadInput{Load: in.Load, Capacity: in.Capacity, Tolerance: r.opts.tolerance, Budget: budget, Frozen: frozen, Continue: l.more})
	l.round++
	l.more = len(moved) >= budget
	if r.simRound != nil {
		r.simRound(l.round, slices.Clone(moved))
	}
	if len(moved) == 0 {
		r.emit(Event{Kind: EventLoadBalanced, Slot: -1, Imbalance: before})
		return
	}
	*next = plan.WithPrimaries(*next, table, in)
	r.emit(Event{Kind: EventLoadBalanced, Slot: -1, Imbalance: plan.Imbalance(*next, in.Load, in.Capacity), Moved: len(moved)})
	for _, s := range moved {
		l.movedAt[s] = l.round
	}
	r.log.Info("balancing by load", zap.Int("slots", len(moved)), zap.Float64("imbalance", before),
		zap.Float64("expected", plan.Imbalance(*next, in.Load, in.Capacity)))
}

// youngEstimate reports whether some slot has only a young figure (see
// estimate) that may still mature: the owners' reporters write a summary
// again as a slot matures (core.LoadReporter), within half a load window
// of its gain. A figure young for longer than that (youngRounds; its owner
// does not hold the slot, or wrote no summary since) holds no round up.
func (r *Rink) youngEstimate() bool {
	l := r.st.lead
	if !l.estRate {
		return false
	}
	for _, since := range l.estYoung {
		if since > 0 && l.ticks-(since-1) <= r.youngRounds() {
			return true
		}
	}
	return false
}

// youngRounds is how many load rounds wait for a young figure to mature:
// as many as half a load window spans, and one more for the summary to
// come.
func (r *Rink) youngRounds() int {
	return int(math.Ceil(r.opts.loadWindow.Seconds()/2/r.opts.loadEvery.Seconds())) + 1
}

// A load round moves at most loadBudgetPercent of the slots, and a slot it
// moved stays put for loadFreeze rounds.
const (
	loadBudgetPercent = 5
	loadFreeze        = 3
)
