package sim

import (
	"encoding/json"
	"fmt"
	"github.com/rink-go/rink/internal/wire"
	"slices"
)

// Warm promotion. With replicas, a member that crashes (its key gone with
// its lease, or gone without a hand-over) has each of its primaries
// promoted: the slot goes to its oldest live secondary, the one that has
// held it warm longest (docs/design.md, Replicas and zones). The leader
// holds for a TTL after such a map (planInput.Hold), so nothing balances
// the promoted primaries away in it. The simulator reads every map that is
// written (trackMap) and checks each leader's map against the one it was
// planned from (checkPromotions).
//
// It checks the maps, not which process had started its secondary: the
// leader knows names and keys, not warmth, and rightly promotes the oldest
// by the map when its process is a ghost it cannot know dead yet, or alive
// but fenced, restarted or not started yet (with three replicas, in about
// 3.5% of promotions a younger secondary held the slot when the oldest did
// not). The slots of a member that left gracefully are not checked: it
// plans its own departure's map (rink's handOver), without the hold, and
// that map may pass a promoted primary on to a younger secondary.

// leave shuts m down gracefully (see simhook.Member.Leave). A member that
// ends at once without a hand-over (in the quiet time after a restore)
// leaves its key to expire: to the leader it is a member that crashed,
// whose secondaries may be promoted until then, and it is not counted as
// left (seed 3 with -replicas 3 -zones 3 promoted one, rightly).
func (h *history) leave(m *simMember) {
	h.left[m.name] = true
	if !m.m.Leave() {
		delete(h.left, m.name)
	}
}

// departed reports whether name left gracefully and etcd shows it: its
// member key is gone, or says it is leaving (with a warm-up). Until then
// the leader cannot tell it from a live member.
func (h *history) departed(name string) bool {
	if !h.left[name] {
		return false
	}
	kv := h.w.Etcd.kvs["rink/sim/members/"+name]
	if kv == nil {
		return true
	}
	var meta wire.MemberMeta
	return json.Unmarshal(kv.Value, &meta) == nil && meta.Leaving
}

// trackedMap is a whole map as the simulator reads it from etcd.
type trackedMap struct {
	Version  int64    `json:"version"`
	Slots    int      `json:"slots"`
	Members  []string `json:"members"`
	Table    []int    `json:"table"`
	Replicas int      `json:"replicas"`
	// byHand: written in a fault's event (an operator's put, a restore),
	// not by a leader planning from the map before.
	byHand bool
}

// valid reports whether m has a table of its replicas' rows, each entry
// an index of Members.
func (m *trackedMap) valid() bool {
	if m.Replicas < 2 || m.Slots < 1 || len(m.Members) == 0 || len(m.Table) != m.Slots*m.Replicas {
		return false
	}
	for _, i := range m.Table {
		if i < 0 || i >= len(m.Members) || m.Members[i] == "" {
			return false
		}
	}
	return true
}

// secondaries returns slot s's secondaries by name, oldest first (an entry
// that names the primary, or a member an earlier row names, is none).
func (m *trackedMap) secondaries(s int) []string {
	seen := []int{m.Table[s]}
	var names []string
	for r := 1; r < m.Replicas; r++ {
		i := m.Table[r*m.Slots+s]
		if slices.Contains(seen, i) {
			continue
		}
		seen = append(seen, i)
		names = append(names, m.Members[i])
	}
	return names
}

// trackMap reads the map after each event of a history with replicas,
// when etcd's map key changed, and checks it against the one before (see
// checkPromotions). It only reads: the history plays as without it.
func (h *history) trackMap() {
	byHand := h.faulted
	h.faulted = false
	kv := h.w.Etcd.kvs["rink/sim/map"]
	rev := int64(0)
	if kv != nil {
		rev = kv.ModRevision
	}
	if rev == h.mapRev {
		return
	}
	h.mapRev = rev
	prev := h.lastMap
	h.lastMap = nil
	if kv == nil {
		return
	}
	whole := kv.Value
	if w := h.w.Etcd.kvs["rink/sim/.map"]; w != nil && w.ModRevision == rev {
		whole = w.Value
	}
	next := &trackedMap{byHand: byHand}
	if json.Unmarshal(whole, next) != nil || !next.valid() {
		return
	}
	h.lastMap = next
	if prev != nil && !prev.byHand && !byHand && next.Version == prev.Version+1 &&
		next.Slots == prev.Slots && next.Replicas == prev.Replicas {
		h.checkPromotions(prev, next)
	}
}

// checkPromotions checks a leader's map next against prev, the map it was
// planned from: each slot whose primary next no longer ranks, and that had
// a secondary next still ranks (live, and not leaving), goes to the oldest of those (the
// warm one, promoted), or else to the heir that takes its primary's index
// with every replica it held (a hand-over).
func (h *history) checkPromotions(prev, next *trackedMap) {
	for s := range prev.Slots {
		p := prev.Members[prev.Table[s]]
		if slices.Contains(next.Members, p) || h.left[p] {
			// (A member that leaves gracefully plans its own departure's
			// map, which balances the primaries promoted as it goes: see
			// rink's handOver, which plans without planInput.Hold.)
			continue
		}
		var live []string
		for _, y := range prev.secondaries(s) {
			// (A member leaving gracefully is not promoted: with a warm-up
			// it stays ranked, serving, until its heirs are ready; once
			// its leaving shows in etcd, that is: a leaver whose key
			// still says nothing of it is live to the leader.)
			if slices.Contains(next.Members, y) && !h.departed(y) {
				live = append(live, y)
			}
		}
		if len(live) == 0 {
			continue // (an orphan: placed anew)
		}
		x := next.Members[next.Table[s]]
		if i := prev.Table[s]; i < len(next.Members) && next.Members[i] == x && !slices.Contains(prev.Members, x) {
			continue // (the heir of a hand-over, at its predecessor's index)
		}
		h.res.Promotions++
		if x != live[0] {
			h.violate(fmt.Sprintf("map version %d: slot %d, whose primary %s is gone, goes to %s, not to its oldest live secondary %s (secondaries %v, oldest first)",
				next.Version, s, p, x, live[0], prev.secondaries(s)))
			return
		}
	}
}
