package rink

import (
	"errors"
	"slices"

	"github.com/rink-go/rink/internal/wire"
)

// waitsOut reports whether err is an unusable map that a member waits out
// without leaving (see errUnknownProtocol).
func waitsOut(err error) bool { return errors.Is(err, wire.ErrUnknownProtocol) }

// Protocol versions. A rink's protocol is the schema of its map (see
// rankMap.Schema); what the other keys hold follows from it. Each member
// states in its member key's value the protocols it speaks, and the leader
// proclaims every map in the highest protocol that every live member
// speaks, so that members of two releases share a rink during a rolling
// upgrade or a rollback: the rink stays on the older protocol until the
// last member that speaks only that one has gone, and then moves up with
// one map write that moves no role.
//
// Members of 636d84c and before write "{}", which means schema 2 only. So
// does a value that does not decode, or names no protocol.

// ownMemberValue is the value of this member's key (see memberMeta).
func (r *Rink) ownMemberValue(leaving bool) string {
	return wire.MemberValueOf(r.opts.capacity, r.opts.zone, leaving, r.opts.replicas)
}

// speakers returns the names of live (in order) whose members speak
// proto. The others would refuse a map in it, and so never hold what it
// gives them: the leader leaves them unranked (issue 22).
func speakers(live []string, members map[string]memberInfo, proto int) []string {
	return slices.DeleteFunc(live, func(name string) bool { return !slices.Contains(members[name].protocols, proto) })
}

// rinkProtocol returns the protocol the leader, configured with k replicas
// per slot, proclaims in: the highest of those it offers (see offered)
// that every member listed speaks. When some member shares none with it,
// it returns its highest, and those members' names: they would refuse the
// map, so they are not ranked (see speakers) until a leader that speaks
// their protocol proclaims one.
func rinkProtocol(members map[string]memberInfo, k int) (proto int, strangers []string) {
	common := wire.Offered(k)
	for name, m := range members {
		shared := slices.DeleteFunc(slices.Clone(common), func(p int) bool { return !slices.Contains(m.protocols, p) })
		if len(shared) == 0 {
			strangers = append(strangers, name)
			continue
		}
		common = shared
	}
	slices.Sort(strangers)
	return common[len(common)-1], strangers
}
