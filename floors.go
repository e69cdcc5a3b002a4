package rink

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/rink-go/rink/internal/core"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// aggregate runs while this member leads (until ctx ends): it follows all
// of the rink's keys, and after every change writes the floor anew if it
// changed. Writes are guarded by our election key, so a deposed leader
// writes nothing.
func (r *Rink) aggregate(ctx context.Context, electKey string, electRev int64, rest *restBox) {
	reqs := make(chan []byte, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.writeFloors(ctx, electKey, electRev, reqs)
	}()
	defer wg.Wait()
	a := &aggregation{v: &core.AckView{Members: map[string]core.AckMember{}, Acks: map[string]core.AckKey{}, Ranked: map[string]bool{}}, loads: map[string]wire.LoadReport{}, reqs: reqs, rest: rest}
	// (Buffered: the follower reads ahead while a floor is computed, and
	// the loop below folds what piled up with one computation.)
	batches := make(chan watchBatch, maxMerged)
	wg.Add(1)
	go func() {
		defer wg.Done()
		follow(ctx, r.cli, r.keys.Prefix, clientv3.GetPrefixRangeEnd(r.keys.Prefix), r.log, func(b watchBatch) bool {
			select {
			case batches <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	defer a.unhold()
	hold := time.NewTimer(time.Hour) // ends a hold (see offer)
	defer hold.Stop()
	for {
		var b watchBatch
		var held <-chan time.Time
		if !a.holdUntil.IsZero() {
			hold.Reset(a.holdUntil.Sub(r.now()))
			held = hold.C
		}
		select {
		case b = <-batches:
			// Every batch that came meanwhile, folded with one computation
			// of the floor: at 10,000 members a computation costs
			// milliseconds, and acknowledgements come faster than that.
		merge:
			for n := 1; n < maxMerged; n++ {
				select {
				case next := <-batches:
					b = b.then(next)
				default:
					break merge
				}
			}
		case <-rest.kick:
			// What the leader plans changed: the floor says it (see fold).
		case <-held:
			a.holdUntil = time.Time{}
			a.holds = min(a.holds+1, maxHolds)
			a.send(a.held)
			continue
		case <-ctx.Done():
			return
		}
		r.fold(a, b)
	}
}

// maxMerged bounds the watch batches the aggregator folds at once.
const maxMerged = 64

// then returns batch b followed by next, of the same watch, as one batch:
// folding it is folding b and then next.
func (b watchBatch) then(next watchBatch) watchBatch {
	if next.snapshot {
		return next
	}
	b.events = append(slices.Clip(b.events), next.events...) // (b's slice is the watch's)
	b.rev = next.rev
	return b
}

// floorPause is how long the leader holds back a floor that raises no
// bound that anybody waits for: one that says only that the map moved on
// while the members it changed have not acknowledged it yet, or only what
// the leader plans (Rest, when a newcomer comes). Such a floor helps
// nobody: an heir of a live member waits for that member's
// acknowledgement, which a floor after it brings, and finds in the map
// before the change that the members it did not change did not hold what
// it gains. Written at once, it would be one more write, sent to every
// member, per change; held, it is replaced by the floor that counts the
// acknowledgements, usually within a few milliseconds, and written anyway
// after the pause (a member that drains withholds its acknowledgement for
// longer), and after twice as long the next time, while nothing comes
// that anybody waits for (see aggregation.holds).
const floorPause = 50 * time.Millisecond

// heldFloor is a floor held back (see floorPause).
type heldFloor struct {
	val []byte
	f   *wire.AckFloor
}

// send asks for floor h to be written at once, replacing any floor held
// back or not yet written.
func (a *aggregation) send(h heldFloor) {
	a.unhold()
	a.last, a.lastF = h.val, h.f
	a.asked[a.nasked%len(a.asked)] = h.val
	a.nasked++
	select {
	case <-a.reqs:
	default:
	}
	a.reqs <- h.val
}

// unhold drops the floor held back, if any.
func (a *aggregation) unhold() {
	a.holdUntil = time.Time{}
	a.held = heldFloor{}
}

// offer asks for floor f (val, its JSON) to be written: at once, or after
// a pause from now when it raises no bound anybody waits for (see
// floorPause).
func (a *aggregation) offer(f *wire.AckFloor, val []byte, now time.Time) {
	h := heldFloor{val: val, f: f}
	if a.last == nil || !a.idle(f) {
		a.holds = 0
		a.send(h)
		return
	}
	a.held = h
	pause := a.pause(f)
	if until := now.Add(pause); a.holdUntil.IsZero() || until.Before(a.holdUntil) {
		a.holdUntil = until
	}
}

// maxHolds bounds how often in a row the hold doubles (see offer): idle
// floors wait at most floorPause << maxHolds (0.8 s).
const maxHolds = 4

// idle reports whether floor f, to follow the floor last asked for (l),
// raises no bound that anybody waits for.
//
// An heir of slot s waits for the bound of a live member x only while the
// maps from x's bound up to the one that gave s to the heir gave x the
// slot (see free and freeNarrow). If no map after x's bound in l up to its
// bound in f took a slot from x, raising it frees nothing: a slot that x
// held in a map from its bound in l on, x still holds in its bound in f
// (or in a later map, which the heir checks as before). So f is idle when
// it speaks of the same lineage, of the same map or a later one, with the
// same ghosts, and no live member's bound rises past a map that took a
// slot from it: a newcomer's acknowledgement, or an heir's, raises nothing
// anybody waits for; the member a change takes slots from raises what its
// heirs wait for. A member whose key went and whose acknowledgement key
// went with its lease holds nothing (see holderBound). And a member whose
// history begins after a bound waits for it regardless (raisesPastStart). Members that
// predate seqs read bounds in versions: a member that writes no seq is
// judged by the rise of its version bound.
func (a *aggregation) idle(f *wire.AckFloor) bool {
	l := a.lastF
	if l == nil || f.Lineage != l.Lineage || f.Seq < l.Seq || f.Version < l.Version || f.Ghosts != l.Ghosts || !slices.Equal(f.Covered, l.Covered) || l.Seq < 1 {
		return false
	}
	if f.Seq > l.Seq && f.SeqComplete && len(f.SeqLagging) == 0 {
		return false // every member at a map l did not count (see raisesPastStart)
	}
	lo := l.SeqFloor // (the lowest bound l gives)
	if l.SeqComplete {
		lo = l.Seq
		for _, b := range l.SeqLagging {
			lo = min(lo, b)
		}
	}
	losses, known := a.v.Changes.LossesAfter(lo)
	if !known {
		// (Which maps took what is not known: idle only when no bound
		// changed at all, only what the leader plans.)
		return sameBounds(l, f)
	}
	for _, x := range losses {
		if x.Seq > f.Seq {
			break
		}
		if a.v.Present(x.Name) && l.SeqOf(x.Name) < x.Seq && f.SeqOf(x.Name) >= x.Seq {
			return false
		}
	}
	if a.raisesPastStart(l, f, lo) {
		return false
	}
	if !f.Complete || !l.Complete {
		return f.Floor <= l.Floor
	}
	for name, b := range l.Lagging {
		if fb, ok := f.Lagging[name]; (!ok || fb > b) && a.v.Acks[name].Seq < 1 {
			return false
		}
	}
	return true
}

// sameBounds reports whether two floors give every member the same bounds
// (they may differ in what the leader plans).
func sameBounds(l, f *wire.AckFloor) bool {
	return f.Lineage == l.Lineage && f.Seq == l.Seq && f.SeqFloor == l.SeqFloor && f.SeqComplete == l.SeqComplete && maps.Equal(f.SeqLagging, l.SeqLagging) &&
		f.Version == l.Version && f.Floor == l.Floor && f.Complete == l.Complete && maps.Equal(f.Lagging, l.Lagging)
}

// raisesPastStart reports whether floor f, to follow l (whose lowest bound
// is lo), raises some member's bound from below the seq at which another
// member's history may begin to at least that seq. A member knows the maps
// from its first on (its listing: at least the map current when its key
// was created), and cannot tell whether a member whose bound lies before
// them still holds a slot it gains: it waits for that bound to reach its
// first map, though no loss lies between (see free and freeNarrow). A
// member that joined while the map of seq h was current may know no map
// before h: a rise across h is written at once. (A member whose listing
// came maps later is cleared by the floor that says every member is at a
// newer map than the last: that one is written at once too.)
func (a *aggregation) raisesPastStart(l, f *wire.AckFloor, lo int64) bool {
	var starts []int64
	for _, m := range a.v.Members {
		if h := a.v.SeqAt(m.CreateRev); h > lo {
			starts = append(starts, h)
		}
	}
	if len(starts) == 0 {
		return false
	}
	slices.Sort(starts)
	crosses := func(name string) bool {
		bl, bf := l.SeqOf(name), f.SeqOf(name)
		i := sort.Search(len(starts), func(i int) bool { return starts[i] > bl })
		return i < len(starts) && starts[i] <= bf
	}
	for name := range a.v.Members {
		if crosses(name) {
			return true
		}
	}
	for name := range a.v.Acks {
		if crosses(name) {
			return true
		}
	}
	return false
}

// pause returns how long idle floor f may be held: floorPause, doubled
// for each hold in a row (see holds); the longest when it only says that
// the leader no longer rests; and the longest hold when every
// member f lists as lagging is one that a map after its bound changed, or
// one whose member key is gone. Such a floor says only that the map moved
// on while the members it changed have not acknowledged it: they owe their
// acknowledgements and know it (see ackOwed), and the floor that counts
// them replaces it.
func (a *aggregation) pause(f *wire.AckFloor) time.Duration {
	if l := a.lastF; l != nil && l.Rest != 0 && f.Rest == 0 && sameBounds(l, f) {
		// Only that the leader no longer rests: it is about to proclaim
		// a map (a newcomer, a leaver), whose floor replaces this one.
		return floorPause << maxHolds
	}
	owed := f.SeqComplete && f.Complete && len(f.SeqLagging) > 0
	for name, b := range f.SeqLagging {
		if !owed {
			break
		}
		_, member := a.v.Members[name]
		// (One with an ack key and no member key has departed, its lease
		// about to go, or is a ghost, which the floor counts apart: its
		// bound raises nothing anybody waits for.)
		owed = !member || a.v.Changes.ChangedAfter(name, b)
	}
	for name := range f.Lagging {
		if _, ok := f.SeqLagging[name]; !ok {
			owed = false
		}
	}
	if owed {
		return floorPause << maxHolds
	}
	return floorPause << a.holds
}

// aggregation is the aggregator's state (see aggregate).
type aggregation struct {
	v         *core.AckView
	last      []byte         // the floor we last asked to be written
	lastF     *wire.AckFloor // and what it says
	held      heldFloor      // a floor held back (see floorPause); val nil: none
	holdUntil time.Time      // when the hold ends (zero: none); the aggregator writes held then
	// holds counts the held floors written when their pause ran out, since
	// the last floor that raised a bound: each such hold lasts twice the
	// one before, so that acknowledgements that come in slowly (a drain, a
	// loaded machine) do not cost a floor write every floorPause.
	holds    int
	loads    map[string]wire.LoadReport // members' load summaries, when balancing by load
	lastWarm map[string]int64           // members' warm-up readiness, when warming up
	reqs     chan []byte                // to writeFloors
	rest     *restBox                   // what the leader plans
	// asked holds the floors last asked for (nasked counts them all): a
	// floor key that the view sees holding one of them is one of our
	// writes landing after a newer one was asked for, not somebody
	// else's.
	asked  [4][]byte
	nasked int
	// vanished holds the ranked members whose keys the view saw go, with
	// the revision of their deletion, until the run goroutine has folded
	// past it (see pendingGhosts).
	vanished map[string]int64
}

// pendingGhosts counts the members whose keys went while the view's map
// ranked them, and which the run goroutine has not looked at yet: it
// makes ghosts of the ones an operator deleted (see noteGhosts), but the
// aggregator, which follows the same keys with a watch of its own, may
// see the deletion first. Until the run goroutine has folded it, such a
// member counts as a ghost: a floor that left it out as gone freed its
// slots while it still held them (it acknowledged nothing, and its lease
// lives). It drops the deletions the run goroutine has folded, and any
// above rev, a listing's revision (etcd went back: see restore.go), and
// tells the run goroutine which revision to wake it at.
//
// A listing waits for its own revision, which writes the run goroutine
// does not follow (acknowledgements) may have raised: the run goroutine
// passes it at the next write it does follow, which comes, since a
// pending ghost changes the floor (written, it is such a write), or
// stands beside a ghost the leader knows, whose end makes it plan anew.
func (a *aggregation) pendingGhosts(rev int64) int {
	for {
		seen := a.rest.seen.Load()
		n, wait := 0, int64(0)
		for name, at := range a.vanished {
			if at <= seen || rev != 0 && at > rev {
				delete(a.vanished, name)
				continue
			}
			n, wait = n+1, max(wait, at)
		}
		a.rest.waitRev.Store(wait)
		if n == 0 || a.rest.seen.Load() < wait {
			return n // (the run goroutine kicks when seen reaches wait)
		}
	}
}

// vanish records that the key of member name went at revision rev while
// the view's map ranked it (see pendingGhosts). A graceful departure takes
// its member out of the map in the transaction that deletes its key,
// before the deletion: it records nothing.
func (a *aggregation) vanish(name string, rev int64) {
	if !a.v.Ranked[name] {
		return
	}
	if a.vanished == nil {
		a.vanished = map[string]int64{}
	}
	a.vanished[name] = max(a.vanished[name], rev)
}

// askedRecently reports whether val is one of the floors last asked for.
func (a *aggregation) askedRecently(val []byte) bool {
	for _, x := range a.asked {
		if x != nil && bytes.Equal(x, val) {
			return true
		}
	}
	return false
}

// fold folds one watch batch (or none, when woken by setRest) into the
// aggregator's view, hands the load summaries and warm-up readiness to the
// run goroutine, and asks for the floor to be written when it changed.
func (r *Rink) fold(a *aggregation, b watchBatch) {
	v, loads := a.v, a.loads
	loadsChanged := false
	if b.snapshot {
		clear(v.Members)
		clear(v.Acks)
		clear(loads)
		loadsChanged = true
		v.Lineage, v.Version, v.Floor = 0, 0, nil
		v.MapRev, v.Whole, v.Snap = 0, nil, nil
		v.Marks = v.Marks[:0]
		clear(v.Ranked)
		for _, kv := range b.kvs {
			v.Put(r.keys, kv, true)
			loadsChanged = r.noteLoad(loads, kv, false) || loadsChanged
		}
		// (A listing keeps the deletions still waited for: a name
		// deleted and joined again is not one this loop finds.)
		for name := range v.Ranked {
			if _, ok := v.Members[name]; !ok {
				a.vanish(name, b.rev)
			}
		}
	}
	for _, ev := range b.events {
		if ev.Type == clientv3.EventTypePut {
			if key := string(ev.Kv.Key); r.keys.IsMember(key) {
				if name, ok := r.keys.LiveMember(ev.Kv); !ok {
					if _, was := v.Members[name]; was {
						a.vanish(name, ev.Kv.ModRevision) // a live member's key put without a lease: it goes
					}
				}
			}
			v.Put(r.keys, ev.Kv, false)
		} else {
			if key := string(ev.Kv.Key); r.keys.IsMember(key) {
				a.vanish(r.keys.MemberName(key), ev.Kv.ModRevision)
			}
			v.Del(r.keys, string(ev.Kv.Key))
		}
		loadsChanged = r.noteLoad(loads, ev.Kv, ev.Type != clientv3.EventTypePut) || loadsChanged
	}
	if loadsChanged && r.opts.byLoad {
		// The newest summaries replace any the run goroutine has not
		// taken yet.
		reps := maps.Clone(loads)
		r.inbox.send(func(m *mail) { m.loads, m.loadsSet = reps, true })
	}
	if r.opts.warmup > 0 {
		warm := map[string]int64{}
		for name, a := range v.Acks {
			// (Only of this lineage: a warm-up names the announcement's
			// map version, which a new lineage, after a restore or the
			// map key's deletion, counts again from 1.)
			if a.Warm > 0 && a.Lineage == v.Lineage {
				warm[name] = a.Warm
			}
		}
		if !maps.Equal(warm, a.lastWarm) {
			a.lastWarm = warm
			r.inbox.send(func(m *mail) { m.warm, m.warmSet = warm, true })
		}
	}
	f := v.Compute()
	if f == nil || a.rest.seen.Load() == 0 {
		// (No floor before the run goroutine has folded the rink's keys
		// in the wide view once in this leadership: until then it knows
		// no ghost, and a floor counting none would free what a process
		// cut off under a name another process took may still hold, where
		// no map records leases. publishGhosts kicks us then.)
		return
	}
	pending := a.pendingGhosts(b.rev) // (first: it reads seen before ghosts)
	// A ranked member without a member key counts as a ghost too, until
	// a map drops it: the run goroutine makes a ghost of its recorded
	// lease (see noteRecorded), and drops it only once etcd says the
	// lease is gone; a floor that counted it out before then would free
	// what it may still hold to members that follow only the floor. (A
	// crash's key goes with its lease: the leader's next map drops it.)
	var ghosts map[int64]string
	if p := a.rest.ghostSet.Load(); p != nil {
		ghosts = *p
	}
	if r.opts.byLoad {
		f.Unreported = v.Unreported(loads)
	}
	uncovered, coveredNames := core.CoverGhosts(f, v, ghosts)
	f.Ghosts, f.Leader = uncovered+max(pending, v.Unkeyed(coveredNames)), r.opts.member
	if info := a.rest.info.Load(); info != nil && info.lineage == v.Lineage && info.seq == v.Seq {
		// (Said of this very map: one written by hand with the same
		// version is another seq.)
		if info.rest == f.Version {
			f.Rest = info.rest
		}
		f.Round, f.Imbalance, f.Tolerance = info.round, info.imbalance, info.tolerance
	}
	foreign := a.foreignFloor(r.keys, b.events) // (first: it notes our newest floor landing)
	if !bytes.Equal(v.Floor, a.last) && (b.snapshot || foreign) {
		// Somebody else changed the floor (deleted it, or an earlier
		// leader's write landed): write ours again.
		a.last = nil
	}
	val, _ := json.Marshal(f)
	if bytes.Equal(val, a.last) || bytes.Equal(val, v.Floor) {
		a.unhold() // (what is written, or asked for, already says it)
		return
	}
	a.offer(f, val, r.now())
}

// foreignFloor reports whether the floor writes in events end with one
// that is not ours. Ours are the floors we asked for (asked): one of them
// lands after we asked for a newer one, which is on its way (rewriting
// the newer one for it cost every member a floor event per leave at 3,000
// members). Once the newest we asked for has landed, none of ours can land
// after it (writeFloors writes one at a time, each guarded by the key's
// revision as it last knew it): any other value is somebody else's, an
// operator's putting back an older floor of ours included.
func (a *aggregation) foreignFloor(k keys, events []*clientv3.Event) bool {
	foreign := false
	for _, ev := range events {
		if !k.IsFloor(string(ev.Kv.Key)) {
			continue
		}
		put := ev.Type == clientv3.EventTypePut
		switch {
		case put && bytes.Equal(ev.Kv.Value, a.last):
			a.asked, foreign = [4][]byte{}, false
		case put && a.askedRecently(ev.Kv.Value):
			foreign = false
		default:
			foreign = true
		}
	}
	return foreign
}
