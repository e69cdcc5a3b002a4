// Package rinkprom exports rink members' events as Prometheus metrics.
//
//	m := rinkprom.New()
//	prometheus.MustRegister(m)
//	r, err := rink.New(cli, "orders", rink.WithEvents(m.Observe))
//
// One Metrics value serves every member in the process; each series carries
// the labels rink and member, and exists (at 0) from the member's first
// event on, but rink_load_imbalance. Call Forget after a member's Shutdown
// to stop exporting it.
//
// The metrics, with their types:
//
//   - rink_member_index (gauge): this member's index; -1 while waiting, out
//     of the rink, or shut down.
//   - rink_size (gauge): ranked members in the newest map this member applied.
//   - rink_member_waiting (gauge): 1 while the map lists this member as
//     waiting to be ranked.
//   - rink_member_leader (gauge): 1 while this member is the rink's leader,
//     the member that coordinates the rink (rink.Rank.Leader), not the
//     holder of a role named "leader".
//   - rink_slots_held (gauge): slots this member holds (a role is held with
//     its slot); with more than one replica per slot (rink.WithReplicas),
//     those it holds as primary.
//   - rink_settled (gauge): 1 while this member sees the rink at rest
//     (rink.Rank.Settled): the leader plans no move and every member has
//     acknowledged the map.
//   - rink_acquisitions_total (counter): slots this member started holding
//     (as primary).
//   - rink_releases_total (counter): slots this member stopped holding (as
//     primary).
//   - rink_handovers_total (counter): acquisitions of a slot another member
//     owned before.
//   - rink_fences_total (counter): times this member dropped every holding at
//     once (session lost, or left the rink).
//   - rink_rejoins_total (counter): times this member joined again with a new
//     session.
//   - rink_maps_applied_total (counter): map versions this member applied.
//   - rink_handover_wait_seconds (histogram): time from the map that gave
//     this member a slot to holding it.
//   - rink_map_apply_seconds (histogram): time this member took to apply a
//     map.
//   - rink_drain_seconds (histogram): time a slot this member gave away
//     waited for the functions Run and Watch ran on it
//     (rink.WithDrainTimeout), timed-out drains included.
//   - rink_drain_timeouts_total (counter): drains that ran out of time,
//     handing a slot over with work still running on it.
//   - rink_member_load (gauge): this member's load rate over the slots it
//     holds, units per second (rink.Rink.AddLoad), as last reported.
//   - rink_member_awaited_roles (gauge): distinct roles this member awaits in
//     the slots it holds, as last reported.
//   - rink_load_imbalance (gauge): while this member leads and balances by
//     load, the most loaded member's load per capacity over the mean, as
//     estimated after its last round; it has no series before its first
//     round.
//   - rink_load_rounds_total (counter): rounds of balancing by load this
//     member ran as the rink's leader.
//   - rink_load_moves_total (counter): slots those rounds moved.
//   - rink_secondary_slots_held (gauge): slots this member holds as a
//     secondary, keeping their roles warm for their primary on another
//     member (0 with one replica per slot).
//   - rink_secondary_acquisitions_total (counter): slots this member started
//     holding as a secondary.
//   - rink_secondary_releases_total (counter): slots this member stopped
//     holding as a secondary, promotions included.
//   - rink_promotions_total (counter): slots this member held as a secondary
//     and then took as primary (rink.ErrPromoted): a failover, or a move
//     that found the roles warm.
package rinkprom

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rink-go/rink"
)

// Metrics turns rink events into Prometheus metrics. Pass its Observe
// method to rink.WithEvents and register it with a Prometheus registry.
type Metrics struct {
	index, size, waiting, leader, held, load, roles, imbalance  *prometheus.GaugeVec
	settled, secondaries                                        *prometheus.GaugeVec
	acquisitions, releases, handovers, fences, rejoins, applied *prometheus.CounterVec
	rounds, moves, drainTimeouts                                *prometheus.CounterVec
	secAcquisitions, secReleases, promotions                    *prometheus.CounterVec
	handoverWait, mapApply, drain                               *prometheus.HistogramVec

	seen sync.Map // member label pairs whose series exist
}

var labels = []string{"rink", "member"}

// New returns Metrics with no series yet; series appear with the first
// event of each member.
func New() *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "rink", Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "rink", Name: name, Help: help}, labels)
	}
	return &Metrics{
		index:         gauge("member_index", "This member's index; -1 while waiting or out of the rink."),
		size:          gauge("size", "Ranked members in the newest map this member applied."),
		waiting:       gauge("member_waiting", "1 while the map lists this member as waiting to be ranked."),
		leader:        gauge("member_leader", "1 while this member is the rink's leader."),
		held:          gauge("slots_held", "Slots this member holds; a role is held with its slot."),
		settled:       gauge("settled", "1 while this member sees the rink at rest: the leader plans no move and every member has acknowledged the map."),
		load:          gauge("member_load", "This member's load rate over the slots it holds, units per second, as last reported."),
		roles:         gauge("member_awaited_roles", "Distinct roles this member awaits in the slots it holds, as last reported."),
		imbalance:     gauge("load_imbalance", "While this member leads and balances by load: the most loaded member's load per capacity over the mean, after its last round."),
		rounds:        counter("load_rounds_total", "Rounds of balancing by load this member ran as the rink's leader."),
		moves:         counter("load_moves_total", "Slots this member's rounds of balancing by load moved."),
		acquisitions:  counter("acquisitions_total", "Slots this member started holding."),
		releases:      counter("releases_total", "Slots this member stopped holding."),
		handovers:     counter("handovers_total", "Acquisitions of a slot another member owned before."),
		fences:        counter("fences_total", "Times this member dropped every holding at once."),
		rejoins:       counter("rejoins_total", "Times this member joined again with a new session."),
		applied:       counter("maps_applied_total", "Map versions this member applied."),
		drainTimeouts: counter("drain_timeouts_total", "Drains that ran out of time, handing a slot over with work still running on it."),

		// Replicas (rink.WithReplicas): the secondaries this member holds.
		secondaries:     gauge("secondary_slots_held", "Slots this member holds as a secondary, keeping their roles warm for their primary on another member."),
		secAcquisitions: counter("secondary_acquisitions_total", "Slots this member started holding as a secondary."),
		secReleases:     counter("secondary_releases_total", "Slots this member stopped holding as a secondary, promotions included."),
		promotions:      counter("promotions_total", "Slots this member held as a secondary and then took as primary."),
		drain: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "rink", Name: "drain_seconds",
			Help:    "Time a given-away slot waited for the functions Run and Watch ran on it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9), // 1ms .. 65s
		}, labels),
		handoverWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "rink", Name: "handover_wait_seconds",
			Help:    "Time from the map that gave this member a slot to holding it.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. 26s
		}, labels),
		mapApply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "rink", Name: "map_apply_seconds",
			Help:    "Time this member took to apply a map.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 9), // 10µs .. 0.6s
		}, labels),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.index, m.size, m.waiting, m.leader, m.held, m.settled, m.load, m.roles, m.imbalance,
		m.acquisitions, m.releases, m.handovers, m.fences, m.rejoins, m.applied, m.rounds, m.moves,
		m.handoverWait, m.mapApply, m.drainTimeouts, m.drain,
		m.secondaries, m.secAcquisitions, m.secReleases, m.promotions}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Observe records one event. Pass it to rink.WithEvents.
func (m *Metrics) Observe(e rink.Event) {
	l := prometheus.Labels{"rink": e.Rink, "member": e.Member}
	if _, loaded := m.seen.LoadOrStore([2]string{e.Rink, e.Member}, true); !loaded {
		// Every series of a member exists from its first event on, at 0,
		// so that rates and alerts see zeros rather than gaps.
		// (Not rink_load_imbalance: it has no value until a round of
		// balancing by load, and 0 would read as a perfect balance.)
		for _, c := range []*prometheus.CounterVec{m.acquisitions, m.releases, m.handovers, m.fences, m.rejoins, m.applied, m.rounds, m.moves,
			m.secAcquisitions, m.secReleases, m.promotions, m.drainTimeouts} {
			c.With(l)
		}
		for _, g := range []*prometheus.GaugeVec{m.size, m.waiting, m.leader, m.held, m.settled, m.load, m.roles, m.secondaries} {
			g.With(l)
		}
		m.handoverWait.With(l)
		m.mapApply.With(l)
		m.drain.With(l)
		m.index.With(l).Set(-1)
	}
	switch e.Kind {
	case rink.EventAcquired:
		m.acquisitions.With(l).Inc()
		m.held.With(l).Inc()
		m.handoverWait.With(l).Observe(e.Wait.Seconds())
		if e.From != "" && e.From != e.Member {
			m.handovers.With(l).Inc()
		}
	case rink.EventReleased:
		m.releases.With(l).Inc()
		m.held.With(l).Dec()
	case rink.EventSecondaryAcquired:
		m.secAcquisitions.With(l).Inc()
		m.secondaries.With(l).Inc()
	case rink.EventSecondaryReleased:
		// Every secondary holding ends with this event, a fence's and a
		// promotion's included, so the gauge returns to what is held.
		m.secReleases.With(l).Inc()
		m.secondaries.With(l).Dec()
		if errors.Is(e.Cause, rink.ErrPromoted) {
			m.promotions.With(l).Inc()
		}
	case rink.EventFenced:
		m.fences.With(l).Inc()
	case rink.EventRejoined:
		m.rejoins.With(l).Inc()
	case rink.EventMapApplied:
		m.applied.With(l).Inc()
		m.mapApply.With(l).Observe(e.Wait.Seconds())
	case rink.EventRankChanged:
		m.index.With(l).Set(float64(e.Rank.Index))
		m.size.With(l).Set(float64(e.Rank.Size))
		m.waiting.With(l).Set(b2f(e.Rank.Waiting))
		m.leader.With(l).Set(b2f(e.Rank.Leader == e.Member))
		m.settled.With(l).Set(b2f(e.Rank.Settled))
	case rink.EventLoadReported:
		m.load.With(l).Set(e.Load)
		m.roles.With(l).Set(float64(e.Roles))
	case rink.EventLoadBalanced:
		m.imbalance.With(l).Set(e.Imbalance)
		m.rounds.With(l).Inc()
		m.moves.With(l).Add(float64(e.Moved))
	case rink.EventDrained:
		m.drain.With(l).Observe(e.Wait.Seconds())
	case rink.EventDrainTimedOut:
		m.drain.With(l).Observe(e.Wait.Seconds())
		m.drainTimeouts.With(l).Inc()
	}
}

// Forget removes every series of a member, for one that has left for good
// (after its Shutdown): otherwise its last values stay exported.
func (m *Metrics) Forget(rinkName, member string) {
	l := prometheus.Labels{"rink": rinkName, "member": member}
	for _, c := range m.collectors() {
		if v, ok := c.(interface{ Delete(prometheus.Labels) bool }); ok {
			v.Delete(l)
		}
	}
	m.seen.Delete([2]string{rinkName, member})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
