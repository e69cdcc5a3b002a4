package wire

import "encoding/json"

// maxLagging bounds how many members the floor names one by one.
const MaxLagging = 64

// AckValue is the JSON value of an ack key.
type AckValue struct {
	// Ack is the version of the newest map this member has applied, in the
	// map lineage Lineage (the map key's create revision).
	Ack     int64 `json:"ack"`
	Lineage int64 `json:"lineage"`
	// Seq names that map exactly: the etcd version of the map key when it
	// held the map (the count of puts since the key was created). Versions
	// can repeat when somebody writes the key by hand; seqs cannot. The
	// member holds no slot that the maps from Seq on do not give it.
	// Members of map schema 2 before seqs (commit 636d84c) leave it out.
	Seq int64 `json:"seq,omitempty"`
	// Warm is the version of the newest map announcing slots to this
	// member (see warmup.go) that it has warmed up for.
	Warm int64 `json:"warm,omitempty"`
}

// AckFloor is the JSON value of the floor key. Its first fields count in
// map versions, for members that predate seqs; the Seq fields carry the
// same bounds in seqs, and members use them wherever they are known.
type AckFloor struct {
	Lineage  int64            `json:"lineage"`
	Version  int64            `json:"version"` // the map version of the leader's view
	Floor    int64            `json:"floor"`   // 0: some live member's acknowledgement is unknown
	Complete bool             `json:"complete,omitempty"`
	Lagging  map[string]int64 `json:"lagging,omitempty"` // 0: unknown

	Seq         int64            `json:"seq,omitempty"` // the map's seq in the leader's view (0: a floor without seqs)
	SeqFloor    int64            `json:"seqfloor,omitempty"`
	SeqComplete bool             `json:"seqcomplete,omitempty"`
	SeqLagging  map[string]int64 `json:"seqlagging,omitempty"`

	// What the leader plans (see setRest). Leaders of d85b50e and before
	// leave these out: their rinks never say they are at rest.
	//
	// Rest, when it equals Version, says that the leader plans no move
	// after that map: nobody waits to be ranked, no move is announced
	// (WithWarmup) and no load round would move a slot. With every
	// member's acknowledgement of the map (Floor at Version), the rink is
	// at rest (see Rank.Settled): nothing moves until the membership, the
	// awaited roles or the measured load change.
	Rest int64 `json:"rest,omitempty"`
	// Round says that a load round would move slots.
	Round bool `json:"round,omitempty"`
	// Imbalance is the leader's estimate of the most loaded member's load
	// per capacity over the mean, to 0.01, and Tolerance its
	// WithImbalanceTolerance, when it balances by load (0: it does not).
	Imbalance float64 `json:"imbalance,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`

	// Still says that this leader counts a member as having acknowledged
	// the map of Seq when no map since its acknowledgement changed its
	// slots or the slots announced to it (see still.go), and Base is the
	// first map of the lineage its view saw: it knows the changes after
	// it only. Leaders of d85b50e and before leave both out, and members
	// then acknowledge every map.
	Still bool  `json:"still,omitempty"`
	Base  int64 `json:"base,omitempty"`

	// Ghosts counts the members the leader knows may still act while
	// their keys are gone (see ghosts.go): members that follow the narrow
	// view, which see no member key go, start nothing while it is above
	// 0, as the leader's own handover check does (see view.go).
	//
	// From issue 42 it counts only the ghosts whose bounds the floor does
	// not give: a ghost whose acknowledgement the leader saw, written
	// under the ghost's own lease, is in Covered instead, and the floor's
	// bound for its name is at most that acknowledgement, so that it
	// holds up only the slots it may hold (see aggregation.coverGhosts).
	Ghosts int `json:"ghosts,omitempty"`
	// Covered lists the leases of the ghosts the floor's bounds cover.
	// A member that knows ghosts of its own (the wide view) lets them
	// hold up only their own slots when the floor covers every one.
	Covered []int64 `json:"covered,omitempty"`
	// Leader names the leader that wrote the floor: members that follow
	// the narrow view learn the leader from it (see Rank.Leader).
	Leader string `json:"leader,omitempty"`
	// Unreported names, when the leader balances by load, the ranked
	// members with a live key whose load summary it does not have (an
	// operator deleted the key, a restore erased it): each writes its
	// summary again when it sees its name here, since it does not follow
	// its load key itself. Leaders before it leave it out; members before
	// it ignore it.
	Unreported []string `json:"unreported,omitempty"`
}

// Settled reports whether the floor says that the rink is at rest with
// the map of seq seq and version version, in lineage lineage: the leader
// plans no move after it, and every live member has acknowledged it.
func (f *AckFloor) Settled(lineage, version, seq int64) bool {
	if f.Lineage != lineage || f.Version != version || f.Rest != version || version < 1 || f.Floor < version {
		return false
	}
	return f.Seq == 0 || f.Seq == seq && f.SeqFloor >= seq
}

// decodeFloor decodes a floor key's value; one that does not decode says
// nothing.
func DecodeFloor(value []byte) AckFloor {
	if f, ok := ParseFloor(value); ok {
		return f
	}
	var f AckFloor
	if json.Unmarshal(value, &f) != nil {
		return AckFloor{}
	}
	return f
}

// Of returns a lower bound Of a member's acknowledged map version; below
// 1 it is unknown.
func (f *AckFloor) Of(name string) int64 {
	return boundIn(name, f.Version, f.Floor, f.Complete, f.Lagging)
}

// SeqOf returns a lower bound of a member's acknowledged seq; below 1 it
// is unknown.
func (f *AckFloor) SeqOf(name string) int64 {
	if f.Seq < 1 {
		return 0
	}
	return boundIn(name, f.Seq, f.SeqFloor, f.SeqComplete, f.SeqLagging)
}

func boundIn(name string, top, floor int64, complete bool, lagging map[string]int64) int64 {
	if !complete {
		return floor
	}
	if a, ok := lagging[name]; ok {
		return a
	}
	return top
}
