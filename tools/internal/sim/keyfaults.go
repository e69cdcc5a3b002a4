package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// KeyFaultKinds are an operator's deletions of the keys of live members
// (issue 42): keys are evidence of a lease, never proof of its end, so no
// deletion of any key or set of keys may free a slot.
//   - "election-delete": a live member's election key; half the time its
//     member key with it (the member key first, as an operator removing a
//     member by hand does); half the time the member is cut off first; and
//     half the time the member is the one that leads (the lowest election
//     key), whose election key the next leader's campaign waits on. The
//     history of issue 42 is the leader cut off, then its member key and
//     its election key deleted.
//   - "member-keys-delete": any non-empty set of a live member's keys
//     (member, election, ack, load), each deleted on its own (etcdctl del),
//     half the time with the member cut off first.
//   - "tail-delete": the tail (.tail), half the time with the member whose
//     lease it is bound to (the newest joiner) cut off first.
//   - "duplicate": a live member is cut off, an operator deletes its
//     member key to let a replacement in, and a second process starts
//     under its name at once, while the first may still act until its
//     lease's deadline (issue 22: a pod's replacement on another node,
//     the old node cut off). The first process is stopped between 0 and
//     half a TTL after its cut ends, as the old node's kubelet does once
//     it is back.
//
// They are not in FaultKinds, and a seed draws them only with
// Config.KeyFaults (rink-sim -keys), from a stream of its own: without it,
// a seed draws, and plays, byte for byte what it did before they were
// added; with it, it draws the same kinds of FaultKinds as without, and
// each of these, or not, beside them (see drawKeyKinds). Named in
// Config.Kinds (or Config.Swarm) they are drawn as any other kind.
var KeyFaultKinds = []string{"election-delete", "member-keys-delete", "tail-delete", "duplicate"}

// "election-unleased" is played only when named (Config.Kinds), so that
// every seed draws and plays as before it: an operator puts a live
// member's election key again without its lease (etcdctl put with no
// --lease, or a script that restores keys), which makes it a stray (see
// rink's stray.go), half the time with the leader (the member whose
// election key is the lowest) cut off first, so that it does not sweep
// it: the candidate just above, waiting on that key, lists, reads it,
// finds no campaign made it and deletes it as it campaigns (see
// core.Campaigner). TestUnleasedElectionKey plays it.

// keyFault reports whether k is one of KeyFaultKinds.
func keyFault(k string) bool { return slices.Contains(KeyFaultKinds, k) }

// keyStream is the second word of the seed of the stream that draws
// KeyFaultKinds ("keys"): the world's stream, that everything else draws
// from, is left as it was.
const keyStream = 0x6b657973

// drawKeyKinds adds to fault each of KeyFaultKinds that is not in it, or
// not, two times in three as the swarm draws the other kinds, from the
// seed's key stream (never from the world's).
func drawKeyKinds(seed uint64, fault []string) []string {
	rng := rand.New(rand.NewPCG(seed, keyStream))
	for _, k := range KeyFaultKinds {
		if rng.IntN(3) > 0 && !slices.Contains(fault, k) {
			fault = append(fault, k)
		}
	}
	return fault
}

// memberKeys are the keys of one member process, as etcd holds them now.
type memberKeys struct {
	lease             int64    // the lease its keys are bound to (0: none found)
	member, ack, load string   // its member, ack and load keys ("": absent)
	elections         []string // its election keys
}

// rangeKVs returns the key-values of [key, end) (end nil: key alone).
func (h *history) rangeKVs(key string, end []byte) []*mvccpb.KeyValue {
	resp, err := h.w.Etcd.Range(&etcdserverpb.RangeRequest{Key: []byte(key), RangeEnd: end})
	if err != nil {
		return nil
	}
	return resp.Kvs
}

// keysOf finds m's keys: its lease is the one its member, ack or load key
// is bound to (its election key's, when these are gone); its election keys
// are those bound to that lease (or, with no lease found, those that name
// it).
func (h *history) keysOf(m *simMember) memberKeys {
	var mk memberKeys
	for _, k := range []*string{&mk.member, &mk.ack, &mk.load} {
		key := "rink/sim/members/" + m.name
		switch k {
		case &mk.ack:
			key = "rink/sim/acks/" + m.name
		case &mk.load:
			key = "rink/sim/.load/" + m.name
		}
		if kvs := h.rangeKVs(key, nil); len(kvs) > 0 {
			*k = key
			if mk.lease == 0 {
				mk.lease = kvs[0].Lease
			}
		}
	}
	elections := h.rangeKVs("rink/sim/election/", []byte("rink/sim/election0"))
	if mk.lease == 0 {
		// No member, ack or load key: the newest election key naming m.
		var newest int64
		for _, kv := range elections {
			if string(kv.Value) == m.name && kv.CreateRevision > newest {
				newest, mk.elections = kv.CreateRevision, []string{string(kv.Key)}
			}
		}
		return mk
	}
	for _, kv := range elections {
		if kv.Lease == mk.lease {
			mk.elections = append(mk.elections, string(kv.Key))
		}
	}
	return mk
}

// leader returns the live member whose election key is the lowest: the
// one that leads, or will once its campaign sees that (nil: none).
func (h *history) leader(live []*simMember) *simMember {
	var low int64
	name := ""
	for _, kv := range h.rangeKVs("rink/sim/election/", []byte("rink/sim/election0")) {
		if low == 0 || kv.CreateRevision < low {
			low, name = kv.CreateRevision, string(kv.Value)
		}
	}
	for _, m := range live {
		if m.name == name {
			return m
		}
	}
	return nil
}

// del deletes key as an operator does (etcdctl del), and reports whether
// it deleted anything.
func (h *history) del(key string) bool {
	resp, err := h.w.Etcd.DeleteRange(&etcdserverpb.DeleteRangeRequest{Key: []byte(key)})
	if err != nil || resp.Deleted == 0 {
		return false
	}
	h.w.Tracef("fault: operator deletes %s", key)
	h.w.pump()
	return true
}

// cutFor cuts m off etcd, half the time, for as long as delete-key does;
// it says in the trace which fault it is for.
func (h *history) cutFor(m *simMember, k string) {
	if h.rng.IntN(2) == 0 {
		h.w.Tracef("fault: %s: %s cut off first", k, m.name)
		m.c.Cut(h.w.Between(100*time.Millisecond, 2*h.cfg.TTL))
	}
}

// keyFault does one of KeyFaultKinds, and reports whether it deleted
// anything.
func (h *history) keyFault(k string, live []*simMember) bool {
	if len(live) == 0 {
		return false
	}
	switch k {
	case "election-delete":
		m := live[h.rng.IntN(len(live))]
		if h.rng.IntN(2) == 0 {
			if l := h.leader(live); l != nil {
				m = l
			}
		}
		withMember := h.rng.IntN(2) == 0
		mk := h.keysOf(m)
		if len(mk.elections) == 0 {
			return false
		}
		what := "its election key"
		if withMember {
			what = "its member key and its election key"
		}
		h.w.Tracef("fault: election-delete: %s (%s)", what, m.name)
		h.cutFor(m, k)
		deleted := false
		if withMember && mk.member != "" {
			deleted = h.del(mk.member)
		}
		for _, key := range mk.elections {
			deleted = h.del(key) || deleted
		}
		return deleted
	case "member-keys-delete":
		m := live[h.rng.IntN(len(live))]
		set := 1 + h.rng.IntN(15) // bits: member, election, ack, load
		mk := h.keysOf(m)
		var keys, names []string
		for i, ks := range [][]string{{mk.member}, mk.elections, {mk.ack}, {mk.load}} {
			if set&(1<<i) == 0 {
				continue
			}
			names = append(names, []string{"member", "election", "ack", "load"}[i])
			for _, key := range ks {
				if key != "" {
					keys = append(keys, key)
				}
			}
		}
		if len(keys) == 0 {
			return false
		}
		h.w.Tracef("fault: member-keys-delete: %s keys of %s", strings.Join(names, ", "), m.name)
		h.cutFor(m, k)
		deleted := false
		for _, key := range keys {
			deleted = h.del(key) || deleted
		}
		return deleted
	case "tail-delete":
		kvs := h.rangeKVs("rink/sim/.tail", nil)
		if len(kvs) == 0 {
			return false
		}
		for _, m := range live {
			if mk := h.keysOf(m); mk.lease != 0 && mk.lease == kvs[0].Lease {
				h.cutFor(m, k)
				break
			}
		}
		return h.del("rink/sim/.tail")
	case "election-unleased":
		m := live[h.rng.IntN(len(live))]
		mk := h.keysOf(m)
		if len(mk.elections) == 0 {
			return false
		}
		key := mk.elections[0]
		kvs := h.rangeKVs(key, nil)
		if len(kvs) == 0 {
			return false
		}
		h.w.Tracef("fault: election-unleased: %s put again without its lease (%s)", key, m.name)
		if h.rng.IntN(2) == 0 {
			if l := h.leader(live); l != nil {
				d := h.w.Between(h.cfg.TTL/2, 2*h.cfg.TTL)
				h.w.Tracef("fault: election-unleased: the leader %s cut off first for %v", l.name, d)
				l.c.Cut(d)
			}
		}
		h.put(key, kvs[0].Value)
		return true
	case "duplicate":
		m := live[h.rng.IntN(len(live))]
		for _, o := range h.members {
			if o != m && o.alive && o.name == m.name {
				return false // (one duplicate of a name at a time: the first is still running)
			}
		}
		mk := h.keysOf(m)
		if mk.member == "" {
			return false
		}
		d := h.w.Between(h.cfg.TTL/4, 2*h.cfg.TTL)
		h.w.Tracef("fault: duplicate: %s cut off for %v, its member key deleted, a second process starts under its name", m.name, d)
		m.c.Cut(d)
		if !h.del(mk.member) {
			return false
		}
		m.doomed = true // (no other fault picks it: it is stopped soon)
		h.start(m.idx, h.w.Between(0, 100*time.Millisecond))
		h.w.After(d+h.w.Between(0, h.cfg.TTL/2), func() {
			if m.alive {
				m.alive = false
				m.m.Crash()
				h.forget(m)
				h.w.Tracef("fault: duplicate: the first %s stopped", m.name)
			}
		})
		return true
	}
	return false
}
