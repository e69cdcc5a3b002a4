package core

import (
	"time"

	"go.uber.org/zap"
)

// GhostAsk decides how a member learns that a ghost's lease has ended
// (a member whose keys went while etcd may still keep its lease): it asks
// etcd the lease's time to live until etcd says the lease is gone, then,
// when the core is to be told, reads the map key right after that answer
// (the core ends the ghost only if the map key is at least as new as the
// map it applied: see endGhost). One machine, driven by the production
// driver with the client and by the simulator with its model of etcd.
//
// Invariant: a lease is gone only when etcd answers a TTL below zero. A
// TTL of 0 means under a second left: the lease lives, and so may its
// holder.
type GhostAsk struct {
	Name  string
	Lease int64
	tell  bool // read the map key after the answer, for the core
	ttl   time.Duration
	retry func() time.Duration // the wait after an error
	log   *zap.Logger

	asked  int       // TTL answers that said the lease lives
	began  time.Time // when the first question went
	logged bool      // the long wait was logged
}

// GhostStep is what a GhostAsk wants next: a TTL question or a map read,
// After from now (0: at once); or, when Done, nothing more (with the map
// read's revisions when it was to tell the core).
type GhostStep struct {
	AskTTL, ReadMap bool
	After           time.Duration
	Done            bool
	Rev, MapRev     int64 // Done, telling: the map read's revision, and the map key's mod revision (0: absent)
}

// NewGhostAsk returns the machine that waits for lease, the ghost name's,
// to be gone at etcd, and reads the map key after when tell. Its first
// step asks at once. retry gives the wait after a failed request; ttl is
// the member's session TTL.
func NewGhostAsk(name string, lease int64, tell bool, ttl time.Duration, now time.Time, retry func() time.Duration, log *zap.Logger) (*GhostAsk, GhostStep) {
	return &GhostAsk{Name: name, Lease: lease, tell: tell, ttl: ttl, retry: retry, log: log, began: now}, GhostStep{AskTTL: true}
}

// TTL handles etcd's answer to the TTL question, at now. Every answer
// but "gone" draws from retry (as both drivers always did, so that the
// simulator's histories stay as they were); an error waits what it drew,
// an answer that the lease lives waits GhostPoll instead. Each counts as
// a question asked.
func (g *GhostAsk) TTL(ttl int64, err error, now time.Time) GhostStep {
	if err == nil && ttl < 0 {
		if !g.tell {
			return GhostStep{Done: true}
		}
		return GhostStep{ReadMap: true}
	}
	wait := g.retry()
	if err == nil {
		if !g.logged && now.Sub(g.began) >= g.ttl/4 {
			g.logged = true
			g.log.Warn("a member's keys say it went while its lease lives: starting nothing it may hold until the lease is gone",
				zap.String("member", g.Name), zap.Int64("ttl", ttl))
		}
		wait = GhostPoll(g.asked, ttl, g.ttl)
	}
	g.asked++
	return GhostStep{AskTTL: true, After: wait}
}

// MapRead handles the answer to the map read: its revision, and the map
// key's mod revision (0: absent). A failed read starts the questions
// again, after what retry draws.
func (g *GhostAsk) MapRead(rev, mapRev int64, err error) GhostStep {
	if err != nil {
		g.asked = 0
		return GhostStep{AskTTL: true, After: g.retry()}
	}
	return GhostStep{Done: true, Rev: rev, MapRev: mapRev}
}

// GhostPoll is how long to wait before asking again about a lease that
// lives: doubling from 50 ms with each answer, never past the TTL it has
// left nor a quarter of the session TTL, and never under 50 ms.
func GhostPoll(asked int, ttlLeft int64, ttl time.Duration) time.Duration {
	wait := 50 * time.Millisecond << min(asked, 8)
	return max(min(wait, time.Duration(ttlLeft)*time.Second, ttl/4), 50*time.Millisecond)
}
