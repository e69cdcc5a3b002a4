package rink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Observer follows a rink without joining it: it reads the proclaimed map,
// the member keys and the election, and never writes. Routers use it to send
// a request for a role to the member that owns it; tools use it to show a
// rink's state. Create one with NewObserver and stop it with Close.
type Observer struct {
	cli  *clientv3.Client
	name string
	keys keys
	log  *zap.Logger

	state  atomic.Pointer[observed]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// State is a rink's state as an Observer last saw it.
type State struct {
	// Rink is the rink's name.
	Rink string
	// Version is the map's version (0 before any map); Lineage names the
	// map key's life (its create revision), within which versions count.
	Version, Lineage int64
	// Slots is the rink's slot count (0 before any map).
	Slots int
	// Replicas is how many members hold each slot, its primary included
	// (see WithReplicas): 1 in a rink of one replica per slot, 0 before
	// any map. With more than one, Owners names a role's secondaries
	// after its primary, and MemberState.Secondaries counts them.
	Replicas int
	// Protocol is the protocol (map schema) the rink's map is in (0 before
	// any map); the leader proclaims in the highest protocol that every
	// live member speaks.
	Protocol int
	// Leader is the rink's leader: the member currently elected to
	// coordinate the rink (it proclaims the maps), as in Rank.Leader. It is
	// unrelated to any role, a role named "leader" included: Owner tells
	// who holds a role.
	Leader string
	// Members lists the ranked members by index.
	Members []MemberState
	// Waiting lists the members waiting to be ranked, oldest first.
	Waiting []WaitingState
	// Joining lists live members the map does not mention yet.
	Joining []string
	// Revision is the etcd revision this state reflects.
	Revision int64
	// MapError, when not empty, says why the map now in etcd cannot be
	// used (members refuse it too, and hold no roles meanwhile); the state
	// shows the last usable map, and Owner answers nothing.
	MapError string
	// ByLoad reports that the leader balances the rink by load (see
	// WithImbalanceTolerance), not by slot count.
	ByLoad bool
	// Settled reports that the rink is at rest: its leader plans no move
	// after the map — nobody waits to be ranked or is joining, no move is
	// announced, no round of balancing by load would move a slot — and
	// every live member has acknowledged the map (see Rank.Settled, which
	// also counts the member's own holdings). Leaders of releases before
	// it never say so.
	Settled bool
	// Announced counts the slots whose move the map announces (see
	// WithWarmup): each moves once its heir has warmed up.
	Announced int
	// LoadRound reports that the leader's next round of balancing by load
	// would move slots.
	LoadRound bool
	// Imbalance is the leader's estimate of the most loaded member's load
	// per capacity over the mean (1 is perfect balance), and Tolerance the
	// WithImbalanceTolerance it balances to, while it balances by load (0
	// otherwise, and under leaders of releases before them). A load round
	// moves slots only while Imbalance exceeds 1+Tolerance, or to finish
	// a round that ran out of budget.
	Imbalance, Tolerance float64
	// Closed reports that the Observer was closed: it follows the rink no
	// more, so the state it returns from then on names nothing but Rink,
	// and its Owner and Owners answer false (see Observer.Close).
	Closed bool

	table   wire.SlotTable  // the map's table: a row of Slots entries per replica
	names   wire.MemberList // the map's members by index, as table names them
	changed chan struct{}
}

// MemberState describes one ranked member.
type MemberState struct {
	Name  string
	Index int
	// Slots is how many slots the member owns: those whose primary it is,
	// the only ones in a rink of one replica per slot. Secondaries counts
	// the others.
	Slots int
	// Secondaries is how many slots the member holds as a secondary (see
	// WithReplicas): it keeps their roles warm while another member is
	// their primary. It is 0 in a rink of one replica per slot.
	Secondaries int
	// Zone is the member's failure domain (see WithZone), as its member
	// key says ("" when it names none, or the member is gone). The leader
	// places a slot's replicas in distinct zones whenever it can.
	Zone string
	// Ack is the newest map version it has acknowledged (in this lineage;
	// -1 if it acknowledged another lineage's map or none), or, when it is
	// higher, the version the leader's floor counts it at: a member writes
	// no acknowledgement for a map that leaves its slots alone, and the
	// leader counts it as having acknowledged that map.
	Ack int64
	// Live reports whether its member key exists: a member that is gone but
	// still ranked is about to be replaced by the rink's leader (see
	// State.Leader).
	Live bool
	// Protocols lists the protocols the member speaks, as its member key
	// says (nil when it is gone).
	Protocols []int
	// Capacity is the member's capacity (see WithCapacity), as its member
	// key says (0 when it is gone). The leader gives it a share of the
	// slots in proportion.
	Capacity float64
	// Load is the member's load rate, units per second over the slots the
	// map gives it (see AddLoad; 0 while it is gone): each slot's rate as
	// the member last reported it, or, for a slot it gained since its
	// last summary, as the member that held it before reported it, as the
	// leader estimates it. It follows the map at once, where each
	// member's summary lags a move by up to a load interval.
	Load float64
	// Roles is how many distinct roles are awaited in the slots the map
	// gives the member, counted as Load is.
	Roles int
}

// WaitingState describes a member waiting to be ranked.
type WaitingState struct {
	Name string
	// Since is when the rink's leader that proclaimed the map first saw it
	// waiting (by that member's wall clock).
	Since time.Time
	// Protocols lists the protocols the member speaks (nil when it is
	// gone).
	Protocols []int
	// Capacity is the member's capacity (0 when it is gone).
	Capacity float64
	// Zone is the member's failure domain (see WithZone; "" when it
	// names none, or is gone).
	Zone string
}

// Changed returns a channel that is closed once a newer State is available
// (or the Observer is closed: its State then says Closed).
func (s State) Changed() <-chan struct{} { return s.changed }

// Owner returns the member that owns role in this state: the primary of
// its slot when the rink has more than one replica per slot (see Owners).
func (s State) Owner(role string) (string, bool) {
	if len(s.table) == 0 || role == "" || s.MapError != "" {
		return "", false
	}
	return s.Members[s.table[wire.SlotOf(role, s.Slots)]].Name, true
}

// Owners returns the members that hold role in this state, as Rink.Owners
// does: its primary first (Owner's answer), then its secondaries, the one
// that has held it longest first (see WithReplicas). With one replica per
// slot it is Owner's answer alone. ok is false when Owner's is.
func (s State) Owners(role string) (members []string, ok bool) {
	if len(s.table) == 0 || role == "" || s.MapError != "" {
		return nil, false
	}
	m := s.rankMap()
	return m.ReplicaNames(wire.SlotOf(role, s.Slots)), true
}

// rankMap returns the part of the state's map that says who holds which
// slot, so that the state answers as members do from their maps.
func (s State) rankMap() wire.Map {
	return wire.Map{Slots: s.Slots, Replicas: s.Replicas, Members: s.names, Table: s.table}
}

type observed struct{ s State }

// NewObserver starts following the rink called name and returns once it
// has read the rink's current state. A rink with no keys yet is not an
// error: its State has Version 0. It fails as New does when etcd cannot be
// reached (ErrUnreachable) or denies the client; an Observer needs read
// permission on the rink's keys.
//
// An Observer takes two options: WithLogger, and WithJoinTimeout, which
// bounds the first read (default DefaultJoinTimeout). Any other option
// (WithMemberName, WithSessionTTL, WithRebalanceDelay, WithSlots,
// WithEvents) configures a member, not an Observer: NewObserver refuses it
// with an error wrapping ErrInvalidOption that names it, rather than
// ignore it. An Observer reads maps of any slot count and any number of
// replicas per slot. It is NewObserverContext with context.Background().
func NewObserver(cli *clientv3.Client, name string, opts ...Option) (*Observer, error) {
	return NewObserverContext(context.Background(), cli, name, opts...)
}

// NewObserverContext is NewObserver, abandoned when ctx ends before the
// rink's state is read: the error then wraps ctx's (context.Canceled, or
// context.DeadlineExceeded), with what the probes of etcd's endpoints saw
// meanwhile. ctx bounds only that first read; the Observer follows the
// rink until Close.
func NewObserverContext(ctx context.Context, cli *clientv3.Client, name string, opts ...Option) (*Observer, error) {
	o, err := checkArgs(cli, name, opts)
	if err = errors.Join(err, o.refuse("an Observer", "WithLogger", "WithJoinTimeout")); err != nil {
		return nil, err
	}
	ob := &Observer{cli: cli, name: name, keys: newKeys(name), log: o.log.With(zap.String("rink", name), zap.String("observer", "true"))}
	// A first read, which says why etcd cannot be reached or read (the
	// watch below retries whatever fails, quietly).
	if ctx == nil {
		return nil, fmt.Errorf("%w: a nil context", ErrInvalidOption)
	}
	ctx, cancel := context.WithTimeout(ctx, o.joinTimeout)
	defer cancel()
	err = contact(ctx, cli, fmt.Sprintf("read on the keys under %q", ob.keys.Prefix), func(ctx context.Context) error {
		_, err := cli.Get(ctx, ob.keys.Map())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rink: reading rink %q: %w", name, err)
	}
	ob.ctx, ob.cancel = context.WithCancel(context.Background())
	ob.state.Store(&observed{State{Rink: name, changed: make(chan struct{})}})

	batches := make(chan watchBatch)
	ready := make(chan struct{})
	ob.wg.Add(2)
	go func() {
		defer ob.wg.Done()
		// All of the rink's keys, the ack keys included: an observer shows
		// every member's acknowledgement.
		follow(ob.ctx, cli, ob.keys.Prefix, clientv3.GetPrefixRangeEnd(ob.keys.Prefix), ob.log, func(b watchBatch) bool {
			select {
			case batches <- b:
				return true
			case <-ob.ctx.Done():
				return false
			}
		})
	}()
	go func() {
		defer ob.wg.Done()
		ob.run(batches, ready)
	}()
	select {
	case <-ready:
		return ob, nil
	case <-ctx.Done():
		ob.Close()
		return nil, fmt.Errorf("rink: reading rink %q: %w", name, ctx.Err())
	}
}

// run owns the observer's view (see observerView) and publishes a State
// after each batch.
func (ob *Observer) run(batches <-chan watchBatch, ready chan struct{}) {
	v := newObserverView(ob.name, ob.keys, ob.log)
	first := true
	for {
		var b watchBatch
		select {
		case b = <-batches:
		case <-ob.ctx.Done():
			return
		}
		s := v.batch(b)
		old := ob.state.Swap(&observed{s})
		close(old.s.changed)
		if first {
			first = false
			close(ready)
		}
	}
}

// memberLoad is a member's load key as an observer read it.
type memberLoad struct {
	lease  int64
	report wire.LoadReport
}

// slotFigure is a slot's load rate and the roles awaited in it, as a
// member's summary reported them; own says the member was the slot's
// owner in the map at hand.
type slotFigure struct {
	rate  float64
	roles int
	own   bool
}

// slotFigures returns each slot's figures from the live members'
// summaries: its owner's, or, for a slot its owner has not reported yet
// (it gained it since its last summary), the figure of a member that
// reported it, its previous owner, as the leader estimates the load of
// slots that moved. A member's figures then follow the map at once,
// where its own summary lags a move by up to a load interval.
func slotFigures(cur *wire.Map, members map[string]memberInfo, loads map[string]memberLoad) []slotFigure {
	if len(loads) == 0 || cur.Slots <= 0 || len(cur.Table) < cur.Slots {
		return nil
	}
	figs := make([]slotFigure, cur.Slots)
	index := make(map[string]int, len(cur.Members))
	for i, name := range cur.Members {
		index[name] = i
	}
	for _, name := range slices.Sorted(maps.Keys(loads)) {
		l := loads[name]
		if m, live := members[name]; !live || l.lease != m.lease {
			continue
		}
		i, ranked := index[name]
		owns := func(s int) bool { return ranked && int(cur.Table[s]) == i }
		for _, sl := range l.report.Slots {
			if sl.Slot < 0 || sl.Slot >= cur.Slots {
				continue
			}
			if own := owns(sl.Slot); own || !figs[sl.Slot].own {
				figs[sl.Slot] = slotFigure{rate: sl.Rate, roles: sl.Roles, own: own}
			}
		}
		for _, a := range l.report.Await {
			// (roles it awaits in a slot it owns and did not hold: the
			// rate is the previous owner's, if any reported it)
			if a.Slot >= 0 && a.Slot < cur.Slots && owns(a.Slot) && !figs[a.Slot].own {
				figs[a.Slot] = slotFigure{rate: figs[a.Slot].rate, roles: a.Roles, own: true}
			}
		}
	}
	return figs
}

// memberFigures sums, per index of cur's members, the figures of the
// slots the map gives it (see slotFigures), in one pass over the slots;
// nil when no member reported any.
func memberFigures(cur *wire.Map, members map[string]memberInfo, loads map[string]memberLoad) (load []float64, roles []int) {
	figs := slotFigures(cur, members, loads)
	if figs == nil {
		return nil, nil
	}
	load, roles = make([]float64, len(cur.Members)), make([]int, len(cur.Members))
	for sl, f := range figs {
		if i := int(cur.Table[sl]); i >= 0 && i < len(load) {
			load[i] += f.rate
			roles[i] += f.roles
		}
	}
	return load, roles
}

// slotCounts counts, per index of m's members, the slots each owns (as
// primary) and those it holds as a secondary. A secondary's entry that
// repeats the slot's primary or an earlier secondary names no secondary
// (see rankMap.Replicas), and so counts for nobody: counting every entry
// of the table, as before replicas, would count such entries, and every
// secondary, as slots owned.
func slotCounts(m *wire.Map) (primaries, secondaries []int) {
	primaries, secondaries = make([]int, len(m.Members)), make([]int, len(m.Members))
	S, k := m.Slots, m.ReplicaCount()
	if len(m.Members) == 0 || len(m.Table) < S*k {
		return primaries, secondaries
	}
	for s := range S {
		primaries[m.Table[s]]++
		for r := 1; r < k; r++ {
			e, fresh := m.Table[r*S+s], true
			for q := range r {
				fresh = fresh && m.Table[q*S+s] != e
			}
			if fresh {
				secondaries[e]++
			}
		}
	}
	return primaries, secondaries
}

// settleState adds to a state what the leader says of the
// moves it plans (see ackFloor.Rest).
func settleState(s *State, cur wire.Map, lineage, seq int64, f *wire.AckFloor) {
	for _, slots := range cur.Incoming {
		for _, x := range slots {
			if x >= 0 && x < cur.Slots && len(cur.Table) > 0 { // (a primary's move: see plannedMoves)
				s.Announced++
			}
		}
	}
	if f.Lineage == lineage && f.Version == cur.Version {
		s.LoadRound, s.Imbalance, s.Tolerance = f.Round, f.Imbalance, f.Tolerance
	}
	live := true
	for _, m := range s.Members {
		live = live && m.Live
	}
	s.Settled = s.MapError == "" && live && len(s.Waiting) == 0 && len(s.Joining) == 0 && s.Announced == 0 &&
		len(cur.Leave) == 0 && f.Settled(lineage, cur.Version, seq)
}

// State returns the rink's state as last seen. Once the observer is
// closed it returns a State that says so: Closed is true, Rink is set,
// every other field is zero, its Owner and Owners answer false, and its
// Changed channel is nil (nothing newer will come). A State taken before
// Close stays what it was: a snapshot, whose Owner still answers.
func (ob *Observer) State() State {
	if ob.ctx.Err() != nil {
		return State{Rink: ob.name, Closed: true}
	}
	return ob.state.Load().s
}

// Owner returns the member that owns role in the newest map seen: the
// primary of its slot when the rink has more than one replica per slot.
// Once the observer is closed, ok is false.
func (ob *Observer) Owner(role string) (string, bool) { return ob.State().Owner(role) }

// Owners returns the members that hold role in the newest map seen, its
// primary first, then its secondaries, the one that has held it longest
// first: State.Owners of the current State. A router that cannot reach a
// role's primary can tell which members keep its roles warm. Once the
// observer is closed, ok is false.
func (ob *Observer) Owners(role string) (members []string, ok bool) {
	return ob.State().Owners(role)
}

// Done is closed when the observer is closed; so is the Changed channel
// of the last State it published, whose newer State says Closed.
func (ob *Observer) Done() <-chan struct{} { return ob.ctx.Done() }

// Close stops following the rink and waits for the observer's goroutines.
// From then on Owner and Owners answer false and State returns a State
// whose Closed is true (see State); a loop waiting on the Changed channel
// of an earlier State wakes, and finds it.
func (ob *Observer) Close() error {
	ob.cancel()
	ob.wg.Wait()
	if old := ob.state.Swap(&observed{State{Rink: ob.name, Closed: true}}); old != nil && old.s.changed != nil {
		close(old.s.changed)
	}
	return nil
}

// Change is one difference between two States of a rink.
type Change struct {
	// Kind is one of: "leader" (Member is the rink's new leader, the member
	// that coordinates the rink, as in State.Leader; not a role), "joined",
	// "promoted" (took a departed member's Index and slots), "ranked" (added
	// at Index by a rebalance), "moved" (from From to Index), "unranked"
	// (ranked before, waiting now: it rejoined), "left", "left-waiting",
	// "lineage" (the map key was re-created: Lineage), "slots" (the
	// primaries of Slots slots moved). With more than one replica per slot
	// (see WithReplicas), also "slots-promoted" (Slots of the slots that
	// moved went to a member that held them as a secondary: their roles
	// stayed warm) and "secondaries" (Slots secondaries moved: a member
	// became a slot's secondary).
	Kind    string `json:"kind"`
	Member  string `json:"member,omitempty"`
	Index   int    `json:"index"`
	From    int    `json:"from"`
	Slots   int    `json:"slots,omitempty"`
	Lineage int64  `json:"lineage,omitempty"`
}

// String describes the change in words.
func (c Change) String() string {
	switch c.Kind {
	case "leader":
		return "leader " + c.Member
	case "joined":
		return c.Member + " joined"
	case "promoted":
		return fmt.Sprintf("%s promoted to index %d", c.Member, c.Index)
	case "ranked":
		return fmt.Sprintf("%s ranked at index %d", c.Member, c.Index)
	case "moved":
		return fmt.Sprintf("%s moved from index %d to %d", c.Member, c.From, c.Index)
	case "unranked":
		return fmt.Sprintf("%s unranked (rejoined, waiting)", c.Member)
	case "left":
		return c.Member + " left"
	case "left-waiting":
		return c.Member + " left while waiting"
	case "lineage":
		return fmt.Sprintf("map re-created (lineage %d)", c.Lineage)
	case "slots":
		return fmt.Sprintf("%d slots moved", c.Slots)
	case "slots-promoted":
		return fmt.Sprintf("%d slots promoted from secondaries", c.Slots)
	case "secondaries":
		return fmt.Sprintf("%d secondaries moved", c.Slots)
	}
	return c.Kind
}

// Diff lists what changed from one State to the next: members that joined,
// were ranked (promoted into a departed member's index, or added by a
// rebalance), moved index, fell back to waiting, or left; a new leader of
// the rink (State.Leader, the member that coordinates it); a re-created
// map; how many slots moved (their primaries), and, with more than one
// replica per slot, how many of them went to a secondary and how many
// secondaries moved.
func Diff(prev, next State) []Change {
	var out []Change
	ranked := func(s State) map[string]MemberState {
		m := map[string]MemberState{}
		for _, x := range s.Members {
			m[x.Name] = x
		}
		return m
	}
	unranked := func(s State) []string {
		names := append([]string{}, s.Joining...)
		for _, w := range s.Waiting {
			names = append(names, w.Name)
		}
		return names
	}
	set := func(names []string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	pr, nr := ranked(prev), ranked(next)
	pu, nu := set(unranked(prev)), set(unranked(next))
	if prev.Leader != next.Leader && next.Leader != "" {
		out = append(out, Change{Kind: "leader", Member: next.Leader})
	}
	if prev.Lineage != 0 && next.Lineage != prev.Lineage {
		out = append(out, Change{Kind: "lineage", Lineage: next.Lineage})
	}
	seen := map[string]bool{}
	for _, n := range unranked(next) {
		if seen[n] {
			continue
		}
		seen[n] = true
		if _, wasRanked := pr[n]; wasRanked {
			out = append(out, Change{Kind: "unranked", Member: n})
		} else if !pu[n] {
			out = append(out, Change{Kind: "joined", Member: n})
		}
	}
	leftAt := map[int]bool{}
	for _, m := range prev.Members {
		if _, still := nr[m.Name]; !still {
			leftAt[m.Index] = true
		}
	}
	for _, m := range next.Members {
		p, was := pr[m.Name]
		switch {
		case !was && leftAt[m.Index]:
			out = append(out, Change{Kind: "promoted", Member: m.Name, Index: m.Index})
		case !was:
			out = append(out, Change{Kind: "ranked", Member: m.Name, Index: m.Index})
		case p.Index != m.Index:
			out = append(out, Change{Kind: "moved", Member: m.Name, Index: m.Index, From: p.Index})
		}
	}
	for _, m := range prev.Members {
		if _, still := nr[m.Name]; !still && !nu[m.Name] {
			out = append(out, Change{Kind: "left", Member: m.Name})
		}
	}
	gone := map[string]bool{}
	for _, n := range unranked(prev) {
		if _, r := nr[n]; !r && !nu[n] && !gone[n] {
			out = append(out, Change{Kind: "left-waiting", Member: n})
			gone[n] = true
		}
	}
	moved, warm, secondaries := slotsMoved(prev, next)
	if moved > 0 {
		out = append(out, Change{Kind: "slots", Slots: moved})
	}
	if warm > 0 {
		out = append(out, Change{Kind: "slots-promoted", Slots: warm})
	}
	if secondaries > 0 {
		out = append(out, Change{Kind: "secondaries", Slots: secondaries})
	}
	return out
}

// slotsMoved compares two states of the same rink slot by slot: it counts
// the slots whose owner (primary) differs, those of them whose new owner
// a named as a secondary, and the secondaries b names that a did not (a
// member that became a slot's secondary). Only the primaries' rows count
// as slots: each entry of a secondary's row would otherwise count as a
// slot of its own.
func slotsMoved(a, b State) (moved, warm, secondaries int) {
	S := a.Slots
	if len(a.table) == 0 || b.Slots != S || len(a.table) < S || len(b.table) < S {
		return 0, 0, 0
	}
	am, bm := a.rankMap(), b.rankMap()
	replicated := a.Replicas > 1 || b.Replicas > 1
	for s := range S {
		was, is := a.Members[a.table[s]].Name, b.Members[b.table[s]].Name
		if was != is {
			moved++
		}
		if !replicated {
			continue
		}
		before, after := am.ReplicaNames(s), bm.ReplicaNames(s)
		if len(before) == 0 || len(after) == 0 {
			continue
		}
		if was != is && slices.Contains(before[1:], is) {
			warm++
		}
		for _, name := range after[1:] {
			if !slices.Contains(before[1:], name) {
				secondaries++
			}
		}
	}
	return moved, warm, secondaries
}
