package rink

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/rink-go/rink/internal/wire"
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
func validName(name string, slashes bool) string { return wire.ValidName(name, slashes) }

func defaultMemberName() string {
	host, err := os.Hostname()
	if err != nil || validName(host, false) != "" {
		host = "member"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// keys lays out a rink's keys in etcd (see wire.Keys).
type keys = wire.Keys

func newKeys(name string) keys { return wire.NewKeys(name) }
