package rink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// waitsOut reports whether err is an unusable map that a member waits out
// without leaving (see errUnknownProtocol).
func waitsOut(err error) bool { return errors.Is(err, errUnknownProtocol) }

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

// errUnknownProtocol reports a map in a protocol this build does not speak.
// Unlike other unusable maps, such a map does not make a member leave: it
// holds nothing and keeps its member key, which tells the leader the
// protocols it speaks, until the leader proclaims one it speaks (a leader
// of a later release moves the rink down to the highest protocol every
// live member speaks; a leader of this build proclaims in its own).
var errUnknownProtocol = fmt.Errorf("%w: map in an unknown protocol", ErrIncompatible)

// speaks lists the protocols this build reads and writes, in rising order.
// A member refuses a map in any other (see decodeMap) rather than guess.
var speaks = []int{2, schemaVersion, schemaReplicas}

// offered returns the protocols a leader configured with k replicas per
// slot may proclaim in: with one, those of earlier releases (so that the
// map stays as it was, byte for byte, and members of those releases can
// share the rink), with more, only schema 4 (earlier releases cannot hold
// a secondary, and would count none in the barrier).
func offered(k int) []int {
	if k > 1 {
		return []int{schemaReplicas}
	}
	return slices.DeleteFunc(slices.Clone(speaks), func(p int) bool { return p >= schemaReplicas })
}

// MemberMeta is the JSON value of a member key. Later releases may add
// fields; members ignore the ones they do not know.
type MemberMeta struct {
	Protocols []int `json:"protocols,omitempty"`
	// Capacity is the member's capacity (see WithCapacity), left out when
	// it is 1. Members of 636d84c and before neither write nor read it.
	Capacity float64 `json:"capacity,omitempty"`
	// Leaving says that the member is shutting down with a warm-up (see
	// warmup.go): the leader moves its slots to heirs, warming them up
	// first, and ranks it no more.
	Leaving bool `json:"leaving,omitempty"`
	// Zone is the member's failure domain (see WithZone), left out when
	// it has none. Members of earlier releases neither write nor read it.
	Zone string `json:"zone,omitempty"`
}

// ownValue is memberValue(1) as this build starts, ownProtocols what it
// stands for, and onlyTwo what "{}" stands for; metaOf shares them.
// (Tests that change speaks do not change these.)
var (
	ownValue     = memberValue(1)
	ownProtocols = offered(1)
	onlyTwo      = []int{2}
)

// memberValue returns the value of the key of a member of this build with
// the given capacity and one replica per slot.
func memberValue(capacity float64) string { return memberValueOf(capacity, "", false, 1) }

// memberValueOf is memberValue for a member in zone (see WithZone) of a
// rink of k replicas per slot, saying also whether it is leaving with a
// warm-up. The protocols it names are those of the maps it can hold slots
// in (offered): with one replica those of earlier releases, so that its
// key reads as theirs, byte for byte; with more, protocol 4 alone.
func memberValueOf(capacity float64, zone string, leaving bool, k int) string {
	m := MemberMeta{Protocols: offered(k), Leaving: leaving, Zone: zone}
	if capacity != 1 {
		m.Capacity = capacity
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// leavingOf reports whether a member key's value says that its member is
// leaving.
func leavingOf(value []byte) bool {
	if len(value) < len(`{"leaving":true}`) {
		return false
	}
	var m MemberMeta
	return json.Unmarshal(value, &m) == nil && m.Leaving
}

// ownMemberValue is the value of this member's key (see memberMeta).
func (r *Rink) ownMemberValue(leaving bool) string {
	return memberValueOf(r.opts.capacity, r.opts.zone, leaving, r.opts.replicas)
}

// zoneOf returns the zone a member key's value names, or "" for none (or
// one that is not a valid zone: see WithZone).
func zoneOf(value []byte) string {
	if !bytes.Contains(value, []byte(`"zone"`)) {
		return ""
	}
	var m struct {
		Zone string `json:"zone"`
	}
	if json.Unmarshal(value, &m) != nil || validZone(m.Zone) != "" {
		return ""
	}
	return m.Zone
}

// protocolsOf returns the protocols a member key's value says its member
// speaks, in rising order.
func protocolsOf(value []byte) []int {
	p, _ := metaOf(value)
	return p
}

// metaOf returns the protocols a member key's value says its member speaks,
// in rising order, and its capacity: 1 when the value names none, or one
// that is not positive.
func metaOf(value []byte) (protocols []int, capacity float64) {
	switch string(value) { // the common cases, shared: a view holds one per member
	case "{}":
		return onlyTwo, 1
	case ownValue:
		return ownProtocols, 1
	}
	// The capacity is read apart from the protocols, so that a capacity
	// this build cannot read does not cost the protocols (members of
	// 636d84c do not read it at all).
	var m struct {
		Protocols []int           `json:"protocols"`
		Capacity  json.RawMessage `json:"capacity"`
	}
	if json.Unmarshal(value, &m) != nil {
		return []int{2}, 1
	}
	var c float64
	if json.Unmarshal(m.Capacity, &c) != nil || c > MaxCapacity {
		c = 1
	}
	if len(m.Protocols) == 0 {
		return []int{2}, capacityOr1(c)
	}
	out := slices.Clone(m.Protocols)
	slices.Sort(out)
	return slices.Compact(out), capacityOr1(c)
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
	common := offered(k)
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
