package rink

import (
	"maps"
	"slices"
	"strings"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// strayState is the stray keys this member saw.
type strayState struct {
	strays    strayLog            // stray keys already logged
	strayKeys map[string]strayKey // stray keys to delete (see sweepStrays), by key
}

// Stray keys. Only members write under a rink's prefix, but an operator's
// etcdctl can put anything there. A member key whose name no member can
// have (empty, with a '/', a space, a reserved segment...) is ignored by
// members, the leader, its acknowledgement aggregator and observers alike:
// ranking it would make a map every member refuses. So is a member key
// bound to no lease (see liveMember), which is also deleted. An election
// key that no campaign made (not named by the lease it is bound to, or
// bound to none) is ignored too, and deleted: the election would
// otherwise wait for it to go before electing anyone whose key is newer.
// The member whose own election key is the lowest (it leads, or is next)
// and the leader delete stray keys, each guarded by the revision it saw;
// a candidate deletes a stray election key just below its own as it
// campaigns (see runFor), which members that follow the narrow view (see
// view.go) do not see otherwise. Other keys
// under the prefix are never read.

// candidateName returns the member name an election key's value names, or
// "" when no member can have it.
func candidateName(value []byte) string { return wire.CandidateName(value) }

// maxStrayNotes bounds how many stray keys a strayLog remembers.
const maxStrayNotes = 1024

// strayLog logs each stray key once, however often it is written. Each
// goroutine that follows a rink's keys keeps its own.
type strayLog struct{ seen map[string]bool }

func (s *strayLog) note(log *zap.Logger, key, why string) {
	if s.seen[key] || len(s.seen) > maxStrayNotes {
		return
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[key] = true
	if len(s.seen) > maxStrayNotes {
		log.Warn("too many stray keys under the rink's prefix: no longer logging them")
		return
	}
	log.Warn("ignoring a stray key under the rink's prefix", zap.String("key", key), zap.String("why", why))
}

// strayKey is a stray key that the sweeper deletes: an election key no
// campaign made, or a member key bound to no lease.
type strayKey struct {
	rev   int64 // its mod revision
	tried bool  // a deletion at rev has been started
}

// sweepStrays deletes the stray keys of the view (see strayKey), if this member's
// own election key is the lowest (it leads, or is next), or it leads: one
// member does it, or two for a moment. Each deletion is guarded by the mod revision seen, and retried
// until it is done, the key has changed, or the incarnation ends.
func (r *Rink) sweepStrays() {
	st := &r.st
	// (The leader sweeps too: the member next in line may follow the
	// narrow view, which shows it no stray, while a stray election key
	// below it keeps it from being elected.)
	if st.inc == nil || len(st.strayKeys) == 0 || st.lead == nil && lowestKey(st.elect) != r.keys.ElectionKey(int64(st.inc.Lease)) {
		return
	}
	for _, key := range slices.Sorted(maps.Keys(st.strayKeys)) {
		s := st.strayKeys[key]
		if s.tried {
			continue
		}
		st.strayKeys[key] = strayKey{rev: s.rev, tried: true}
		r.fx().deleteStray(st.inc, key, s.rev)
	}
}

// Nested rinks. Rink a/x keeps its keys under rink a's prefix, and rink a
// follows its whole prefix (but the ack keys), so every member of a would
// receive every event of a/x. New refuses such a pair: nestingOps reads
// what tells whether a rink exists at each ancestor of name, and what lies
// under name's own prefix; nesting reads the answers.

// nestingOps returns the reads nesting needs.
func nestingOps(name string) []clientv3.Op {
	var ops []clientv3.Op
	segs := strings.Split(name, "/")
	for i := 1; i < len(segs); i++ {
		k := newKeys(strings.Join(segs[:i], "/"))
		ops = append(ops,
			clientv3.OpGet(k.Map(), clientv3.WithCountOnly()),
			clientv3.OpGet(k.Members(), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	// Under our own prefix, everything but our member, election and ack
	// keys (which grow with the rink): four ranges around them, a few keys
	// each (stray keys may crowd out a nested rink's, which is then missed).
	k := newKeys(name)
	end := clientv3.GetPrefixRangeEnd
	bounds := []string{k.Prefix, k.Acks(), end(k.Acks()), k.Election(), end(k.Election()), k.Members(), end(k.Members()), end(k.Prefix)}
	for i := 0; i < len(bounds); i += 2 {
		ops = append(ops, clientv3.OpGet(bounds[i], clientv3.WithRange(bounds[i+1]), clientv3.WithKeysOnly(), clientv3.WithLimit(nestingScan)))
	}
	return ops
}

// nestingScan bounds how many keys nesting reads in each range.
const nestingScan = 64

// nesting returns the name of a rink that name nests in or that nests in
// name, from the answers to nestingOps(name), or "".
func nesting(name string, resps []*etcdserverpb.ResponseOp) string {
	segs := strings.Split(name, "/")
	for i := 1; i < len(segs) && len(resps) >= 2; i++ {
		if resps[0].GetResponseRange().Count > 0 || resps[1].GetResponseRange().Count > 0 {
			return strings.Join(segs[:i], "/")
		}
		resps = resps[2:]
	}
	prefix := newKeys(name).Prefix
	var kvs []*mvccpb.KeyValue
	for _, r := range resps {
		kvs = append(kvs, r.GetResponseRange().Kvs...)
	}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), prefix)
		if first, _, _ := strings.Cut(rest, "/"); first == "members" || first == "election" || first == "acks" {
			continue // one of this rink's own keys (or a stray one among them)
		}
		// Another rink's keys: <inner>/map and <inner>/members/<member>.
		inner, isMap := strings.CutSuffix(rest, "/map")
		if !isMap {
			i := strings.Index(rest, "/members/")
			if i < 0 {
				continue // a stray key
			}
			inner = rest[:i]
		}
		return name + "/" + inner
	}
	return ""
}
