package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/rink-go/rink"
)

// roles returns n role names, role-0 .. role-(n-1).
func roles(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("role-", i)
	}
	return out
}

// cluster starts n members of a new rink and waits until they hold every
// slot. The first joins alone and leads; the leader's delay decides.
func cluster(env Env, rec *recorder, prefix string, n int, opts ...rink.Option) (string, []*member, error) {
	name := nextRink(prefix)
	var ms []*member
	for i := 0; i < n; i++ {
		m, err := join(env.Endpoints, name, fmt.Sprintf("m%d", i), rec, opts...)
		if err != nil {
			stopAll(ms)
			return "", nil, err
		}
		ms = append(ms, m)
		if i == 0 {
			if err := until(10*time.Second, "first member ranked", func() bool { return m.r.Rank().Index == 0 }); err != nil {
				stopAll(ms)
				return "", nil, err
			}
		}
	}
	if err := until(30*time.Second, "members settled", settled(rec, ms)); err != nil {
		stopAll(ms)
		return "", nil, err
	}
	return name, ms, nil
}

func stopAll(ms []*member) {
	for _, m := range ms {
		m.stop()
	}
}

// Handover measures n graceful handovers: the holder of a role shuts down
// and the other member takes the role over. The holder leads if leaderHolds.
// The role is in use: the holder has its context, and the heir awaits it.
//
// Right before each handover, on the same etcd, it also measures the floor
// (FloorPutsPerHandover puts seen by a watch on another client, as in
// Floor) and the departure's transaction alone (DepartTxnsPerHandover, see
// measureDepart), and reports the handover's p50 against both.
func Handover(env Env, leaderHolds bool, n int) (Sample, error) {
	probe, err := newFloorProbe(env)
	if err != nil {
		return nil, err
	}
	defer probe.close()
	var gaps, floor, depart []time.Duration
	bad := 0
	for i := 0; i < n; i++ {
		rec := &recorder{}
		_, ms, err := cluster(env, rec, "handover", 2, rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
		if err != nil {
			return nil, err
		}
		holder, heir := ms[1], ms[0] // the first member leads
		if leaderHolds {
			holder, heir = ms[0], ms[1]
		}
		role := ""
		for _, r := range roles(4096) {
			if o, _ := holder.r.Owner(r); o == holder.r.Member() {
				role = r
				break
			}
		}
		// The role is in use, as a singleton loop's would be: the holder
		// acts on it, and the heir waits for it.
		if _, ok := holder.r.Get(role); !ok {
			stopAll(ms)
			return nil, fmt.Errorf("the holder does not hold %s", role)
		}
		awaited := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := heir.r.AwaitRoleContext(ctx, role)
			awaited <- err
		}()
		f, err := probe.measure(FloorPutsPerHandover)
		if err != nil {
			stopAll(ms)
			<-awaited
			return nil, err
		}
		d, err := probe.measureDepart(DepartTxnsPerHandover)
		if err != nil {
			stopAll(ms)
			<-awaited
			return nil, err
		}
		floor, depart = append(floor, f...), append(depart, d...)
		mark := time.Now()
		if err := holder.r.Shutdown(context.Background()); err != nil {
			stopAll(ms)
			<-awaited
			return nil, err
		}
		if err := <-awaited; err != nil {
			stopAll(ms)
			return nil, err
		}
		events := rec.snapshot()
		bad += overlaps(events)
		gaps = append(gaps, slotMoves(events, slotOf(role), mark)...)
		stopAll(ms)
	}
	s := Sample{"handover_p50_ms": ms(percentile(gaps, 0.5)), "handover_p99_ms": ms(percentile(gaps, 0.99)), "overlaps": float64(bad)}
	floorFigures(s, floor, depart)
	s["p50_to_floor"] = s["handover_p50_ms"] / s["write_watch_p50_ms"]
	s["p50_to_depart_txn"] = s["handover_p50_ms"] / s["depart_txn_p50_ms"]
	return s, nil
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// Failover cuts the holder off etcd through a proxy (its process keeps
// running, as after a dropped connection) with a TTL of 2 s, and measures
// when the holder fenced itself and when the other member held the roles.
func Failover(env Env) (Sample, error) {
	if env.NewProxy == nil {
		return nil, fmt.Errorf("failover needs a proxy")
	}
	addr, cut, _, closeProxy, err := env.NewProxy()
	if err != nil {
		return nil, err
	}
	defer closeProxy()
	rec := &recorder{}
	name := nextRink("failover")
	opts := []rink.Option{rink.WithRebalanceDelay(0), rink.WithSessionTTL(2 * time.Second)}
	a, err := join(env.Endpoints, name, "a", rec, opts...)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	if err := until(10*time.Second, "a ranked", func() bool { return a.r.Rank().Index == 0 }); err != nil {
		return nil, err
	}
	b, err := join([]string{addr}, name, "b", rec, opts...) // b reaches etcd only through the proxy
	if err != nil {
		return nil, err
	}
	defer b.stop()
	if err := until(30*time.Second, "settled", settled(rec, []*member{a, b})); err != nil {
		return nil, err
	}
	// Crash at a random point of b's renewal cycle.
	time.Sleep(time.Duration(time.Now().UnixNano() % int64(2*time.Second/3)))
	crash := time.Now()
	cut()
	if err := until(15*time.Second, "a holds everything", func() bool {
		held := 0
		for _, r := range roles(64) {
			if _, ok := a.r.Get(r); ok {
				held++
			}
		}
		return held == 64
	}); err != nil {
		return nil, err
	}
	events := rec.snapshot()
	var fenced, taken time.Time
	for _, e := range events {
		if e.Member == "b" && e.Kind == rink.EventFenced && fenced.IsZero() && e.Time.After(crash) {
			fenced = e.Time
		}
		if e.Member == "a" && e.Kind == rink.EventAcquired && e.Time.After(crash) {
			taken = e.Time // the last acquisition by a
		}
	}
	return Sample{
		"failover_s":     taken.Sub(crash).Seconds(),
		"self_fence_s":   fenced.Sub(crash).Seconds(),
		"fence_margin_s": taken.Sub(fenced).Seconds(),
		"overlaps":       float64(overlaps(events)),
	}, nil
}

// ownersOf maps each role to its owner in m's current map.
func ownersOf(m *member, rs []string) map[string]string {
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		out[r], _ = m.r.Owner(r)
	}
	return out
}

// rolesInSlots counts the roles whose slots are in the set.
func rolesInSlots(rs []string, slots map[int]bool) int {
	n := 0
	for _, r := range rs {
		if slots[slotOf(r)] {
			n++
		}
	}
	return n
}

// ScaleOut adds a fifth member to four (1,024 roles, no rebalance delay)
// and counts the roles that moved and the role contexts cancelled.
func ScaleOut(env Env) (Sample, error) {
	rec := &recorder{}
	rs := roles(1024)
	name, ms, err := cluster(env, rec, "scaleout", 4, rink.WithRebalanceDelay(0))
	if err != nil {
		return nil, err
	}
	defer func() { stopAll(ms) }() // ms grows below
	before := ownersOf(ms[0], rs)
	mark := time.Now()
	n, err := join(env.Endpoints, name, "m4", rec, rink.WithRebalanceDelay(0))
	if err != nil {
		return nil, err
	}
	ms = append(ms, n)
	if err := until(30*time.Second, "settled", settled(rec, ms)); err != nil {
		return nil, err
	}
	after := ownersOf(ms[0], rs)
	moved := 0
	for _, r := range rs {
		if before[r] != after[r] {
			moved++
		}
	}
	released := map[int]bool{}
	for _, e := range rec.snapshot() {
		if e.Kind == rink.EventReleased && e.Time.After(mark) {
			released[e.Slot] = true
		}
	}
	return Sample{"roles_moved": float64(moved), "ideal": 1024.0 / 5, "contexts_cancelled": float64(rolesInSlots(rs, released)), "overlaps": float64(overlaps(rec.snapshot()))}, nil
}

// CrashMoves crashes one of five members (index 1, not the highest) and
// counts the roles that moved against that member's roles.
func CrashMoves(env Env) (Sample, error) {
	rec := &recorder{}
	rs := roles(1024)
	_, ms, err := cluster(env, rec, "crash", 5, rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer func() { stopAll(ms) }()
	var victim *member
	for _, m := range ms {
		if m.r.Rank().Index == 1 {
			victim = m
		}
	}
	before := ownersOf(ms[0], rs)
	theirs := 0
	for _, o := range before {
		if o == victim.r.Member() {
			theirs++
		}
	}
	victim.cli.Close() // crash: no revoke
	<-victim.r.Done()
	victim.r = nil
	var live []*member
	for _, m := range ms {
		if m != victim {
			live = append(live, m)
		}
	}
	if err := until(15*time.Second, "settled", func() bool { return live[0].r.Rank().Size == 4 && settled(rec, live)() }); err != nil {
		return nil, err
	}
	after := ownersOf(live[0], rs)
	moved := 0
	for _, r := range rs {
		if before[r] != after[r] {
			moved++
		}
	}
	return Sample{"roles_moved": float64(moved), "victims_roles": float64(theirs), "overlaps": float64(overlaps(rec.snapshot()))}, nil
}

// slotOf is rink's role-to-slot hash for the default slot count. It is part
// of rink's protocol (pinned by the library's TestSlotOfStable).
func slotOf(role string) int { return int(xxhash.Sum64String(role) % rink.DefaultSlots) }

// slotMoves is moves restricted to one slot.
func slotMoves(events []rink.Event, slot int, since time.Time) []time.Duration {
	var mine []rink.Event
	for _, e := range events {
		if e.Slot == slot || e.Kind == rink.EventFenced {
			mine = append(mine, e)
		}
	}
	return moves(mine, since)
}
