package wire

import (
	"bytes"
	"strconv"
)

// floorFields are the JSON names of ackFloor's fields, which encoding/json
// matches without regard to case.
var floorFields = []string{"lineage", "version", "floor", "complete", "lagging", "seq", "seqfloor", "seqcomplete",
	"seqlagging", "rest", "round", "imbalance", "tolerance", "still", "base", "ghosts", "leader", "covered", "unreported"}

// parseFloor decodes a floor in the form leaders write it: an object of
// integers, booleans, numbers, a plain ASCII string and objects of plain
// ASCII names to integers (the lagging members), and fields of other
// names whose values are numbers, literals, plain strings or flat arrays
// of them, which it skips. It returns ok false for anything else (nulls,
// escapes, nesting, a key twice, a key that only case tells from a
// field), which the caller decodes with encoding/json: every member
// decodes every floor, and the generic decoder was 8 % of a 10,000-member
// rink's CPU while it formed (issue 25). When ok, f is what encoding/json
// decodes.
func ParseFloor(b []byte) (f AckFloor, ok bool) {
	ok = eachField(b, floorFields, func(key string, field int, start int) (end int, ok bool) {
		switch key {
		case "lagging", "seqlagging":
			lag, end, ok := parseLagging(b, start)
			if key == "lagging" {
				f.Lagging = lag
			} else {
				f.SeqLagging = lag
			}
			return end, ok
		}
		if end, ok = flatValueEnd(b, start); !ok {
			return 0, false
		}
		return end, field < 0 || f.set(key, b[start:end])
	})
	if !ok {
		return AckFloor{}, false
	}
	return f, true
}

// eachField walks the JSON object b in the form leaders write: keys that
// are plain ASCII strings (see plainString), each once. For each key it
// calls value with the key, its index in fields (-1: none of them) and
// where its value starts; value returns where the value ends, and false
// to give up. eachField reports whether the walk reached the object's
// end with nothing after it. It gives up on a key twice among fields, or
// a key that only case tells from one of them: encoding/json would set
// that field.
func eachField(b []byte, fields []string, value func(key string, field int, start int) (end int, ok bool)) bool {
	var seen uint64 // (bit k: fields[k] was set)
	end, ok := eachEntry(b, skipSpace(b, 0), func(key string, start int) (int, bool) {
		field := -1
		for k, name := range fields {
			if name == key {
				field = k
			} else if len(name) == len(key) && bytes.EqualFold([]byte(name), []byte(key)) {
				return 0, false
			}
		}
		if field >= 0 {
			if seen&(1<<field) != 0 {
				return 0, false
			}
			seen |= 1 << field
		}
		return value(key, field, start)
	})
	return ok && skipSpace(b, end) == len(b)
}

// set sets the scalar field named key to the JSON value v, and reports
// whether v is of the field's type (a null is not: see parseFloor).
func (f *AckFloor) set(key string, v []byte) bool {
	var ok bool
	switch key {
	case "lineage":
		f.Lineage, ok = plainInt(v)
	case "version":
		f.Version, ok = plainInt(v)
	case "floor":
		f.Floor, ok = plainInt(v)
	case "seq":
		f.Seq, ok = plainInt(v)
	case "seqfloor":
		f.SeqFloor, ok = plainInt(v)
	case "rest":
		f.Rest, ok = plainInt(v)
	case "base":
		f.Base, ok = plainInt(v)
	case "ghosts":
		var n int64
		n, ok = plainInt(v)
		f.Ghosts = int(n)
		ok = ok && int64(f.Ghosts) == n
	case "complete":
		f.Complete, ok = plainBool(v)
	case "seqcomplete":
		f.SeqComplete, ok = plainBool(v)
	case "round":
		f.Round, ok = plainBool(v)
	case "still":
		f.Still, ok = plainBool(v)
	case "imbalance":
		f.Imbalance, ok = plainFloat(v)
	case "tolerance":
		f.Tolerance, ok = plainFloat(v)
	case "leader":
		var e int
		f.Leader, e, ok = plainString(v, 0)
		ok = ok && e == len(v)
	case "covered":
		f.Covered, ok = parseLeases(v)
		ok = ok && f.Covered != nil
	case "unreported":
		f.Unreported, ok = ParseNames(v)
		ok = ok && f.Unreported != nil
	}
	return ok
}

// parseLagging reads the JSON object at b[i:] when it maps plain ASCII
// names (see plainString) to integers, and returns it (empty, not nil, for
// {}) and the index after it.
func parseLagging(b []byte, i int) (lag map[string]int64, end int, ok bool) {
	lag = map[string]int64{}
	end, ok = eachEntry(b, i, func(name string, start int) (int, bool) {
		e, ok := numberEnd(b, start)
		if !ok {
			return 0, false
		}
		n, ok := plainInt(b[start:e])
		lag[name] = n // (a name twice: the last, as encoding/json)
		return e, ok
	})
	if !ok {
		return nil, 0, false
	}
	return lag, end, true
}

// parseStrings reads the JSON object at b[i:] when it maps plain ASCII
// strings to plain ASCII strings, and returns it (empty, not nil, for {})
// and the index after it.
func parseStrings(b []byte, i int) (m map[string]string, end int, ok bool) {
	m = map[string]string{}
	end, ok = eachEntry(b, i, func(name string, start int) (int, bool) {
		s, e, ok := plainString(b, start)
		m[name] = s
		return e, ok
	})
	if !ok {
		return nil, 0, false
	}
	return m, end, true
}

// eachEntry walks the JSON object at b[i:] whose keys are plain ASCII
// strings, calling value with each key and where its value starts; value
// returns where it ends, or false to give up. It returns the index after
// the object.
func eachEntry(b []byte, i int, value func(key string, start int) (end int, ok bool)) (end int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		e, ok := value(key, skipSpace(b, i+1))
		if !ok {
			return 0, false
		}
		i = skipSpace(b, e)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// plainBool parses v as a JSON true or false.
func plainBool(v []byte) (bool, bool) {
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// plainFloat parses v as a JSON number that fits a float64, as
// encoding/json does.
func plainFloat(v []byte) (float64, bool) {
	if e, ok := numberEnd(v, 0); !ok || e != len(v) {
		return 0, false
	}
	x, err := strconv.ParseFloat(string(v), 64)
	return x, err == nil
}

// recordFields are the JSON names of change's fields, the transition's
// included, which encoding/json matches without regard to case.
var recordFields = []string{"schema", "change", "version", "leader", "size", "names", "moves", "waiting", "unwait", "wait",
	"byLoad", "incoming", "leave", "view", "from", "gone", "incs", "byLeader", "leases", "quiet", "leased"}

// parseRecord decodes a change record in the form leaders write it, as
// parseFloor does a floor: the waiting list, the announcements and the
// leavers (fields of structures and nested lists), nulls and anything
// unusual go to encoding/json (ok false). Every member decodes every
// record. When ok, c is what encoding/json decodes.
func ParseRecord(b []byte) (c Record, ok bool) {
	ok = eachField(b, recordFields, func(key string, field int, start int) (end int, ok bool) {
		switch key {
		case "names":
			c.Names, end, ok = parseStrings(b, start)
			return end, ok
		case "incs":
			c.Incs, end, ok = parseLagging(b, start)
			return end, ok
		case "leases":
			c.Leases, end, ok = parseLagging(b, start)
			return end, ok
		case "waiting", "wait", "incoming", "leave":
			return 0, false
		}
		if end, ok = flatValueEnd(b, start); !ok {
			return 0, false
		}
		v := b[start:end]
		if field < 0 || string(v) == "null" {
			return end, field < 0 // (a null: encoding/json's)
		}
		switch key {
		case "schema", "size":
			n, ok := plainInt(v)
			if !ok || int64(int(n)) != n {
				return 0, false
			}
			if key == "schema" {
				c.Schema = int(n)
			} else {
				size := int(n)
				c.Size = &size
			}
		case "version":
			c.Version, ok = plainInt(v)
		case "view":
			c.View, ok = plainInt(v)
		case "from":
			c.From, ok = plainInt(v)
		case "change":
			c.Change, ok = plainBool(v)
		case "byLeader":
			c.ByLeader, ok = plainBool(v)
		case "quiet":
			c.Quiet, ok = plainBool(v)
		case "leased":
			c.Leased, ok = plainBool(v)
		case "byLoad":
			var by bool
			by, ok = plainBool(v)
			c.ByLoad = &by
		case "leader":
			var leader string
			var e int
			leader, e, ok = plainString(v, 0)
			c.Leader, ok = &leader, ok && e == len(v)
		case "moves":
			var t []int32
			if t, ok = ParseTable(v); ok {
				c.Moves = make([]int, len(t))
				for i, n := range t {
					c.Moves[i] = int(n)
				}
			}
		case "unwait", "gone":
			var names []string
			names, ok = ParseNames(v)
			if key == "unwait" {
				c.Unwait = names
			} else {
				c.Gone = names
			}
		}
		return end, ok
	})
	if !ok {
		return Record{}, false
	}
	return c, true
}
