package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/rink-go/rink"
)

// SlowDrainFor is how long the drain scenario's slow function works on
// after its role's context ends.
const SlowDrainFor = 100 * time.Millisecond

// Drain measures what one slow drain does to a member's other roles: a
// member runs two roles of different slots under rink.Run, one whose
// function works on for SlowDrainFor after its context ends and one whose
// function returns at once, and shuts down; the other member takes both
// over. It reports, over n handovers, the p50 gap (release to the heir's
// acquisition) of the slow role and of the quick one with a drain timeout
// (drained_slot_gap_p50_ms, other_slot_gap_p50_ms), the quick one's
// without (other_slot_gap_p50_ms_nodrain), slow_drain_ms, and overlaps.
// One acknowledgement covers every slot a member gives away, so the quick
// role waits for the slow one: about SlowDrainFor.
func Drain(env Env, n int) (Sample, error) {
	s := Sample{"slow_drain_ms": ms(SlowDrainFor)}
	bad := 0
	for _, drain := range []time.Duration{5 * time.Second, 0} {
		var slow, quick []time.Duration
		for i := 0; i < n; i++ {
			rec := &recorder{}
			gs, gq, err := drainOnce(env, rec, drain)
			if err != nil {
				return nil, err
			}
			slow, quick = append(slow, gs), append(quick, gq)
			bad += overlaps(rec.snapshot())
		}
		if drain > 0 {
			s["drained_slot_gap_p50_ms"] = ms(percentile(slow, 0.5))
			s["other_slot_gap_p50_ms"] = ms(percentile(quick, 0.5))
		} else {
			s["other_slot_gap_p50_ms_nodrain"] = ms(percentile(quick, 0.5))
		}
	}
	s["overlaps"] = float64(bad)
	return s, nil
}

// drainOnce runs one handover of the drain scenario and returns the gaps
// of the slow role and of the quick one.
func drainOnce(env Env, rec *recorder, drain time.Duration) (slowGap, quickGap time.Duration, err error) {
	_, ms, err := cluster(env, rec, "drain", 2, rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second), rink.WithDrainTimeout(drain))
	if err != nil {
		return 0, 0, err
	}
	defer stopAll(ms)
	holder, heir := ms[0], ms[1]
	var roles []string
	seen := map[int]bool{}
	for i := 0; len(roles) < 2; i++ {
		role := fmt.Sprint("role-", i)
		if o, _ := holder.r.Owner(role); o == holder.r.Member() && !seen[slotOf(role)] {
			seen[slotOf(role)] = true
			roles = append(roles, role)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan struct{}, 2)
	done := make(chan struct{}, 2)
	for i, role := range roles {
		linger := time.Duration(0)
		if i == 0 {
			linger = SlowDrainFor
		}
		go func() {
			defer func() { done <- struct{}{} }()
			_ = holder.r.Run(ctx, role, func(rc context.Context) error {
				running <- struct{}{}
				<-rc.Done()
				if linger > 0 {
					t := time.NewTimer(linger)
					defer t.Stop()
					<-t.C
				}
				return nil
			})
		}()
	}
	for range roles {
		<-running
	}
	for _, role := range roles {
		go func() { _, _ = heir.r.AwaitRoleContext(ctx, role) }()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = holder.r.Shutdown(sctx)
	scancel()
	if err != nil {
		return 0, 0, err
	}
	for range roles {
		<-done
	}
	if err := until(10*time.Second, "the heir holds both roles", func() bool {
		_, a := heir.r.Get(roles[0])
		_, b := heir.r.Get(roles[1])
		return a && b
	}); err != nil {
		return 0, 0, err
	}
	gap := func(role string) time.Duration {
		var rel, acq time.Time
		for _, e := range rec.snapshot() {
			if e.Slot != slotOf(role) {
				continue
			}
			switch {
			case e.Kind == rink.EventReleased && e.Member == holder.r.Member():
				rel = e.Time
			case e.Kind == rink.EventAcquired && e.Member == heir.r.Member() && !rel.IsZero():
				acq = e.Time
			}
		}
		return acq.Sub(rel)
	}
	return gap(roles[0]), gap(roles[1]), nil
}
