package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// errUnknownProtocol reports a map in a protocol this build does not speak.
// Unlike other unusable maps, such a map does not make a member leave: it
// holds nothing and keeps its member key, which tells the leader the
// protocols it speaks, until the leader proclaims one it speaks (a leader
// of a later release moves the rink down to the highest protocol every
// live member speaks; a leader of this build proclaims in its own).
var ErrUnknownProtocol = fmt.Errorf("%w: map in an unknown protocol", ErrIncompatible)

// speaks lists the protocols this build reads and writes, in rising order.
// A member refuses a map in any other (see decodeMap) rather than guess.
var Speaks = []int{2, SchemaVersion, SchemaReplicas}

// offered returns the protocols a leader configured with k replicas per
// slot may proclaim in: with one, those of earlier releases (so that the
// map stays as it was, byte for byte, and members of those releases can
// share the rink), with more, only schema 4 (earlier releases cannot hold
// a secondary, and would count none in the barrier).
func Offered(k int) []int {
	if k > 1 {
		return []int{SchemaReplicas}
	}
	return slices.DeleteFunc(slices.Clone(Speaks), func(p int) bool { return p >= SchemaReplicas })
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
	OwnValue     = MemberValue(1)
	OwnProtocols = Offered(1)
	onlyTwo      = []int{2}
)

// memberValue returns the value of the key of a member of this build with
// the given capacity and one replica per slot.
func MemberValue(capacity float64) string { return MemberValueOf(capacity, "", false, 1) }

// memberValueOf is memberValue for a member in zone (see WithZone) of a
// rink of k replicas per slot, saying also whether it is leaving with a
// warm-up. The protocols it names are those of the maps it can hold slots
// in (offered): with one replica those of earlier releases, so that its
// key reads as theirs, byte for byte; with more, protocol 4 alone.
func MemberValueOf(capacity float64, zone string, leaving bool, k int) string {
	m := MemberMeta{Protocols: Offered(k), Leaving: leaving, Zone: zone}
	if capacity != 1 {
		m.Capacity = capacity
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// leavingOf reports whether a member key's value says that its member is
// leaving.
func LeavingOf(value []byte) bool {
	if len(value) < len(`{"leaving":true}`) {
		return false
	}
	var m MemberMeta
	return json.Unmarshal(value, &m) == nil && m.Leaving
}

// zoneOf returns the zone a member key's value names, or "" for none (or
// one that is not a valid zone: see WithZone).
func ZoneOf(value []byte) string {
	if !bytes.Contains(value, []byte(`"zone"`)) {
		return ""
	}
	var m struct {
		Zone string `json:"zone"`
	}
	if json.Unmarshal(value, &m) != nil || ValidZone(m.Zone) != "" {
		return ""
	}
	return m.Zone
}

// protocolsOf returns the protocols a member key's value says its member
// speaks, in rising order.
func ProtocolsOf(value []byte) []int {
	p, _ := MetaOf(value)
	return p
}

// metaOf returns the protocols a member key's value says its member speaks,
// in rising order, and its capacity: 1 when the value names none, or one
// that is not positive.
func MetaOf(value []byte) (protocols []int, capacity float64) {
	switch string(value) { // the common cases, shared: a view holds one per member
	case "{}":
		return onlyTwo, 1
	case OwnValue:
		return OwnProtocols, 1
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
		return []int{2}, CapacityOr1(c)
	}
	out := slices.Clone(m.Protocols)
	slices.Sort(out)
	return slices.Compact(out), CapacityOr1(c)
}

// validZone returns why zone is not a usable zone name, or "".
func ValidZone(zone string) string {
	if zone == "" {
		return "empty"
	}
	if len(zone) > MaxZoneLength {
		return fmt.Sprintf("longer than %d bytes", MaxZoneLength)
	}
	for i := 0; i < len(zone); i++ {
		if c := zone[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return "want printable ASCII without spaces, quotes or backslashes"
		}
	}
	return ""
}
