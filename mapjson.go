package rink

import (
	"bytes"
	"encoding/json"
)

// slotTable is a map's slot table. It decodes with a fast path for the
// form every leader writes (a JSON array of small non-negative integers):
// members decode a map on the path of every handover, and the generic
// decoder spends most of its time on this array. Anything else goes
// through the generic decoder, with its errors.
type slotTable []int32

// UnmarshalJSON implements json.Unmarshaler.
func (t *slotTable) UnmarshalJSON(b []byte) error {
	if v, ok := parseTable(b); ok {
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
func parseTable(b []byte) (v []int32, ok bool) {
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

// memberList is a map's member names. It decodes with a fast path for
// the form leaders write (a JSON array of plain ASCII strings): the names'
// bytes share one allocation, and the list has room for at most 1/64 more
// (see growNames), where the generic decoder made one allocation per name
// and a list up to twice as long as needed (at 10,000 members a member keeps 10,000 names: issue
// 25). Anything else goes through the generic decoder, with its errors.
type memberList []string

// UnmarshalJSON implements json.Unmarshaler.
func (l *memberList) UnmarshalJSON(b []byte) error {
	if v, ok := parseNames(b); ok {
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
func parseNames(b []byte) (v []string, ok bool) {
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
