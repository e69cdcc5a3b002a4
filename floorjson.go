package rink

import (
	"bytes"
	"strconv"
)

// floorFields are the JSON names of ackFloor's fields, which encoding/json
// matches without regard to case.
var floorFields = []string{"lineage", "version", "floor", "complete", "lagging", "seq", "seqfloor", "seqcomplete",
	"seqlagging", "rest", "round", "imbalance", "tolerance", "still", "base", "ghosts", "leader"}

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
func parseFloor(b []byte) (f ackFloor, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return ackFloor{}, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return f, skipSpace(b, i+1) == len(b)
	}
	var seen uint32 // (bit k: floorFields[k] was set)
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return ackFloor{}, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return ackFloor{}, false
		}
		start := skipSpace(b, i+1)
		field := -1
		for k, name := range floorFields {
			if name == key {
				field = k
			} else if len(name) == len(key) && bytes.EqualFold([]byte(name), []byte(key)) {
				return ackFloor{}, false // (encoding/json would set the field)
			}
		}
		var end int
		if field >= 0 {
			if seen&(1<<field) != 0 {
				return ackFloor{}, false
			}
			seen |= 1 << field
		}
		switch key {
		case "lagging", "seqlagging":
			lag, e, ok := parseLagging(b, start)
			if !ok {
				return ackFloor{}, false
			}
			if key == "lagging" {
				f.Lagging = lag
			} else {
				f.SeqLagging = lag
			}
			end = e
		default:
			if end, ok = flatValueEnd(b, start); !ok {
				return ackFloor{}, false
			}
			if field >= 0 && !f.set(key, b[start:end]) {
				return ackFloor{}, false
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return ackFloor{}, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return f, skipSpace(b, i+1) == len(b)
		default:
			return ackFloor{}, false
		}
	}
}

// set sets the scalar field named key to the JSON value v, and reports
// whether v is of the field's type (a null is not: see parseFloor).
func (f *ackFloor) set(key string, v []byte) bool {
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
	}
	return ok
}

// parseLagging reads the JSON object at b[i:] when it maps plain ASCII
// names (see plainString) to integers, and returns it (empty, not nil, for
// {}) and the index after it.
func parseLagging(b []byte, i int) (lag map[string]int64, end int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	lag = map[string]int64{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return lag, i + 1, true
	}
	for {
		name, next, ok := plainString(b, i)
		if !ok {
			return nil, 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return nil, 0, false
		}
		start := skipSpace(b, i+1)
		e, ok := numberEnd(b, start)
		if !ok {
			return nil, 0, false
		}
		n, ok := plainInt(b[start:e])
		if !ok {
			return nil, 0, false
		}
		lag[name] = n // (a name twice: the last, as encoding/json)
		i = skipSpace(b, e)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return lag, i + 1, true
		default:
			return nil, 0, false
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
