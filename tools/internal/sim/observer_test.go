package sim

import (
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rink-go/rink/internal/wire"
)

// The observer follows histories whose map key is deleted and re-created,
// whose whole map beside a change record is deleted, and whose observer
// misses what happens while it is cut off: every State it publishes shows
// a map that a put of the map key held.
func TestObserverShowsHeldMaps(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Observer = true
	cfg.Kinds = []string{"map-delete", "whole-map-delete", "observer-cut", "map-old-value", "join", "crash", "leave"}
	observed, cuts := 0, 0
	for seed := uint64(1); seed <= 12; seed++ {
		res := Run(seed, cfg)
		if res.Violation != "" {
			t.Fatalf("seed %d: %s (replay: %s)", seed, res.Violation, replayCommand(cfg, seed))
		}
		observed += res.Observed
		cuts += res.Ops["observer-cut"]
	}
	if observed < 100 || cuts == 0 {
		t.Fatalf("%d States observed, %d cuts: the observer barely played", observed, cuts)
	}
	// Without an observer, observer-cut does nothing.
	cfg.Observer = false
	if res := Run(1, cfg); res.Violation != "" || res.Observed != 0 || res.Ops["observer-cut"] != 0 {
		t.Fatalf("without an observer: %+v", res)
	}
}

// The map book works out what each put of the map key holds from the
// puts alone: a change record holds the map of the put before it in its
// lineage with the record applied, and nothing across a seq gap or
// another lineage.
func TestMapBook(t *testing.T) {
	b := newMapBook()
	put := func(key string, rev, create, version int64, v []byte) {
		b.note(&mvccpb.KeyValue{Key: []byte("rink/sim/" + key), ModRevision: rev, CreateRevision: create, Version: version, Value: v})
	}
	m1 := wire.Map{Schema: 3, Version: 1, Slots: 4, Members: []string{"a", "b"}, Table: wire.SlotTable{0, 0, 1, 1}}
	m2 := wire.Map{Schema: 3, Version: 2, Slots: 4, Members: []string{"a", "b"}, Table: wire.SlotTable{1, 0, 1, 1}}
	m3 := wire.Map{Schema: 3, Version: 3, Slots: 4, Members: []string{"a", "b"}, Table: wire.SlotTable{1, 1, 1, 1}}
	r12, r23 := wire.Diff(&m1, &m2), wire.Diff(&m2, &m3)
	put("map", 10, 10, 1, m1.Encode())
	put("map", 11, 10, 2, r12.Encode()) // (applies to the put before)
	put("map", 12, 12, 1, m1.Encode())  // (deleted and re-created)
	put("map", 13, 12, 3, r23.Encode()) // a record across a gap in its lineage's seqs
	put("map", 14, 20, 2, r12.Encode()) // and one whose lineage's puts before it are not known
	put("map", 15, 12, 4, r23.Encode())
	put(".map", 15, 0, 0, m3.Encode()) // with the whole map beside it
	for rev, want := range map[int64]*wire.Map{10: &m1, 11: &m2, 12: &m1, 13: nil, 14: nil, 15: &m3} {
		got := b.held(rev)
		if (got == nil) != (want == nil) || got != nil && (got.Version != want.Version || !slices.Equal(got.Table, want.Table)) {
			t.Errorf("revision %d holds %+v, want %+v", rev, got, want)
		}
	}
	shows := func(v int64) func(*wire.Map) bool { return func(m *wire.Map) bool { return m.Version == v } }
	if !b.holds(10, 11, shows(2)) || b.holds(20, 14, shows(2)) || b.holds(12, 14, shows(3)) || !b.holds(12, 15, shows(3)) || b.holds(10, 10, shows(2)) {
		t.Error("holds answers wrong")
	}
}
