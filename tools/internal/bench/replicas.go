package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rink-go/rink"
)

// The replicas scenario's rink: 3 zones of 3 members, 2 replicas per slot
// (a primary and a secondary), the default 1,024 slots, 1,024 roles, and
// a session TTL of 2 s.
const (
	// ReplicasK is the replicas per slot of the replicas scenario.
	ReplicasK = 2
	// ReplicasTTL is the session TTL of the replicas scenario's members: a
	// crashed member's primaries are promoted about this long after the
	// crash.
	ReplicasTTL = 2 * time.Second
	// replicasPerZone is the members per zone.
	replicasPerZone = 3
)

// replicaZones are the zones of the replicas scenario.
var replicaZones = []string{"a", "b", "c"}

// replicaRink is the rink of one run of the replicas scenario: its
// members, live and gone, their zones, and a role per slot to read the
// map's replicas of every slot with Owners.
type replicaRink struct {
	env   Env
	name  string
	rec   *recorder
	opts  []rink.Option
	live  []*member         // members neither shut down nor crashed
	all   []*member         // every member started, to stop at the end
	zone  map[string]string // member name -> zone
	probe []string          // probe[s] is a role in slot s
	// roles are the scenario's 1,024 roles, one per slot (the probes), which
	// every member watches as a service would (Handler.Assigned for its
	// primaries, Handler.Secondary for its secondaries): awaited roles make
	// the leader balance by load, the default for a service that uses its
	// roles. One per slot, every slot carries the same load, and what the
	// scenario measures is placement and failover; roles hashed at random
	// over the slots leave some members a tenth above the mean once a
	// zone's primaries are promoted, and a load round then moves primaries
	// of other zones too (skew is the load scenarios' subject).
	roles []string
	sets  map[*member]*rink.RoleSet
}

// slotProbes returns a role name per slot of the default slot count: the
// first of probe-0, probe-1, ... that hashes to it.
func slotProbes() []string {
	out := make([]string, rink.DefaultSlots)
	left := len(out)
	for i := 0; left > 0; i++ {
		r := fmt.Sprint("probe-", i)
		if s := slotOf(r); out[s] == "" {
			out[s] = r
			left--
		}
	}
	return out
}

// join starts a member named name in zone, with the rink's options.
func (rr *replicaRink) join(name, zone string) (*member, error) {
	m, err := join(rr.env.Endpoints, rr.name, name, rr.rec, append(slices.Clone(rr.opts), rink.WithZone(zone))...)
	if err != nil {
		return nil, err
	}
	set, err := m.r.Watch(rink.Handler{
		Assigned:  func(context.Context, string) {},
		Secondary: func(ctx context.Context, _ string) { <-ctx.Done() },
	}, rr.roles...)
	if err != nil {
		m.stop()
		return nil, err
	}
	rr.sets[m] = set
	rr.zone[name] = zone
	rr.live = append(rr.live, m)
	rr.all = append(rr.all, m)
	return m, nil
}

// gone removes m from the live members: it shut down or crashed. Its Rink
// is dropped, so that stopping it later only closes its client.
func (rr *replicaRink) gone(m *member) {
	if set := rr.sets[m]; set != nil {
		set.Close() // (its Rink has stopped: it returns at once)
		delete(rr.sets, m)
	}
	m.r = nil
	rr.live = slices.DeleteFunc(rr.live, func(o *member) bool { return o == m })
}

// crash closes the clients of ms at once, without revoking their leases
// (their keys stay until the TTL runs out, as after a crash), and waits
// until each of their Rinks has ended.
func (rr *replicaRink) crash(ms []*member) time.Time {
	at := time.Now()
	for _, m := range ms {
		m.cli.Close()
	}
	for _, m := range ms {
		<-m.r.Done()
		rr.gone(m)
	}
	return at
}

// settled reports whether the live members are at rest and every slot is
// held as the newest map says: every member ranked in one map version and
// settled (Rank.Settled), each slot's primary held by the map's primary
// and its secondaries by the map's secondaries, as the members' events
// tell. The ranks are read before and after, as in settled.
func (rr *replicaRink) settled() bool {
	ranks := func() []rink.Rank {
		out := make([]rink.Rank, len(rr.live))
		for i, m := range rr.live {
			out[i] = m.r.Rank()
		}
		return out
	}
	before := ranks()
	for _, rk := range before {
		if rk.Version != before[0].Version || rk.Index < 0 || !rk.Settled {
			return false
		}
	}
	primary, secondaries := replicaHolds(rr.rec.snapshot())
	for s, role := range rr.probe {
		owners, ok := rr.live[0].r.Owners(role)
		if !ok || len(owners) != ReplicasK || primary[s] != owners[0] {
			return false
		}
		if !slices.Equal(secondaries[s], slices.Sorted(slices.Values(owners[1:]))) {
			return false
		}
	}
	for i, rk := range ranks() {
		if rk.Version != before[i].Version || rk.Index != before[i].Index {
			return false
		}
	}
	return true
}

// primaries maps each role to its primary in the newest map of the first
// live member.
func (rr *replicaRink) primaries(rs []string) map[string]string {
	return ownersOf(rr.live[0], rs)
}

// holding is one member's holding of one slot, as its primary or as a
// secondary.
type holding struct {
	slot    int
	member  string
	primary bool
}

// holdingOf returns the holding an acquisition or release of a primary or
// a secondary starts or ends, and whether e is one.
func holdingOf(e rink.Event) (h holding, acquired, ok bool) {
	switch e.Kind {
	case rink.EventAcquired, rink.EventSecondaryAcquired:
		return holding{e.Slot, e.Member, e.Kind == rink.EventAcquired}, true, true
	case rink.EventReleased, rink.EventSecondaryReleased:
		return holding{e.Slot, e.Member, e.Kind == rink.EventReleased}, false, true
	}
	return holding{}, false, false
}

// openHoldings follows the holdings that events start and end, in the
// order given: open is called for each holding started that was not open,
// closed for each open holding that ends (by a release, or a fence of its
// member).
type openHoldings struct {
	open   map[holding]bool
	opened func(holding)
	closed func(holding)
}

// apply follows one event.
func (o *openHoldings) apply(e rink.Event) {
	if o.open == nil {
		o.open = map[holding]bool{}
	}
	if e.Kind == rink.EventFenced {
		for h := range o.open {
			if h.member == e.Member {
				o.end(h)
			}
		}
		return
	}
	h, acquired, ok := holdingOf(e)
	switch {
	case !ok:
	case acquired && !o.open[h]:
		o.open[h] = true
		if o.opened != nil {
			o.opened(h)
		}
	case !acquired && o.open[h]:
		o.end(h)
	}
}

// end closes an open holding.
func (o *openHoldings) end(h holding) {
	delete(o.open, h)
	if o.closed != nil {
		o.closed(h)
	}
}

// replicaHolds returns, per slot, the members holding it at the end of
// events: its primary, and its secondaries, sorted. Each member's events
// must be in the order it emitted them.
func replicaHolds(events []rink.Event) (primary map[int]string, secondaries map[int][]string) {
	var o openHoldings
	for _, e := range events {
		o.apply(e)
	}
	primary, secondaries = map[int]string{}, map[int][]string{}
	for h := range o.open {
		if h.primary {
			primary[h.slot] = h.member
		} else {
			secondaries[h.slot] = append(secondaries[h.slot], h.member)
		}
	}
	for s := range secondaries {
		slices.Sort(secondaries[s])
	}
	return primary, secondaries
}

// replicaOverlaps counts what overlaps counts for the primaries, and the
// instants at which more than k holdings of a slot, its primary's and its
// secondaries', were open at once: all must be zero. (A member holding a
// slot both as its primary and as a secondary counts twice.)
func replicaOverlaps(events []rink.Event, k int) int {
	events = slices.Clone(events)
	bad := overlaps(events) // (sorts events by time)
	count := map[int]int{}
	o := openHoldings{
		opened: func(h holding) {
			if count[h.slot]++; count[h.slot] > k {
				bad++
			}
		},
		closed: func(h holding) { count[h.slot]-- },
	}
	for _, e := range events {
		o.apply(e)
	}
	return bad
}

// Replicas runs the replicas scenario: 3 zones of 3 members, 2 replicas per
// slot (rink.WithReplicas, rink.WithZone), 1,024 roles, a session TTL of
// ReplicasTTL and a rebalance delay of 2 s (so that a newcomer waits for
// the index of the member it replaces), on a rink of its own. It reports:
//
//   - zone_distinct_fraction: at rest, before any fault, the fraction of
//     the slots held by 2 members in distinct zones;
//   - rolling_primary_moves: primary acquisitions per role while each
//     member is replaced by a newcomer of its zone that joins and waits,
//     the old one then shutting down (as in Rolling);
//   - crash_promoted_warm_fraction and crash_failover_s: a plain member
//     outside the leader's zone crashes (its client closed, its lease left
//     to expire); of the roles it held the primary of, the fraction taken
//     by a member that held them as a secondary from before the crash
//     until it took them, and the time from the crash until each of them
//     was held again (crash_roles: how many they were); it then restarts
//     (a new member of its zone), so that the zone loss meets 3 zones of 3
//     members;
//   - zone_primaries and zone_loss_moved_primaries: every member of the
//     leader's zone crashes at once; the roles whose primary was in that
//     zone, and the primary acquisitions of roles from then until the rink
//     is at rest again (equal when only that zone's primaries move, each
//     once);
//   - overlaps: what overlaps counts, and every instant at which more than
//     2 members held a slot, as primary or secondary;
//   - ttl_s: the session TTL.
//
// A run that misses a target writes what went wrong to env.Diag.
func Replicas(env Env) (Sample, error) {
	rr := &replicaRink{
		env: env, name: nextRink("replicas"), rec: &recorder{}, zone: map[string]string{}, probe: slotProbes(),
		sets: map[*member]*rink.RoleSet{},
		opts: []rink.Option{rink.WithReplicas(ReplicasK), rink.WithSessionTTL(ReplicasTTL), rink.WithRebalanceDelay(2 * time.Second)},
	}
	defer func() { stopAll(rr.all) }()
	rr.roles = rr.probe // (one role per slot: see replicaRink.roles)
	rs := rr.roles
	if err := rr.start(); err != nil {
		return nil, err
	}
	s := Sample{"ttl_s": ReplicasTTL.Seconds()}
	s["zone_distinct_fraction"] = rr.zoneDistinct()
	for _, phase := range []func(Sample, []string) error{rr.roll, rr.crashOne, rr.loseZone} {
		if err := phase(s, rs); err != nil {
			return nil, err
		}
	}
	s["overlaps"] = float64(replicaOverlaps(rr.rec.snapshot(), ReplicasK))
	if s["overlaps"] > 0 {
		rr.diag("%v overlaps", s["overlaps"])
	}
	return s, nil
}

// diag writes a line about a run that missed a target to env.Diag.
func (rr *replicaRink) diag(format string, args ...any) {
	if rr.env.Diag != nil {
		fmt.Fprintf(rr.env.Diag, "replicas: %s: "+format+"\n", append([]any{rr.name}, args...)...)
	}
}

// poll is until with a coarser step, for conditions that read all the
// events: the figures come from the events' times, not from when the
// condition was seen to hold.
func poll(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// start starts the members, m0 to m8, member i in zone i mod 3, the first
// alone (it leads), and waits until the rink is at rest.
func (rr *replicaRink) start() error {
	for i := range replicasPerZone * len(replicaZones) {
		m, err := rr.join(fmt.Sprintf("m%d", i), replicaZones[i%len(replicaZones)])
		if err != nil {
			return err
		}
		if i == 0 {
			if err := until(10*time.Second, "first member ranked", func() bool { return m.r.Rank().Index == 0 }); err != nil {
				return err
			}
		}
	}
	return poll(60*time.Second, "members settled", rr.settled)
}

// zoneDistinct returns the fraction of the slots held, as the events tell,
// by ReplicasK members in as many zones.
func (rr *replicaRink) zoneDistinct() float64 {
	primary, secondaries := replicaHolds(rr.rec.snapshot())
	distinct := 0
	var bad []string
	for s := range rink.DefaultSlots {
		zones := map[string]bool{rr.zone[primary[s]]: true}
		for _, m := range secondaries[s] {
			zones[rr.zone[m]] = true
		}
		if primary[s] != "" && len(secondaries[s]) == ReplicasK-1 && len(zones) == ReplicasK {
			distinct++
		} else if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf("slot %d: primary %q, secondaries %v", s, primary[s], secondaries[s]))
		}
	}
	if len(bad) > 0 {
		rr.diag("%d slots not in %d distinct zones, among them %v", rink.DefaultSlots-distinct, ReplicasK, bad)
	}
	return float64(distinct) / rink.DefaultSlots
}

// roleAcquisitions counts the acquisitions of primaries after since, per
// role of rs (an acquisition of a slot counts once per role in it).
func roleAcquisitions(events []rink.Event, rs []string, since time.Time) (total int, per map[string]int) {
	bySlot := map[int]int{}
	for _, e := range events {
		if e.Kind == rink.EventAcquired && e.Time.After(since) {
			bySlot[e.Slot]++
		}
	}
	per = map[string]int{}
	for _, r := range rs {
		per[r] = bySlot[slotOf(r)]
		total += per[r]
	}
	return total, per
}

// roll replaces each member by a newcomer in its zone, as Rolling does,
// and reports rolling_primary_moves.
func (rr *replicaRink) roll(s Sample, rs []string) error {
	mark := time.Now()
	for i, old := range slices.Clone(rr.live) {
		oldName := old.r.Member()
		nm, err := rr.join(fmt.Sprintf("new%d", i), rr.zone[oldName])
		if err != nil {
			return err
		}
		if err := until(10*time.Second, "newcomer waiting", func() bool { return nm.r.Rank().Waiting }); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = old.r.Shutdown(ctx)
		cancel()
		if err != nil {
			return err
		}
		old.cli.Close()
		rr.gone(old)
		if err := poll(30*time.Second, fmt.Sprintf("settled after %s replaced %s", nm.r.Member(), oldName), rr.settled); err != nil {
			return err
		}
	}
	total, per := roleAcquisitions(rr.rec.snapshot(), rs, mark)
	s["rolling_primary_moves"] = float64(total) / float64(len(rs))
	if total != len(rs) {
		n := map[int]int{} // moves -> roles
		for _, c := range per {
			n[c]++
		}
		rr.diag("rolling deploy: %d primary acquisitions of %d roles; roles by acquisitions %v", total, len(rs), n)
	}
	return nil
}

// crashOne crashes a plain member outside the leader's zone, at a random
// point of its renewal cycle, and reports crash_promoted_warm_fraction,
// crash_failover_s and crash_roles.
func (rr *replicaRink) crashOne(s Sample, rs []string) error {
	leader := rr.live[0].r.Rank().Leader
	var victim *member
	for _, m := range rr.live {
		if n := m.r.Member(); n != leader && rr.zone[n] != rr.zone[leader] {
			victim = m
			break
		}
	}
	if victim == nil {
		return fmt.Errorf("no member outside the leader's (%q) zone", leader)
	}
	time.Sleep(time.Duration(time.Now().UnixNano() % int64(ReplicasTTL/3)))
	name := victim.r.Member()
	primary, secondaries := replicaHolds(rr.rec.snapshot())
	theirs := map[int]bool{}
	for sl, p := range primary {
		if p == name {
			theirs[sl] = true
		}
	}
	var victimRoles []string
	for _, r := range rs {
		if theirs[slotOf(r)] {
			victimRoles = append(victimRoles, r)
		}
	}
	if len(victimRoles) == 0 {
		return fmt.Errorf("%s holds no role's primary", name)
	}
	crash := rr.crash([]*member{victim})
	var taken map[int]rink.Event
	var warm map[int]bool
	if err := poll(10*ReplicasTTL, fmt.Sprintf("the primaries of %s held again", name), func() bool {
		taken, warm = takeovers(rr.rec.snapshot(), crash, theirs, secondaries)
		return len(taken) == len(theirs)
	}); err != nil {
		return err
	}
	var last time.Time
	warmRoles := 0
	var cold []string
	for _, r := range victimRoles {
		sl := slotOf(r)
		if t := taken[sl].Time; t.After(last) {
			last = t
		}
		if warm[sl] {
			warmRoles++
		} else if len(cold) < 10 {
			cold = append(cold, fmt.Sprintf("%s (slot %d) by %s, secondaries at the crash %v", r, sl, taken[sl].Member, secondaries[sl]))
		}
	}
	s["crash_roles"] = float64(len(victimRoles))
	s["crash_promoted_warm_fraction"] = float64(warmRoles) / float64(len(victimRoles))
	s["crash_failover_s"] = last.Sub(crash).Seconds()
	if warmRoles != len(victimRoles) {
		rr.diag("crash of %s: %d of its %d roles taken cold, among them %v", name, len(victimRoles)-warmRoles, len(victimRoles), cold)
	}
	if d := last.Sub(crash); d > ReplicasTTL+400*time.Millisecond {
		rr.diag("crash of %s: its roles held again %v after the crash (TTL %v)", name, d.Round(time.Millisecond), ReplicasTTL)
	}
	if err := poll(30*time.Second, "settled after the crash of "+name, rr.settled); err != nil {
		return err
	}
	// The crashed member restarts (a new member of its zone), so that the
	// zone loss below meets 3 zones of 3 members.
	if _, err := rr.join(name+"-restarted", rr.zone[name]); err != nil {
		return err
	}
	return poll(30*time.Second, "settled after the restart of "+name, rr.settled)
}

// takeovers returns, for the slots in lost, the first acquisition of each
// after crash, and whether it was warm: its member held the slot as a
// secondary at the crash (secondaries, as replicaHolds gives them) and
// until the acquisition, its secondary ended by nothing but the promotion
// itself (rink.ErrPromoted).
func takeovers(events []rink.Event, crash time.Time, lost map[int]bool, secondaries map[int][]string) (map[int]rink.Event, map[int]bool) {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	held := map[holding]bool{} // warm secondaries of lost slots
	for sl := range lost {
		for _, m := range secondaries[sl] {
			held[holding{sl, m, false}] = true
		}
	}
	taken, warm := map[int]rink.Event{}, map[int]bool{}
	for _, e := range events {
		if !e.Time.After(crash) {
			continue
		}
		switch e.Kind {
		case rink.EventSecondaryReleased:
			if !errors.Is(e.Cause, rink.ErrPromoted) {
				delete(held, holding{e.Slot, e.Member, false})
			}
		case rink.EventFenced:
			for h := range held {
				if h.member == e.Member {
					delete(held, h)
				}
			}
		case rink.EventAcquired:
			if _, ok := taken[e.Slot]; lost[e.Slot] && !ok {
				taken[e.Slot], warm[e.Slot] = e, held[holding{e.Slot, e.Member, false}]
			}
		}
	}
	return taken, warm
}

// loseZone crashes every member of the leader's zone at once and reports
// zone_primaries and zone_loss_moved_primaries.
func (rr *replicaRink) loseZone(s Sample, rs []string) error {
	lost := rr.zone[rr.live[0].r.Rank().Leader]
	var doomed []*member
	for _, m := range rr.live {
		if rr.zone[m.r.Member()] == lost {
			doomed = append(doomed, m)
		}
	}
	before := rr.primaries(rs)
	zonePrimaries := 0
	for _, r := range rs {
		if rr.zone[before[r]] == lost {
			zonePrimaries++
		}
	}
	mark := rr.crash(doomed)
	if err := poll(10*ReplicasTTL+30*time.Second, fmt.Sprintf("settled after the loss of zone %s", lost), rr.settled); err != nil {
		return err
	}
	moved, per := roleAcquisitions(rr.rec.snapshot(), rs, mark)
	s["zone_primaries"] = float64(zonePrimaries)
	s["zone_loss_moved_primaries"] = float64(moved)
	if moved != zonePrimaries {
		var odd []string
		for _, r := range rs {
			if want := map[bool]int{true: 1}[rr.zone[before[r]] == lost]; per[r] != want && len(odd) < 10 {
				odd = append(odd, fmt.Sprintf("%s: primary %s in zone %s, %d moves", r, before[r], rr.zone[before[r]], per[r]))
			}
		}
		rr.diag("loss of zone %s (%d members): %d primary moves for its %d primaries; among the roles that moved otherwise %v", lost, len(doomed), moved, zonePrimaries, odd)
		rr.diagMoves(mark, lost)
	}
	return nil
}

// diagMoves writes how the primaries moved after the loss of zone lost
// at mark: by member, where the lost zone's primaries had their
// secondaries (promotion gives each member of the survivors that many),
// the primaries held before and after, and those taken since, from the
// lost zone or from a survivor; then a few slots of survivors whose
// primary moved to a member of the lost zone that had crashed but whose
// lease had not expired yet, with what their holders did.
func (rr *replicaRink) diagMoves(mark time.Time, lost string) {
	events := rr.rec.snapshot()
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	n := sort.Search(len(events), func(i int) bool { return events[i].Time.After(mark) })
	wasP, wasS := replicaHolds(events[:n])
	nowP, _ := replicaHolds(events)
	type tally struct{ secondaries, before, after, fromLost, fromLive int }
	by := map[string]*tally{}
	at := func(m string) *tally {
		if by[m] == nil {
			by[m] = &tally{}
		}
		return by[m]
	}
	for sl, p := range wasP {
		at(p).before++
		if rr.zone[p] == lost {
			for _, m := range wasS[sl] {
				at(m).secondaries++
			}
		}
	}
	for _, p := range nowP {
		at(p).after++
	}
	odd := map[int]bool{}
	for _, e := range events[n:] {
		if e.Kind != rink.EventAcquired {
			continue
		}
		if rr.zone[wasP[e.Slot]] == lost {
			at(e.Member).fromLost++
			continue
		}
		at(e.Member).fromLive++
		if rr.zone[e.From] == lost && len(odd) < 3 {
			odd[e.Slot] = true
		}
	}
	for _, m := range rr.live {
		name := m.r.Member()
		t := at(name)
		rr.diag("  %s (zone %s): held %d secondaries of zone %s's primaries; primaries %d before, %d after; acquired %d slots of zone %s's primaries, %d of other zones'", name, rr.zone[name], t.secondaries, lost, t.before, t.after, t.fromLost, lost, t.fromLive)
	}
	for _, e := range events[n:] {
		if odd[e.Slot] {
			rr.diag("  slot %d (primary %s, secondaries %v at the loss): +%.3fs %v by %s (from %q, cause %v)", e.Slot, wasP[e.Slot], wasS[e.Slot], e.Time.Sub(mark).Seconds(), e.Kind, e.Member, e.From, e.Cause)
		}
	}
}
