package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// SlotTable is a map's slot table. It decodes with a fast path for the
// form every leader writes (a JSON array of small non-negative integers):
// members decode a map on the path of every handover, and the generic
// decoder spends most of its time on this array. Anything else goes
// through the generic decoder, with its errors.
type SlotTable []int32

// UnmarshalJSON implements json.Unmarshaler.
func (t *SlotTable) UnmarshalJSON(b []byte) error {
	if v, ok := ParseTable(b); ok {
		*t = v
		return nil
	}
	var v []int32
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = v
	return nil
}

// parseTable parses b as a JSON array of non-negative integers of at most
// nine digits without leading zeros (or null), as encoding/json writes
// them; ok is false for anything else.
func ParseTable(b []byte) (v []int32, ok bool) {
	i := 0
	skip := func() { i = skipSpace(b, i) }
	skip()
	if string(b[i:]) == "null" {
		return nil, true
	}
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i++
	v = make([]int32, 0, bytes.Count(b, []byte{','})+1) // (exact for the form leaders write: a member keeps the table)
	skip()
	if i < len(b) && b[i] == ']' {
		i++
		skip()
		return v, i == len(b)
	}
	for {
		start, n := i, int32(0)
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			n = n*10 + int32(b[i]-'0')
			i++
		}
		if d := i - start; d == 0 || d > 9 || d > 1 && b[start] == '0' {
			return nil, false
		}
		v = append(v, n)
		skip()
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i++
			skip()
		case ']':
			i++
			skip()
			return v, i == len(b)
		default:
			return nil, false
		}
	}
}

// MemberList is a map's member names. It decodes with a fast path for
// the form leaders write (a JSON array of plain ASCII strings): the names'
// bytes share one allocation, and the list has room for at most 1/64 more
// (see growNames), where the generic decoder made one allocation per name
// and a list up to twice as long as needed (at 10,000 members a member keeps 10,000 names: issue
// 25). Anything else goes through the generic decoder, with its errors.
type MemberList []string

// UnmarshalJSON implements json.Unmarshaler.
func (l *MemberList) UnmarshalJSON(b []byte) error {
	if v, ok := ParseNames(b); ok {
		*l = v
		return nil
	}
	var v []string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = v
	return nil
}

// parseNames parses b as a JSON array (or null) of strings of printable
// ASCII with no escapes; ok is false for anything else. The names are
// substrings of one copy of b.
func ParseNames(b []byte) (v []string, ok bool) {
	i := 0
	skip := func() { i = skipSpace(b, i) }
	// scan checks the form and calls f with each name's bounds in b.
	scan := func(f func(start, end int)) bool {
		i = 0
		skip()
		if i >= len(b) || b[i] != '[' {
			return false
		}
		i++
		skip()
		if i < len(b) && b[i] == ']' {
			i++
			skip()
			return i == len(b)
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return false
			}
			i++
			start := i
			for i < len(b) && b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"' && b[i] != '\\' {
				i++
			}
			if i >= len(b) || b[i] != '"' {
				return false
			}
			f(start, i)
			i++
			skip()
			if i >= len(b) {
				return false
			}
			switch b[i] {
			case ',':
				i++
				skip()
			case ']':
				i++
				skip()
				return i == len(b)
			default:
				return false
			}
		}
	}
	skip()
	if string(b[i:]) == "null" {
		return nil, true
	}
	n, size := 0, 0
	if !scan(func(start, end int) { n, size = n+1, size+end-start }) {
		return nil, false
	}
	// The names' bytes alone, back to back, in one string (not the JSON
	// with its quotes and commas: 8 bytes a name where names are 5).
	blob := make([]byte, 0, size)
	scan(func(start, end int) { blob = append(blob, b[start:end]...) })
	all := string(blob)
	// (With room for a few joins: a member that joined last would copy
	// its whole list at the next join.)
	v = make([]string, 0, n+min(n/64, maxNameRoom))
	at := 0
	scan(func(start, end int) { v = append(v, all[at:at+end-start]); at += end - start })
	return v, true
}

// skipSpace returns the index of the first byte of b from i on that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// mapFields are the JSON names of rankMap's fields, which encoding/json
// matches without regard to case.
var mapFields = []string{"schema", "version", "slots", "leader", "members", "waiting", "table", "byLoad", "incoming", "leave", "replicas", "leases"}

// parseMap decodes a whole map in the form leaders write it: an object of
// integers, plain ASCII strings, the member list and the table, and
// fields of other types (the transition's) whose values are numbers,
// strings or flat arrays of them, which it skips. It returns ok false for
// anything else (waiting members, announcements, escapes, nesting, a key
// twice, a key that only case tells from a field), which the caller
// decodes with encoding/json: members decode a whole map on the path of a
// handover, where the generic decoder took tens of microseconds for a
// table of 1,024 slots. When ok, m is what encoding/json decodes.
func ParseMap(b []byte) (m Map, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return Map{}, false
	}
	i = skipSpace(b, i+1)
	var seen uint16 // (bit k: mapFields[k] was set)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return Map{}, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return Map{}, false
		}
		start := skipSpace(b, i+1)
		end, ok := flatValueEnd(b, start)
		if !ok {
			return Map{}, false
		}
		v := b[start:end]
		field := -1
		for k, f := range mapFields {
			if f == key {
				field = k
			} else if len(f) == len(key) && bytes.EqualFold([]byte(f), []byte(key)) {
				return Map{}, false // (encoding/json would set the field)
			}
		}
		if field >= 0 {
			if seen&(1<<field) != 0 {
				return Map{}, false
			}
			seen |= 1 << field
		}
		switch key {
		case "schema", "slots", "replicas":
			n, ok := plainInt(v)
			if !ok || int64(int(n)) != n {
				return Map{}, false
			}
			switch key {
			case "schema":
				m.Schema = int(n)
			case "slots":
				m.Slots = int(n)
			default:
				m.Replicas = int(n)
			}
		case "version":
			if m.Version, ok = plainInt(v); !ok {
				return Map{}, false
			}
		case "leader":
			s, e, ok := plainString(v, 0)
			if !ok || e != len(v) {
				return Map{}, false
			}
			m.Leader = s
		case "members":
			names, ok := ParseNames(v)
			if !ok {
				return Map{}, false
			}
			m.Members = names
		case "table":
			t, ok := ParseTable(v)
			if !ok {
				return Map{}, false
			}
			m.Table = t
		case "leases":
			l, ok := parseLeases(v)
			if !ok {
				return Map{}, false
			}
			m.Leases = l
		case "byLoad":
			switch string(v) {
			case "true":
				m.ByLoad = true
			case "false":
			default:
				return Map{}, false
			}
		default:
			if field >= 0 {
				return Map{}, false // (waiting, incoming, leave: the generic decoder)
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return Map{}, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return Map{}, false
		}
	}
}

// parseLeases parses v, a flat JSON array (see flatValueEnd), as the
// integers of a map's leases, or null; ok is false for anything else.
func parseLeases(v []byte) (l []int64, ok bool) {
	if string(v) == "null" {
		return nil, true
	}
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, false
	}
	body := bytes.TrimSpace(v[1 : len(v)-1])
	if len(body) == 0 {
		return []int64{}, true
	}
	l = make([]int64, 0, bytes.Count(body, []byte{','})+1)
	for _, f := range bytes.Split(body, []byte{','}) {
		n, ok := plainInt(bytes.TrimSpace(f))
		if !ok {
			return nil, false
		}
		l = append(l, n)
	}
	return l, true
}

// plainString reads the JSON string at b[i:] when it is printable ASCII
// without escapes, and returns it and the index after it.
func plainString(b []byte, i int) (s string, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && b[j] >= 0x20 && b[j] < 0x7f && b[j] != '"' && b[j] != '\\' {
		j++
	}
	if j >= len(b) || b[j] != '"' {
		return "", 0, false
	}
	return string(b[i+1 : j]), j + 1, true
}

// plainInt parses v as a JSON integer (no fraction, no exponent) that
// fits an int64.
func plainInt(v []byte) (int64, bool) {
	d := v
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 1 && d[0] == '0' {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// flatValueEnd returns the index after the JSON value at b[i:] when it is
// a number, a literal, a plain string (see plainString) or an array of
// them; ok is false for anything else, or nothing.
func flatValueEnd(b []byte, i int) (end int, ok bool) {
	scalar := func(i int) (int, bool) {
		if i >= len(b) {
			return 0, false
		}
		if b[i] == '"' {
			_, next, ok := plainString(b, i)
			return next, ok
		}
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(b[i:], []byte(lit)) {
				return i + len(lit), true
			}
		}
		return numberEnd(b, i)
	}
	if i >= len(b) || b[i] != '[' {
		return scalar(i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		next, ok := scalar(i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// numberEnd returns the index after the JSON number at b[i:].
func numberEnd(b []byte, i int) (int, bool) {
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	return i, true
}
