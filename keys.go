package rink

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ValidRinkName returns nil if name can be used as a rink's name, or an
// error wrapping ErrInvalidName that says why not.
func ValidRinkName(name string) error {
	if why := validName(name, true); why != "" {
		return fmt.Errorf("%w: rink name %q: %s", ErrInvalidName, name, why)
	}
	return nil
}

// ValidMemberName returns nil if name can be used as a member's name, or an
// error wrapping ErrInvalidName that says why not. Members ignore member
// keys whose names fail it (an operator's stray key).
func ValidMemberName(name string) error {
	if why := validName(name, false); why != "" {
		return fmt.Errorf("%w: member name %q: %s", ErrInvalidName, name, why)
	}
	return nil
}

// validName reports why a rink or member name is unusable, or "".
func validName(name string, slashes bool) string {
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

func defaultMemberName() string {
	host, err := os.Hostname()
	if err != nil || validName(host, false) != "" {
		host = "member"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// keys lays out a rink's keys in etcd.
type keys struct{ Prefix string }

func newKeys(name string) keys              { return keys{Prefix: "rink/" + name + "/"} }
func (k keys) Member(name string) string    { return k.Prefix + "members/" + name }
func (k keys) Members() string              { return k.Prefix + "members/" }
func (k keys) Map() string              { return k.Prefix + "map" }
func (k keys) Election() string             { return k.Prefix + "election/" }
func (k keys) MemberName(key string) string { return strings.TrimPrefix(key, k.Members()) }
func (k keys) IsMember(key string) bool     { return strings.HasPrefix(key, k.Members()) }
func (k keys) IsElection(key string) bool   { return strings.HasPrefix(key, k.Election()) }
func (k keys) IsMap(key string) bool        { return key == k.Map() }
func (k keys) Ack(name string) string       { return k.Prefix + "acks/" + name }
func (k keys) Acks() string                 { return k.Prefix + "acks/" }
func (k keys) AckName(key string) string    { return strings.TrimPrefix(key, k.Acks()) }
func (k keys) IsAck(key string) bool        { return strings.HasPrefix(key, k.Acks()) }
func (k keys) Floor() string                { return k.Prefix + "floor" }
func (k keys) IsFloor(key string) bool      { return key == k.Floor() }
func (k keys) Snapshot() string             { return k.Prefix + ".map" }
func (k keys) IsSnapshot(key string) bool   { return key == k.Snapshot() }
func (k keys) Load(name string) string      { return k.Prefix + ".load/" + name }
func (k keys) Loads() string                { return k.Prefix + ".load/" }
func (k keys) IsLoad(key string) bool       { return strings.HasPrefix(key, k.Loads()) }
func (k keys) LoadName(key string) string   { return strings.TrimPrefix(key, k.Loads()) }
func (k keys) Tail() string                 { return k.Prefix + ".tail" }

// Narrowed returns the key range a member follows in the narrow view (see
// view.go): the floor key and the map key, which sort next to each other.
func (k keys) Narrowed() (key, end string) {
	return k.Floor(), k.Map() + "\x00"
}

// Followed returns the key range a member follows: all of the rink's keys
// but the ack keys, which sort first and which only the leader reads.
func (k keys) Followed() (key, end string) {
	return clientv3.GetPrefixRangeEnd(k.Acks()), clientv3.GetPrefixRangeEnd(k.Prefix)
}
