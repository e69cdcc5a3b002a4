package rink

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rink-go/rink/internal/wire"
)

func FuzzParseFloor(f *testing.F) {
	full, _ := json.Marshal(wire.AckFloor{Lineage: 4, Version: 75, Floor: 70, Complete: true, Lagging: map[string]int64{"m1": 70, "m2": 0},
		Seq: 80, SeqFloor: 79, SeqComplete: true, SeqLagging: map[string]int64{"m1": 79}, Rest: 75, Round: true,
		Imbalance: 1.25, Tolerance: 0.1, Still: true, Base: 1, Ghosts: 2, Leader: "m0000", Unreported: []string{"m1", "m2"}})
	for _, s := range [][]byte{
		full,
		[]byte(`{"lineage":30,"version":63,"floor":63,"complete":true,"seq":63,"seqfloor":63,"seqcomplete":true,"rest":63,"still":true,"base":1,"leader":"m0000"}`),
		[]byte(`{"lineage":7257,"version":476,"floor":307,"complete":true,"lagging":{"m10000":475,"m5000":307},"seq":476,"seqlagging":{}}`),
		[]byte(`{"Version":2}`), []byte(`{"version":1,"version":2}`), []byte(`{"version":1.0}`), []byte(`{"floor":1e3}`),
		[]byte(`{"leader":"x\"y"}`), []byte(`{}`), []byte(` { "seq" : 2 , "still" : false } `), []byte(`{"lagging":null}`),
		[]byte(`{"lagging":{"a":1,"a":2}}`), []byte(`{"x":[1,"a",true],"y":{"z":1}}`), []byte(`{"imbalance":1e400}`),
		[]byte(`{"ghosts":99999999999999999999}`), []byte(`{"complete":1}`), []byte(`{"lagging":{"a":-0}}`),
		[]byte(`{"unreported":[]}`), []byte(`{"unreported":null}`), []byte(`{"unreported":["a",1]}`), []byte(`{"unreported":"a"}`),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.ParseFloor(b)
		if !ok {
			return
		}
		var want wire.AckFloor
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
	for _, fl := range []wire.AckFloor{
		{Lineage: 1, Version: 2, Floor: 2, Complete: true, Seq: 2, SeqFloor: 2, SeqComplete: true, Rest: 2, Still: true, Base: 1, Leader: "a"},
		{Lineage: 1, Version: 3, Complete: true, Lagging: map[string]int64{"b": 2, "c": 0}, Seq: 4, SeqComplete: true,
			SeqLagging: map[string]int64{"b": 3}, Imbalance: 1.5, Tolerance: 0.1, Ghosts: 1, Leader: "b"},
		{Lineage: 1, Version: 3, Floor: 3, Complete: true, Imbalance: 1.5, Tolerance: 0.1, Leader: "b", Unreported: []string{"a", "c"}},
	} {
		b, err := json.Marshal(fl)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := wire.ParseFloor(b)
		if !ok || !reflect.DeepEqual(got, fl) {
			t.Errorf("parseFloor(%s) = %+v, %v; want %+v", b, got, ok, fl)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	leader, size, by := "m0000", 3, true
	full := (&wire.Record{Schema: 3, Change: true, Version: 9, Leader: &leader, Size: &size, Names: map[string]string{"2": "c"},
		Moves: []int{5, 2, 7, 0}, Unwait: []string{"c"}, ByLoad: &by,
		Transition: wire.Transition{View: 40, From: 8, Gone: []string{"d"}, Incs: map[string]int64{"a": 3}, ByLeader: true}}).Encode()
	for _, s := range [][]byte{
		full,
		[]byte(`{"schema":3,"change":true,"version":475,"size":10001,"names":{"10000":"m10000"},"moves":[14,10000],"view":97442,"from":474}`),
		[]byte(`{"schema":3,"change":true,"version":2,"wait":[{"name":"w","since":"2026-11-26T00:00:00Z"}]}`),
		[]byte(`{"change":true,"leader":null}`), []byte(`{"change":true,"Moves":[1]}`), []byte(`{"change":true,"moves":[]}`),
		[]byte(`{"change":true,"names":{}}`), []byte(`{"change":true,"size":1e2}`), []byte(`{"change":true,"x":{"y":1}}`),
		[]byte(`{"change":true,"gone":["a","b"],"unwait":[]}`), []byte(`{"change":1}`), []byte(`{"change":true,"version":1,"version":2}`),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := wire.ParseRecord(b)
		if !ok {
			return
		}
		var want wire.Record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseRecord(%q) = %+v; encoding/json refuses it: %v", b, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseRecord(%q) = %+v; encoding/json: %+v", b, got, want)
		}
	})
}

// The records leaders write for joins and departures take parseRecord's
// path.
func TestLeadersRecordsParseFast(t *testing.T) {
	size := 4
	for _, c := range []wire.Record{
		{Schema: 3, Change: true, Version: 5, Size: &size, Names: map[string]string{"3": "d"}, Moves: []int{1, 3, 9, 3},
			Transition: wire.Transition{View: 20, From: 4, ByLeader: true}},
		{Schema: 3, Change: true, Version: 6, Moves: []int{1, 0}, Unwait: []string{"e"}, Transition: wire.Transition{View: 22, From: 5, Gone: []string{"d"}}},
	} {
		b := c.Encode()
		got, ok := wire.ParseRecord(b)
		if !ok || !reflect.DeepEqual(got, c) {
			t.Errorf("parseRecord(%s) = %+v, %v; want %+v", b, got, ok, c)
		}
	}
}
