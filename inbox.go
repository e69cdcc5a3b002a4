package rink

import (
	"sync"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The run goroutine's inbox: what the other goroutines hand it besides the
// watch and the handoffs that must not be lost (joins, elections,
// proclamations, which their senders clean up when nobody takes them).
//
// A sender leaves its value in the box, the newest replacing one not yet
// taken or queued behind the others, and signals wake, a channel of one.
// The run goroutine waits on that one channel for all of them rather than
// on one channel each: a goroutine parked in a select enqueues itself on
// every channel of it, and the run loop's select on twenty channels cost a
// fifth of a 10,000-member rink's CPU in a join (each member wakes a few
// times per change). No sender ever blocks.
type inbox struct {
	wake chan struct{}
	mu   sync.Mutex
	// m is what was left and not yet taken. Invariant: while m holds
	// anything, wake holds a token (it may hold one when m is empty),
	// except while awaitDrains waits (see takeDrained).
	m mail
}

// mail is the inbox's content (see the senders for each kind).
type mail struct {
	// loads: the members' newest load summaries, from the leader's
	// aggregator (see fold); set says there are some.
	loads    map[string]wire.LoadReport
	loadsSet bool
	// warm: the members' newest warm-up readiness, from the aggregator;
	// heirs: the same, while this member leaves with a warm-up (see
	// watchHeirs).
	warm     map[string]int64
	warmSet  bool
	heirs    map[string]int64
	heirsSet bool
	// warmed: announcements that role sets have warmed up for, in order
	// (see Watch).
	warmed []int64
	// ghosts: leases of ghosts found gone (see noteGhosts), in order,
	// each with the revision of etcd's answer (see endGhost).
	ghosts []ghostEnd
	// drained: the last function on a given-away slot returned (see
	// drain.go).
	drained bool
	// selfChecked: no earlier incarnation of this member's name acts any
	// more (see checkOwnName).
	selfChecked bool
	// clientClosed: the etcd client was closed under the rink.
	clientClosed bool
	// keyGone: a rejoin found the member key no longer bound to this
	// lease, the fenced incarnation's (see revokeFenced).
	keyGone clientv3.LeaseID
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// send leaves something in the box (f writes it into the mail) and wakes
// the run goroutine.
func (b *inbox) send(f func(m *mail)) {
	b.mu.Lock()
	f(&b.m)
	b.mu.Unlock()
	b.signal()
}

func (b *inbox) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take takes everything in the box (after a token from wake).
func (b *inbox) take() mail {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.m
	b.m = mail{}
	return m
}

// takeDrained takes only the news that a drain ended, for a wait outside
// the run loop (see awaitDrains), and leaves the rest in the box. It does
// not signal for the rest (a wait that did would spin on its own token):
// the wait calls resignal when it ends.
func (b *inbox) takeDrained() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	drained := b.m.drained
	b.m.drained = false
	return drained
}

// empty reports whether m holds nothing.
func (m *mail) empty() bool {
	return !m.loadsSet && !m.warmSet && !m.heirsSet && len(m.warmed) == 0 && len(m.ghosts) == 0 && !m.drained && !m.selfChecked && !m.clientClosed && m.keyGone == 0
}

// resignal restores the invariant after takeDrained: a token while the
// box holds anything.
func (b *inbox) resignal() {
	b.mu.Lock()
	full := !b.m.empty()
	b.mu.Unlock()
	if full {
		b.signal()
	}
}
