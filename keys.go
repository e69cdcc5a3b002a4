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
type keys struct{ prefix string }

func newKeys(name string) keys              { return keys{prefix: "rink/" + name + "/"} }
func (k keys) member(name string) string    { return k.prefix + "members/" + name }
func (k keys) members() string              { return k.prefix + "members/" }
func (k keys) rankMap() string              { return k.prefix + "map" }
func (k keys) election() string             { return k.prefix + "election/" }
func (k keys) memberName(key string) string { return strings.TrimPrefix(key, k.members()) }
func (k keys) isMember(key string) bool     { return strings.HasPrefix(key, k.members()) }
func (k keys) isElection(key string) bool   { return strings.HasPrefix(key, k.election()) }
func (k keys) isMap(key string) bool        { return key == k.rankMap() }
func (k keys) ack(name string) string       { return k.prefix + "acks/" + name }
func (k keys) acks() string                 { return k.prefix + "acks/" }
func (k keys) ackName(key string) string    { return strings.TrimPrefix(key, k.acks()) }
func (k keys) isAck(key string) bool        { return strings.HasPrefix(key, k.acks()) }
func (k keys) floor() string                { return k.prefix + "floor" }
func (k keys) isFloor(key string) bool      { return key == k.floor() }
func (k keys) snapshot() string             { return k.prefix + ".map" }
func (k keys) isSnapshot(key string) bool   { return key == k.snapshot() }
func (k keys) load(name string) string      { return k.prefix + ".load/" + name }
func (k keys) loads() string                { return k.prefix + ".load/" }
func (k keys) isLoad(key string) bool       { return strings.HasPrefix(key, k.loads()) }
func (k keys) loadName(key string) string   { return strings.TrimPrefix(key, k.loads()) }
func (k keys) tail() string                 { return k.prefix + ".tail" }

// narrowed returns the key range a member follows in the narrow view (see
// view.go): the floor key and the map key, which sort next to each other.
func (k keys) narrowed() (key, end string) {
	return k.floor(), k.rankMap() + "\x00"
}

// followed returns the key range a member follows: all of the rink's keys
// but the ack keys, which sort first and which only the leader reads.
func (k keys) followed() (key, end string) {
	return clientv3.GetPrefixRangeEnd(k.acks()), clientv3.GetPrefixRangeEnd(k.prefix)
}
