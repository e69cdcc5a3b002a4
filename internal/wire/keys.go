package wire

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ValidName reports why a rink's name (slashes true) or a member's name
// is unusable, or "" when it is usable.
func ValidName(name string, slashes bool) string {
	switch {
	case name == "":
		return "empty"
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return "leading or trailing '/'"
	case !slashes && strings.Contains(name, "/"):
		return "contains '/'"
	}
	for _, c := range name {
		if unicode.IsSpace(c) || unicode.IsControl(c) || c == unicode.ReplacementChar {
			return fmt.Sprintf("contains %q", c)
		}
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return "contains '//'"
		case "members", "election", "map", "acks", "floor", ".load", ".map", ".tail":
			// rink/X/members/... would be rink X's own member keys.
			return fmt.Sprintf("contains the reserved segment %q", seg)
		}
	}
	return ""
}

// Keys lays out a rink's keys in etcd. Every key of rink X is under
// Prefix, "rink/X/"; they sort as acks/, election/, floor, map, members/,
// then the dotted ones (.load/, .map, .tail).
type Keys struct{ Prefix string }

// NewKeys returns the layout of the rink called name.
func NewKeys(name string) Keys { return Keys{Prefix: "rink/" + name + "/"} }

func (k Keys) Member(name string) string    { return k.Prefix + "members/" + name }
func (k Keys) Members() string              { return k.Prefix + "members/" }
func (k Keys) Map() string                  { return k.Prefix + "map" }
func (k Keys) Election() string             { return k.Prefix + "election/" }
func (k Keys) MemberName(key string) string { return strings.TrimPrefix(key, k.Members()) }
func (k Keys) IsMember(key string) bool     { return strings.HasPrefix(key, k.Members()) }
func (k Keys) IsElection(key string) bool   { return strings.HasPrefix(key, k.Election()) }
func (k Keys) IsMap(key string) bool        { return key == k.Map() }
func (k Keys) Ack(name string) string       { return k.Prefix + "acks/" + name }
func (k Keys) Acks() string                 { return k.Prefix + "acks/" }
func (k Keys) AckName(key string) string    { return strings.TrimPrefix(key, k.Acks()) }
func (k Keys) IsAck(key string) bool        { return strings.HasPrefix(key, k.Acks()) }
func (k Keys) Floor() string                { return k.Prefix + "floor" }
func (k Keys) IsFloor(key string) bool      { return key == k.Floor() }
func (k Keys) Snapshot() string             { return k.Prefix + ".map" }
func (k Keys) IsSnapshot(key string) bool   { return key == k.Snapshot() }
func (k Keys) Load(name string) string      { return k.Prefix + ".load/" + name }
func (k Keys) Loads() string                { return k.Prefix + ".load/" }
func (k Keys) IsLoad(key string) bool       { return strings.HasPrefix(key, k.Loads()) }
func (k Keys) LoadName(key string) string   { return strings.TrimPrefix(key, k.Loads()) }
func (k Keys) Tail() string                 { return k.Prefix + ".tail" }

// Narrowed returns the key range a member follows in the narrow view:
// the floor key and the map key, which sort next to each other.
func (k Keys) Narrowed() (key, end string) {
	return k.Floor(), k.Map() + "\x00"
}

// Followed returns the key range a member follows: all of the rink's keys
// but the ack keys, which sort first and which only the leader reads.
func (k Keys) Followed() (key, end string) {
	return PrefixEnd(k.Acks()), PrefixEnd(k.Prefix)
}

// ValidMember returns the member name of a member key, and whether a
// member can have that name.
func (k Keys) ValidMember(key string) (string, bool) {
	name := k.MemberName(key)
	return name, ValidName(name, false) == ""
}

// LiveMember returns the member name of a member key, and whether it
// names a member: a name a member can have, on a key bound to a lease.
// Every member's key is bound to its lease; one bound to none was put by
// hand (etcdctl put <rink>/members/zz '{}'): a stray.
func (k Keys) LiveMember(kv *mvccpb.KeyValue) (string, bool) {
	name, ok := k.ValidMember(string(kv.Key))
	return name, ok && kv.Lease != 0
}

// ElectionKey returns the election key that a campaign on lease creates.
func (k Keys) ElectionKey(lease int64) string {
	return k.Election() + strconv.FormatInt(lease, 16) // (as %x: checked against every election key)
}

// IsCandidate reports whether an election key was made by a campaign: it
// is named by the lease it is bound to.
func (k Keys) IsCandidate(kv *mvccpb.KeyValue) bool {
	return kv.Lease != 0 && string(kv.Key) == k.ElectionKey(kv.Lease)
}

// CandidateName returns the member name an election key's value names, or
// "" when no member can have it.
func CandidateName(value []byte) string {
	if ValidName(string(value), false) != "" {
		return ""
	}
	return string(value)
}
