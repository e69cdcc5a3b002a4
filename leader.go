package rink

import (
	"context"
	"maps"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/wire"
	"go.uber.org/zap"
)

// leadState is this member's leadership, if it leads.
type leadState struct {
	lead  *leadership // non-nil while this member leads
	dirty bool        // membership or map changed: the leader should plan
}

// leadership is the run goroutine's state while this member leads.
type leadership struct {
	inc *incarnation
	// quietUntil: the maps this leader proclaims say Quiet until then,
	// one TTL after it began a lineage that replaced another.
	quietUntil time.Time
	key        string // our election key
	rev        int64  // its create revision: proclamations are guarded by it
	// proclaimed is the highest version this leadership proclaimed: the
	// next map is numbered above it even when this member never applied
	// it (see nextVersion).
	proclaimed int64

	since   map[string]time.Time // when each waiting member was first seen (monotonic)
	busy    bool                 // a proclamation is in flight
	waitRev int64                // plan only once the view has reached this revision
	// (timerPlan: the next rebalance or retry)
	retry *backoff
	// crashAt is when this leader last planned without a ranked member
	// that crashed (its key went without a hand-over): with more than one
	// replica per slot, it holds the replicas where the promotions put them
	// for a TTL after (see planInput.Hold).
	crashAt time.Time
	stopAgg context.CancelFunc // stops the acknowledgement aggregator
	refused string             // why the last planned map was not proclaimed (logged once)
	// strangers: the members that speak none of our protocols (logged once)
	strangers string

	// Balancing by load (WithImbalanceTolerance; see loadplan.go).
	reports  map[string]wire.LoadReport // members' load summaries, from the aggregator
	est      []float64                  // each slot's estimated load
	estOK    []bool                     // est holds a reported figure
	estYoung []int                      // est's figure is a new owner's first, not yet mature, since this tick (+1; 0: mature)
	ticks    int                        // load rounds due so far, run or not
	estRate  bool                       // est is of rates (else of awaited roles)
	round    int                        // load rounds so far
	movedAt  map[int]int                // slot -> the round that last moved it
	roundDue bool                       // a load round may run (timerLoad: the next is due)
	more     bool                       // the last round spent its budget: go on with the next
	// modeLogged: a map balanced the other way was logged once
	modeLogged bool

	// Warm-up (WithWarmup; see warmup.go): the pending announcement, its
	// deadline (timerWarm), each member's newest announcement it is ready
	// for (from the aggregator), and a load round's moves kept until made.
	warm       *warmState
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
	// ghostSet is the ghosts the leader knows, by lease (stored before
	// ghosts; never written into): see aggregation.coverGhosts.
	ghostSet atomic.Pointer[map[int64]string]
	// seen is the revision through which the run goroutine has folded the
	// rink's keys in the wide view, and so made ghosts of the member keys
	// that went (stored after ghosts, read before it); waitRev is the
	// newest deletion the aggregator counts as a ghost until seen reaches
	// it (0: none): the run goroutine kicks the aggregator when seen
	// passes it (see aggregation.pendingGhosts).
	seen, waitRev atomic.Int64
	kick          chan struct{}
}

// publishGhosts tells this leadership's aggregator how many ghosts the
// leader knows, and up to which revision it looked for them, when that
// changed.
func (r *Rink) publishGhosts() {
	st := &r.st
	if st.lead == nil || st.lead.rest == nil {
		return
	}
	box, kick := st.lead.rest, false
	if p := box.ghostSet.Load(); p == nil && len(st.ghosts) > 0 || p != nil && !maps.Equal(*p, st.ghosts) {
		set := maps.Clone(st.ghosts)
		box.ghostSet.Store(&set)
		kick = true
	}
	if n := int64(len(st.ghosts)); box.ghosts.Load() != n {
		box.ghosts.Store(n)
		kick = true
	}
	if st.view.wide && box.seen.Load() != st.rev {
		first := box.seen.Load() == 0 // (the aggregator writes no floor before: see fold)
		box.seen.Store(st.rev)        // (after ghosts: see restBox)
		w := box.waitRev.Load()
		kick = kick || first || w != 0 && st.rev >= w
	}
	if !kick {
		return
	}
	select {
	case box.kick <- struct{}{}:
	default:
	}
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
	r.fx().campaign(inc)
}

func (r *Rink) onElected(e core.Elected) {
	st := &r.st
	if st.inc == nil || e.Inc != &st.inc.Inc || st.stopping {
		return
	}
	r.log.Info("elected leader", zap.Int64("version", st.cur.Version))
	st.lead = &leadership{inc: st.inc, key: e.Key, rev: e.Rev, since: map[string]time.Time{}, retry: r.newBackoff(), movedAt: map[int]int{},
		rest: &restBox{kick: make(chan struct{}, 1)}}
	if r.opts.byLoad {
		st.SetTimer(core.TimerLoad, r.now().Add(r.opts.loadEvery))
	}
	st.dirty = true
	st.lead.stopAgg = r.fx().aggregate(e, st.lead.rest)
}

func (r *Rink) stopLeading() {
	st := &r.st
	if st.lead == nil {
		return
	}
	st.StopTimer(core.TimerPlan)
	st.StopTimer(core.TimerLoad)
	st.StopTimer(core.TimerWarm)
	st.lead.stopAgg()
	st.lead = nil
}
