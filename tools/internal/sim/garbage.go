package sim

import (
	"bytes"
	"encoding/json"
	"strings"
)

// garbageMaps returns what map-garbage may put into the map key in place
// of the whole map whole (its JSON): pairs of what it is, for the trace,
// and the value. Each is what a hand at etcdctl makes of a map: cut short,
// its fields of the wrong type or out of range, a member twice, a protocol
// nobody speaks; and one that is the map itself, laid out with spaces and
// new lines (usable: a map read by hand and put back).
func garbageMaps(whole []byte) [][2]string {
	out := [][2]string{
		{"a map cut short", string(whole[:len(whole)/2])},
		{"a value that is no JSON object", `[1,2,3]`},
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(whole, &m) != nil {
		return out
	}
	var members []string
	var table []int
	_ = json.Unmarshal(m["members"], &members)
	_ = json.Unmarshal(m["table"], &table)
	edit := func(what string, f func(m map[string]json.RawMessage)) {
		c := make(map[string]json.RawMessage, len(m))
		for k, v := range m {
			c[k] = v
		}
		f(c)
		v, _ := json.Marshal(c)
		out = append(out, [2]string{what, string(v)})
	}
	edit("a map of version 0", func(c map[string]json.RawMessage) { c["version"] = json.RawMessage(`0`) })
	edit("a map whose version is a string", func(c map[string]json.RawMessage) { c["version"] = json.RawMessage(`"7"`) })
	edit("a map of an unknown schema", func(c map[string]json.RawMessage) { c["schema"] = json.RawMessage(`99`) })
	edit("a map of 99 replicas", func(c map[string]json.RawMessage) { c["replicas"] = json.RawMessage(`99`) })
	edit("a map of no slots", func(c map[string]json.RawMessage) { c["slots"] = json.RawMessage(`0`) })
	edit("a map whose table is null", func(c map[string]json.RawMessage) { c["table"] = json.RawMessage(`null`) })
	edit("a map whose table holds a string", func(c map[string]json.RawMessage) { c["table"] = json.RawMessage(`["a"]`) })
	edit("a map whose members are a string", func(c map[string]json.RawMessage) { c["members"] = json.RawMessage(`"m0"`) })
	if len(members) > 0 {
		edit("a map that ranks a member twice", func(c map[string]json.RawMessage) {
			c["members"], _ = json.Marshal(append(members, members[0]))
		})
		edit("a map that ranks an empty name", func(c map[string]json.RawMessage) {
			c["members"], _ = json.Marshal(append([]string{""}, members[1:]...))
		})
	}
	if len(table) > 0 {
		edit("a map whose table is a slot short", func(c map[string]json.RawMessage) { c["table"], _ = json.Marshal(table[1:]) })
		edit("a map whose table names a member past the last", func(c map[string]json.RawMessage) {
			t := append([]int{len(members)}, table[1:]...)
			c["table"], _ = json.Marshal(t)
		})
		edit("a map whose table names index -1", func(c map[string]json.RawMessage) {
			t := append([]int{-1}, table[1:]...)
			c["table"], _ = json.Marshal(t)
		})
	}
	var spaced bytes.Buffer
	if json.Indent(&spaced, whole, "", "  ") == nil {
		out = append(out, [2]string{"the map laid out by hand", strings.ReplaceAll(spaced.String(), ":", " : ")})
	}
	return out
}
