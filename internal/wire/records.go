package wire

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
)

// Change records (protocol 3, issue 25). Every map put of protocol 3 comes
// with a small record of what it changed, written in the same transaction:
// the slots that moved, the indexes whose member changed, who began or
// stopped waiting. A member follows the records and applies each to the
// map it holds; it reads a whole map only when it joins, misses a record,
// or meets a new lineage. So a change costs every member what it changed,
// not the whole map.
//
// This file is the pure part: diff computes the record that takes one map
// to the next, apply applies one. Nothing here does I/O.

// maxRecordMembers bounds the members a record may rank: a record that
// says more is refused, not allocated.
const maxRecordMembers = 1 << 22

// Record is the JSON value of the Record record key. Absent fields did not
// Record.
type Record struct {
	// Schema is the map's protocol (3 or later), and Change marks the
	// value as a record: a whole map has no such field.
	Schema  int   `json:"schema"`
	Change  bool  `json:"change"`
	Version int64 `json:"version"`
	// Leader is the new leader's name, when it changed.
	Leader *string `json:"leader,omitempty"`
	// Size is the number of ranked members, when it changed; Names sets
	// the member at each index (by decimal string) whose member changed.
	Size  *int              `json:"size,omitempty"`
	Names map[string]string `json:"names,omitempty"`
	// Moves lists pairs: a slot, and the index of its owner now.
	Moves []int `json:"moves,omitempty"`
	// Waiting replaces the waiting list whole, when Unwait and Wait cannot
	// say the change: Unwait names members no longer waiting, Wait those
	// waiting now that were not, appended in order.
	Waiting  *[]Waiter         `json:"waiting,omitempty"`
	Unwait   []string          `json:"unwait,omitempty"`
	Wait     []Waiter          `json:"wait,omitempty"`
	ByLoad   *bool             `json:"byLoad,omitempty"`
	Incoming *map[string][]int `json:"incoming,omitempty"`
	Leave    *[]string         `json:"leave,omitempty"`
	// Leases sets, by name, the lease a ranked member holds its slots
	// under (see rankMap.Leases), for the names whose lease changed or
	// that the record ranks anew. Only members that plan keep leases
	// (see leaseBook); a map derived from a record has none.
	Leases map[string]int64 `json:"leases,omitempty"`
	// Leased says that the map records leases (its leader is of a build
	// that records them, since issue 42). A record without it is of a
	// leader that does not: the map records none, and a member starts
	// its slots without waiting for its lease to be recorded, as with a
	// whole map that records none (see keepOwnLease).
	Leased bool `json:"leased,omitempty"`
	Transition
}

// Transition is what a put of the map key says of the put before it,
// beyond the map: From, the version of the map it was computed from, and
// Gone, the members that map ranked or listed as waiting which this one
// drops because they hold nothing any more (their keys are gone: a
// departure, or a lease that ended). A member that follows only the map
// and the floor (see view.go) learns departures from it. Records carry it
// as fields; a whole map written alone carries it beside the map's own
// fields (see withTransition). Builds before it leave both out.
type Transition struct {
	// View is the revision of the leader's view the map was planned from
	// (0: a leader that does not say). A process whose member key is newer
	// starts nothing in the map: the map gives its name's slots to an
	// earlier incarnation of the name, and a newer map may already give
	// them to others, whose heirs count the name as gone (see tryAcquire).
	// It comes first, so that transitionOf finds it before the others.
	View int64    `json:"view,omitempty"`
	From int64    `json:"from,omitempty"`
	Gone []string `json:"gone,omitempty"`
	// Incs names, for a member name whose key was replaced while an
	// earlier incarnation of the name may still act (an operator deleted
	// its key and a new process took the name: see checkOwnName), the
	// create revision of the key that holds the name now. A process of
	// that name with another key fences before it applies the map: it
	// follows its own key on a watch of its own, which may lag the map's.
	Incs map[string]int64 `json:"incs,omitempty"`
	// ByLeader says that a leader planned the map from its view of
	// revision View, with its ghosts: Incs names every replaced name it
	// knew of. A departing member's map (planned from its own view, which
	// may know no ghost) and builds before it leave it out. A newcomer
	// skips its check for an earlier incarnation of its name only on such
	// a map (see checkOwnName).
	ByLeader bool `json:"byLeader,omitempty"`
	// Quiet says that the map's lineage replaced another less than a TTL
	// ago (issue 42): a member whose first map it is (a process new to
	// the rink) starts nothing for a TTL, as a member that saw the
	// lineage change does (see quietStarts). The lineage it replaced may
	// rank a member, cut off, whose keys and lease nothing in etcd names
	// any more, and which acts until it fences (rink-sim -keys seed
	// 53692).
	Quiet bool `json:"quiet,omitempty"`
}

// transitionOf returns the transition a map key's value carries (zero:
// none, or one that does not decode).
func TransitionOf(value []byte) Transition {
	var t Transition
	// withTransition puts the fields last, and a record's are at its end
	// too (the embedded struct's fields are encoded last): parse from the
	// first of them, not the whole value (a whole map written alone is on
	// the path of a handover, and was parsed twice).
	i := bytes.LastIndex(value, []byte(`"from":`))
	if j := bytes.LastIndex(value, []byte(`"incs":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if j := bytes.LastIndex(value, []byte(`"view":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if j := bytes.LastIndex(value, []byte(`"byLeader":`)); i < 0 || j >= 0 && j < i {
		i = j
	}
	if i < 0 {
		return Transition{}
	}
	if json.Unmarshal(append([]byte{'{'}, value[i:]...), &t) == nil {
		return t
	}
	t = Transition{}
	if json.Unmarshal(value, &t) != nil {
		return Transition{}
	}
	return t
}

// withTransition returns a whole map's JSON with t's fields added (as
// is, when t says nothing).
func WithTransition(whole []byte, t Transition) []byte {
	if t.View == 0 && t.From == 0 && len(t.Incs) == 0 || len(whole) < 2 || whole[len(whole)-1] != '}' {
		return whole
	}
	tj, err := json.Marshal(t)
	if err != nil || len(tj) < 2 {
		return whole
	}
	out := make([]byte, 0, len(whole)+len(tj))
	out = append(out, whole[:len(whole)-1]...)
	out = append(out, ',')
	return append(out, tj[1:]...)
}

// diff returns the record that apply turns prev into next with. Both are
// maps of one rink (same schema and slots).
func Diff(prev, next *Map) Record {
	c := Record{Schema: next.Schema, Change: true, Version: next.Version}
	if prev.Leader != next.Leader {
		c.Leader = &next.Leader
	}
	if len(prev.Members) != len(next.Members) {
		n := len(next.Members)
		c.Size = &n
	}
	for i, name := range next.Members {
		if i >= len(prev.Members) || prev.Members[i] != name {
			if c.Names == nil {
				c.Names = map[string]string{}
			}
			c.Names[strconv.Itoa(i)] = name
		}
	}
	for s := range next.Table {
		if s >= len(prev.Table) || prev.Table[s] != next.Table[s] {
			c.Moves = append(c.Moves, s, int(next.Table[s]))
		}
	}
	if !slices.EqualFunc(prev.Waiting, next.Waiting, SameWaiter) {
		c.Unwait, c.Wait = waitDiff(prev.Waiting, next.Waiting)
		if c.Unwait == nil && c.Wait == nil {
			w := slices.Clone(next.Waiting)
			c.Waiting = &w
		}
	}
	if prev.ByLoad != next.ByLoad {
		c.ByLoad = &next.ByLoad
	}
	if !maps.EqualFunc(prev.Incoming, next.Incoming, slices.Equal) {
		in := next.Incoming
		if in == nil {
			in = map[string][]int{}
		}
		c.Incoming = &in
	}
	if !slices.Equal(prev.Leave, next.Leave) {
		l := next.Leave
		if l == nil {
			l = []string{}
		}
		c.Leave = &l
	}
	c.Leases = leaseChanges(prev, next)
	c.Leased = len(next.Leases) == len(next.Members) && len(next.Members) > 0
	return c
}

// leaseChanges returns, by name, the leases next records that prev does
// not (nil: none, or next records none). A name prev ranks at the same
// index costs a comparison; others, a lookup in prev's names, made once.
func leaseChanges(prev, next *Map) map[string]int64 {
	if len(next.Leases) != len(next.Members) {
		return nil
	}
	var out map[string]int64
	var ByName map[string]int64
	for i, name := range next.Members {
		l := next.Leases[i]
		var was int64
		switch {
		case len(prev.Leases) != len(prev.Members):
		case i < len(prev.Members) && prev.Members[i] == name:
			was = prev.Leases[i]
		default:
			if ByName == nil {
				ByName = make(map[string]int64, len(prev.Members))
				for j, n := range prev.Members {
					ByName[n] = prev.Leases[j]
				}
			}
			was = ByName[name]
		}
		if l != was {
			if out == nil {
				out = map[string]int64{}
			}
			out[name] = l
		}
	}
	return out
}

// waitDiff says how next's waiting list follows from prev's by dropping
// some members and appending others, or returns nil, nil when it does not.
func waitDiff(prev, next []Waiter) (unwait []string, wait []Waiter) {
	in := make(map[string]Waiter, len(next))
	for _, w := range next {
		in[w.Name] = w
	}
	var kept []Waiter
	for _, w := range prev {
		if n, ok := in[w.Name]; ok && n.Since.Equal(w.Since) {
			kept = append(kept, w)
		} else {
			unwait = append(unwait, w.Name)
		}
	}
	if len(kept) > len(next) || !slices.EqualFunc(kept, next[:len(kept)], SameWaiter) {
		return nil, nil
	}
	wait = next[len(kept):]
	if len(unwait) == 0 && len(wait) == 0 {
		return nil, nil
	}
	if unwait == nil {
		unwait = []string{}
	}
	return unwait, slices.Clone(wait)
}

func SameWaiter(a, b Waiter) bool { return a.Name == b.Name && a.Since.Equal(b.Since) }
