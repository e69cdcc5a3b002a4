package wire

import (
	"errors"
	"fmt"
)

// ErrIncompatible: a map this member cannot use (package rink exports it,
// with its documentation).
var ErrIncompatible = errors.New("rink: incompatible rank map")

// ErrReplicaMismatch: a map with another number of replicas per slot
// than the member's (package rink exports it).
var ErrReplicaMismatch = fmt.Errorf("%w: replicas per slot differ", ErrIncompatible)

// MaxReplicas is the most replicas per slot a map may have (package rink
// exports it).
const MaxReplicas = 8

// Limits (package rink exports each, with its documentation).
const (
	MaxSlots      = 65536
	MaxCapacity   = 1e9
	MaxZoneLength = 63
)
