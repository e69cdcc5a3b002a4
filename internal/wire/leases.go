package wire

import (
	"encoding/json"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// wholeLeases returns, by name, the leases the whole map of a listing
// records: the map key's, when it holds a whole map, else the whole map
// written beside its record. ok is false when the listing has no whole
// map of that put (a record put back by hand), or it records no leases.
func WholeLeases(mapKV, snapKV *mvccpb.KeyValue) (map[string]int64, bool) {
	whole := mapKV.Value
	if _, ok := DecodeRecord(whole); ok {
		if snapKV == nil || snapKV.ModRevision != mapKV.ModRevision {
			return nil, false
		}
		whole = snapKV.Value
	}
	return LeasesIn(whole)
}

// leasesIn returns, by name, the leases the whole map whole records; ok
// is false when it does not decode or records none.
func LeasesIn(whole []byte) (map[string]int64, bool) {
	var m struct {
		Members MemberList `json:"members"`
		Leases  []int64    `json:"leases"`
	}
	if json.Unmarshal(whole, &m) != nil || len(m.Leases) != len(m.Members) || len(m.Members) == 0 {
		return nil, false
	}
	return ByName(m.Members, m.Leases), true
}

// byName returns the leases a map records (index by index with names),
// by name, leaving out those not known (0).
func ByName(names []string, leases []int64) map[string]int64 {
	out := make(map[string]int64, len(names))
	for i, name := range names {
		if l := leases[i]; l != 0 {
			out[name] = l
		}
	}
	return out
}

// mapLeased reports whether map m, applied from record rec (nil: a whole
// map), records leases.
func MapLeased(m *Map, rec *Record) bool {
	if rec != nil {
		return rec.Leased
	}
	return len(m.Leases) == len(m.Members) && len(m.Members) > 0
}

// baseLeases returns the leases a record planned from the applied map
// (members) changes from: the ones the book holds for them, or none when
// the map records none (leased false), so that the record names every
// lease (see leaseChanges).
func BaseLeases(members []string, book map[string]int64, leased bool) []int64 {
	if !leased {
		return nil
	}
	return AlignedLeases(members, book)
}

// alignedLeases returns the leases the book records for names, index by
// index (nil when the book is empty: a map that records none).
func AlignedLeases(names []string, recorded map[string]int64) []int64 {
	if len(recorded) == 0 {
		return nil
	}
	out := make([]int64, len(names))
	for i, name := range names {
		out[i] = recorded[name]
	}
	return out
}
