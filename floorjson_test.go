package rink

import (
	"encoding/json"
	"reflect"
	"testing"
)

func FuzzParseFloor(f *testing.F) {
	full, _ := json.Marshal(ackFloor{Lineage: 4, Version: 75, Floor: 70, Complete: true, Lagging: map[string]int64{"m1": 70, "m2": 0},
		Seq: 80, SeqFloor: 79, SeqComplete: true, SeqLagging: map[string]int64{"m1": 79}, Rest: 75, Round: true,
		Imbalance: 1.25, Tolerance: 0.1, Still: true, Base: 1, Ghosts: 2, Leader: "m0000"})
	for _, s := range [][]byte{
		full,
		[]byte(`{"lineage":30,"version":63,"floor":63,"complete":true,"seq":63,"seqfloor":63,"seqcomplete":true,"rest":63,"still":true,"base":1,"leader":"m0000"}`),
		[]byte(`{"lineage":7257,"version":476,"floor":307,"complete":true,"lagging":{"m10000":475,"m5000":307},"seq":476,"seqlagging":{}}`),
		[]byte(`{"Version":2}`), []byte(`{"version":1,"version":2}`), []byte(`{"version":1.0}`), []byte(`{"floor":1e3}`),
		[]byte(`{"leader":"x\"y"}`), []byte(`{}`), []byte(` { "seq" : 2 , "still" : false } `), []byte(`{"lagging":null}`),
		[]byte(`{"lagging":{"a":1,"a":2}}`), []byte(`{"x":[1,"a",true],"y":{"z":1}}`), []byte(`{"imbalance":1e400}`),
		[]byte(`{"ghosts":99999999999999999999}`), []byte(`{"complete":1}`), []byte(`{"lagging":{"a":-0}}`),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseFloor(b)
		if !ok {
			return
		}
		var want ackFloor
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseFloor(%q) = %+v; encoding/json refuses it: %v", b, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseFloor(%q) = %+v; encoding/json: %+v", b, got, want)
		}
	})
}

// The floors leaders write take parseFloor's path, not encoding/json's.
func TestLeadersFloorsParseFast(t *testing.T) {
	for _, fl := range []ackFloor{
		{Lineage: 1, Version: 2, Floor: 2, Complete: true, Seq: 2, SeqFloor: 2, SeqComplete: true, Rest: 2, Still: true, Base: 1, Leader: "a"},
		{Lineage: 1, Version: 3, Complete: true, Lagging: map[string]int64{"b": 2, "c": 0}, Seq: 4, SeqComplete: true,
			SeqLagging: map[string]int64{"b": 3}, Imbalance: 1.5, Tolerance: 0.1, Ghosts: 1, Leader: "b"},
	} {
		b, err := json.Marshal(fl)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseFloor(b)
		if !ok || !reflect.DeepEqual(got, fl) {
			t.Errorf("parseFloor(%s) = %+v, %v; want %+v", b, got, ok, fl)
		}
	}
}
