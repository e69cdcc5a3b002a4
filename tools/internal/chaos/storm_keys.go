package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The storm's deletions of live members' keys by an operator (issue 42):
// keys are evidence of a lease, never proof of its end, so no deletion of
// any key or set of keys may free a slot. They are the simulator's
// (tools/internal/sim, KeyFaultKinds) on the real etcd:
//   - "election-delete": a live member's election key; half the time its
//     member key with it (first, as an operator removing a member by hand
//     does); half the time the member is cut off first; half the time it
//     is the map's leader. The history of issue 42 is the leader cut off,
//     then its member key and its election key deleted.
//   - "member-keys-delete": any non-empty set of a live member's keys
//     (member, election, ack, load), each deleted on its own, half the
//     time with the member cut off first.
//   - "tail-delete": the tail (.tail), half the time with the member whose
//     lease it is bound to (the newest joiner) cut off first.
//
// They are the last of StormOps, and dealt only with Config.Keys
// (rink-chaos -keys), as "zone-loss" only with zones: without, a seed
// deals the deck, in the order, that it dealt before they existed.

// keyOps are the storm's deletions of live members' keys.
var keyOps = []string{"election-delete", "member-keys-delete", "tail-delete"}

// sidecarOps are the operations on sidecar members (Config.Sidecar), last
// of StormOps: without -sidecar, the deck is the one dealt before them.
var sidecarOps = []string{"app-deaf"}

// keyOp reports whether kind is one of keyOps.
func keyOp(kind string) bool { return slices.Contains(keyOps, kind) }

// stormKeys are a member's keys in etcd now, by what they are.
type stormKeys struct {
	lease             int64    // the lease its member, ack or load key is bound to (0: none found)
	member, ack, load string   // ("": absent)
	elections         []string // its election keys: of its lease, or, with none found, the newest naming it
}

// keysOf reads a member's keys.
func (r *run) keysOf(ctx context.Context, name string) (stormKeys, error) {
	var k stormKeys
	for _, key := range []*string{&k.member, &k.ack, &k.load} {
		full := "rink/chaos/members/" + name
		switch key {
		case &k.ack:
			full = "rink/chaos/acks/" + name
		case &k.load:
			full = "rink/chaos/.load/" + name
		}
		resp, err := r.admin.Get(ctx, full)
		if err != nil {
			return k, err
		}
		if len(resp.Kvs) > 0 {
			*key = full
			if k.lease == 0 {
				k.lease = resp.Kvs[0].Lease
			}
		}
	}
	resp, err := r.admin.Get(ctx, "rink/chaos/election/", clientv3.WithPrefix())
	if err != nil {
		return k, err
	}
	var newest int64
	for _, kv := range resp.Kvs {
		switch {
		case k.lease != 0 && kv.Lease == k.lease:
			k.elections = append(k.elections, string(kv.Key))
		case k.lease == 0 && string(kv.Value) == name && kv.CreateRevision > newest:
			newest, k.elections = kv.CreateRevision, []string{string(kv.Key)}
		}
	}
	return k, nil
}

// deleteKeys deletes keys one by one (etcdctl del) and says what happened.
func (r *run) deleteKeys(ctx context.Context, keys []string) string {
	var out []string
	for _, key := range keys {
		resp, err := r.admin.Delete(ctx, key)
		short := strings.TrimPrefix(key, "rink/chaos/")
		if err != nil {
			out = append(out, fmt.Sprintf("%s failed: %v", short, err))
			continue
		}
		out = append(out, fmt.Sprintf("%s (%d deleted, revision %d, at %s)", short, resp.Deleted, resp.Header.Revision, secs(r.began, Now())))
	}
	if len(out) == 0 {
		return "nothing to delete"
	}
	return strings.Join(out, ", ")
}

// cutMaybe cuts p off etcd half the time, for as long as a partition
// lasts, and schedules the undo; it says so in a note. The caller holds
// st.mu.
func (r *run) cutMaybe(p *proc) string {
	if r.rng.IntN(2) != 0 {
		return ""
	}
	d := r.randDur(r.cfg.TTL/4, 2*r.cfg.TTL)
	st := r.st
	r.cut(p)
	r.later(d, func() { st.mu.Lock(); r.uncut(p); st.mu.Unlock() })
	return fmt.Sprintf(" cut for %v", d.Round(time.Millisecond))
}

// keyOpDo runs one of keyOps; false when it cannot run now.
func (r *run) keyOpDo(kind string) (bool, error) {
	st := r.st
	leader := ""
	if kind == "election-delete" {
		leader, _ = r.mapLeader()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var tailLease int64
	if kind == "tail-delete" {
		resp, err := r.admin.Get(ctx, "rink/chaos/.tail")
		if err != nil || len(resp.Kvs) == 0 {
			return false, nil
		}
		tailLease = resp.Kvs[0].Lease
	}
	st.mu.Lock()
	pool := r.live()
	if len(pool) == 0 {
		st.mu.Unlock()
		return false, nil
	}
	began := Now()
	var p *proc
	if kind != "tail-delete" {
		p = pool[r.rng.IntN(len(pool))]
	}
	var keys []string
	note := ""
	switch kind {
	case "election-delete":
		if r.rng.IntN(2) == 0 {
			if i := slices.IndexFunc(pool, func(q *proc) bool { return q.name == leader }); i >= 0 {
				p = pool[i]
			}
		}
		withMember := r.rng.IntN(2) == 0
		what := "its election key"
		if withMember {
			what = "its member key and its election key"
		}
		if p.name == leader {
			note = " (the leader)"
		}
		note += r.cutMaybe(p)
		st.mu.Unlock()
		k, err := r.keysOf(ctx, p.name)
		if err != nil {
			return false, nil
		}
		if withMember && k.member != "" {
			keys = append(keys, k.member)
		}
		keys = append(keys, k.elections...)
		note = fmt.Sprintf("%s%s; %s: ", p.base, note, what)
	case "member-keys-delete":
		set := 1 + r.rng.IntN(15) // bits: member, election, ack, load
		note = r.cutMaybe(p)
		st.mu.Unlock()
		k, err := r.keysOf(ctx, p.name)
		if err != nil {
			return false, nil
		}
		var names []string
		for i, ks := range [][]string{{k.member}, k.elections, {k.ack}, {k.load}} {
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
		note = fmt.Sprintf("%s%s; its %s keys: ", p.base, note, strings.Join(names, ", "))
	case "tail-delete":
		st.mu.Unlock()
		// The newest joiner: the live member whose keys are bound to the
		// tail's lease.
		var q *proc
		for _, c := range pool {
			if k, err := r.keysOf(ctx, c.name); err == nil && k.lease != 0 && k.lease == tailLease {
				q = c
				break
			}
		}
		if q != nil {
			st.mu.Lock()
			note = fmt.Sprintf("the tail's lease is %s's", q.base)
			if cut := r.cutMaybe(q); cut != "" {
				note += "," + cut
			}
			note += "; "
			st.mu.Unlock()
		}
		keys = []string{"rink/chaos/.tail"}
	default:
		st.mu.Unlock()
		return false, fmt.Errorf("unknown key operation %q", kind)
	}
	what := r.deleteKeys(ctx, keys)
	st.mu.Lock()
	defer st.mu.Unlock()
	r.opAt(kind, note+what, began)
	return true, nil
}
