package sim

import (
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/rink-go/rink/internal/wire"
)

// Two checks of what a rink does once nothing goes wrong: it comes to
// rest (unacked, part of the liveness check at the end), and a member
// whose lease is sound keeps it (checkFence, at every fence).

// unacked says how the leader's floor falls short of the map the live
// members applied ("": it does not). Once the faults stop, every member
// must acknowledge what it owes, and the leader count it: a leader and a
// member that wait for each other (a member the floor lists as lagging
// that does not acknowledge again) hold every slot and still never let
// the rink come to rest (Rank().Settled stays false, EventSettled never
// comes, and the next move waits on the lagging member's
// acknowledgement), which users see. Moves the leader still plans (a
// load round due at the next load interval) are not asked for: only the
// acknowledgements of the map in place.
func (h *history) unacked() string {
	var version int64 = -1
	for _, m := range h.members {
		if !m.alive {
			continue
		}
		_, v, _ := m.m.View()
		if version >= 0 && v != version {
			return "" // (the members disagree on the map: the rest of live says so, or will)
		}
		version = v
	}
	if version <= 0 {
		return ""
	}
	kvs := h.rangeKVs(simKeys.Floor(), nil)
	if len(kvs) != 1 {
		return fmt.Sprintf("no floor of map version %d", version)
	}
	f, ok := wire.ParseFloor(kvs[0].Value)
	switch {
	case !ok:
		return fmt.Sprintf("a floor that does not decode: %q", kvs[0].Value)
	case f.Version != version:
		return fmt.Sprintf("the floor is of map version %d, the members applied %d", f.Version, version)
	case !f.Complete || f.Floor < f.Version || f.Seq > 0 && (!f.SeqComplete || f.SeqFloor < f.Seq):
		return fmt.Sprintf("the floor of map version %d waits for acknowledgements: %s", version, kvs[0].Value)
	}
	return ""
}

// soundKinds are the fault kinds under which a member whose lease is
// sound has no reason to fence: processes, the network and etcd fail,
// keys are deleted, but nobody writes a key of the rink by hand (a map
// that names another incarnation of the member, a duplicate under its
// name), and etcd is never restored (which a member detects and fences
// for).
var soundKinds = []string{"crash", "restart", "partition", "leave", "join", "delete-key", "break-watch", "etcd-slow", "pause",
	"compact", "floor-delete", "acks-delete", "stray-key", "etcd-errors", "zone-loss", "pause-joining"}

// checkFence checks a fence of m that rejoined after an earlier one:
// while m still trusts its lease (its deadline has not passed), the lease
// lives at etcd and m's member key is still bound to it, m has no reason
// to fence, in a history of soundKinds. A fence then is no danger, but it
// costs what the design promises it does not: a member that resumed its
// key under a new lease keeps its rank and slots (docs/design.md,
// Resuming), where one that fences for nothing rejoins as a newcomer, its
// roles moved twice.
//
// A process's first incarnation is not checked: a process that restarts
// under a name whose earlier process's key was replaced (so that the map
// names that key in its Incs) fences on its first map when that map
// predates its own key (apply.go: "the map says another process holds
// this member's name"), a map that says nothing of its key. That costs a
// restarted process one more join; it is left as it is here, as that
// fence also guards a restore of etcd that brought the earlier key back
// (seeds 87, 198, 779 and 914 of -kinds
// partition,pause,etcd-errors,crash,restart,join,leave,etcd-slow,break-watch,compact
// show it).
func (h *history) checkFence(m *simMember) {
	for _, k := range h.fault {
		if !slices.Contains(soundKinds, k) {
			return
		}
	}
	lease, ok, first := m.m.Trusted()
	if first {
		return
	}
	h.res.FencesChecked++
	if !ok || lease == 0 || h.w.Etcd.LeaseTimeToLive(&etcdserverpb.LeaseTimeToLiveRequest{ID: lease}).TTL < 0 {
		return
	}
	kvs := h.rangeKVs(simKeys.Member(m.name), nil)
	if len(kvs) == 1 && kvs[0].Lease == lease {
		h.violate(fmt.Sprintf("%s fenced while it trusted its lease %x, which lives, its member key bound to it", m.name, lease))
	}
}
