package wire

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// maxTrackedRoles bounds the distinct role names a member counts per slot.
const MaxTrackedRoles = 1 << 20

// maxRate bounds a slot's rate in a summary: larger ones are dropped, so
// that no sum of them can overflow.
const MaxRate = 1e15

// LoadReport is a member's load summary: per slot it holds, the slot's
// rate, how long the member has held it, and its awaited roles. A slot it
// does not list in Slots it did not hold when it wrote the summary (or
// gained since its last load interval); Await lists the roles it awaits in
// each slot it owns but does not list there (a fenced member's, an heir's
// not started yet, those gained since the last interval), 0 included. A
// slot it lists in neither it did not own when it wrote the summary.
// Members of d85b50e and before write no Await.
type LoadReport struct {
	Slots []SlotLoad
	Await []SlotRoles
	// Unmeasured marks a summary written before the member's first load
	// interval (as it joins): it says which roles it awaits, and nothing
	// yet of its rates. Balancing by rates waits for measured ones.
	Unmeasured bool
}

// SlotRoles is how many distinct roles a member awaits in a slot.
type SlotRoles struct {
	Slot  int
	Roles int
}

type SlotLoad struct {
	Slot  int
	Rate  float64 // units per second, decayed over the load window
	Age   float64 // seconds held, as of the report (to a tenth)
	Roles int     // distinct roles awaited in the slot
}

// total returns the report's total rate and roles.
// Idle reports whether the report says no load: no rate, no roles held
// or awaited.
func (l LoadReport) Idle() bool {
	rate, roles := l.Total()
	return rate == 0 && roles == 0 && !slices.ContainsFunc(l.Await, func(a SlotRoles) bool { return a.Roles != 0 })
}

// idleAlike reports whether last and next both say no load, and are
// measured alike: while the leader balances by count, they differ only in
// the slots they list, which the leader does not use (it has the map).
// Rewritten anyway, it cost every member whose slots a change moved a
// write (issue 25). While it balances by load, a slot an idle member
// gained must show its load of 0 (the estimate keeps a figure its owner's
// summary does not list).
func IdleAlike(last, next LoadReport) bool {
	return last.Idle() && next.Idle() && last.Unmeasured == next.Unmeasured
}

func (l LoadReport) Total() (rate float64, roles int) {
	for _, s := range l.Slots {
		rate += s.Rate
		roles += s.Roles
	}
	return rate, roles
}

// Encode renders the report as JSON:
// {"v":1,"slots":[[slot,rate,age,roles],...],"unmeasured":true,"await":[[slot,roles],...]},
// with rates to 4 significant digits and ages in seconds, to a tenth;
// "await" is left out when empty, "unmeasured" when false (and members
// before them ignore them).
func (l LoadReport) Encode() []byte {
	b := []byte(`{"v":1,"slots":[`)
	for i, s := range l.Slots {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(s.Slot), 10)
		b = append(b, ',')
		b = strconv.AppendFloat(b, min(max(s.Rate, 0), MaxRate), 'g', 4, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, s.Age, 'f', -1, 64)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(s.Roles), 10)
		b = append(b, ']')
	}
	b = append(b, ']')
	if l.Unmeasured {
		b = append(b, `,"unmeasured":true`...)
	}
	if len(l.Await) > 0 {
		b = append(b, `,"await":[`...)
		for i, a := range l.Await {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(a.Slot), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(a.Roles), 10)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// decodeLoad parses a load key's value for a rink of slots slots. A value
// of another format version, or that does not decode, gives ok false;
// entries that make no sense (a slot out of range, a negative or infinite
// rate) are dropped.
func DecodeLoad(data []byte, slots int) (rep LoadReport, ok bool) {
	var w struct {
		V          int         `json:"v"`
		Slots      [][]float64 `json:"slots"`
		Await      [][]float64 `json:"await"`
		Unmeasured bool        `json:"unmeasured"`
	}
	if json.Unmarshal(data, &w) != nil || w.V != 1 {
		return LoadReport{}, false
	}
	seen := map[int]bool{}
	for _, e := range w.Slots {
		if len(e) < 4 {
			continue
		}
		s, rate, age, roles := e[0], e[1], e[2], e[3]
		if s != math.Trunc(s) || s < 0 || s >= float64(slots) || seen[int(s)] ||
			!(rate >= 0) || rate > MaxRate || !(age >= 0) || math.IsInf(age, 1) ||
			roles != math.Trunc(roles) || roles < 0 || roles > MaxTrackedRoles {
			continue
		}
		seen[int(s)] = true
		rep.Slots = append(rep.Slots, SlotLoad{Slot: int(s), Rate: rate, Age: age, Roles: int(roles)})
	}
	rep.Unmeasured = w.Unmeasured
	for _, e := range w.Await {
		if len(e) < 2 {
			continue
		}
		s, roles := e[0], e[1]
		if s != math.Trunc(s) || s < 0 || s >= float64(slots) || seen[int(s)] ||
			roles != math.Trunc(roles) || roles < 0 || roles > MaxTrackedRoles {
			continue
		}
		seen[int(s)] = true
		rep.Await = append(rep.Await, SlotRoles{Slot: int(s), Roles: int(roles)})
	}
	return rep, true
}

// withRoles returns rep with the awaited roles (roles gives a slot's):
// the slots rep lists count theirs, and every other slot in owned (the
// slots the map says are this member's, ascending) is listed in Await with
// its roles, 0 included.
func WithRoles(rep LoadReport, roles func(s int) int32, owned []int) LoadReport {
	out := LoadReport{Slots: slices.Clone(rep.Slots)}
	listed := make(map[int]bool, len(out.Slots))
	for i := range out.Slots {
		s := out.Slots[i].Slot
		listed[s] = true
		out.Slots[i].Roles = int(roles(s))
	}
	for _, s := range owned {
		if !listed[s] {
			out.Await = append(out.Await, SlotRoles{Slot: s, Roles: int(roles(s))})
		}
	}
	return out
}
