package rink

import (
	"context"
	"testing"

	"github.com/rink-go/rink/internal/wire"
)

// An Observer that could not read the map key (a change record of a new
// lineage, with no whole map beside it) shows no map until it reads one:
// the map key's deletion does not bring back the map it showed before,
// of an earlier lineage, under the lineage of the record it could not
// read (found by the simulator's observer, seed 1493 of
// -observer -kinds map-delete,whole-map-delete,observer-cut,join,crash,leave:
// an observer cut off across a re-created map key listed a record whose
// whole map an operator had deleted, then saw the key deleted again).
func TestObserverUnreadRecordThenDeleted(t *testing.T) {
	name := rinkName(t)
	cli := newClient(t)
	k := newKeys(name)
	ctx := context.Background()
	ob, err := NewObserver(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	a := wire.Map{Schema: 3, Version: 5, Slots: 4, Members: []string{"a"}, Table: wire.SlotTable{0, 0, 0, 0}}
	put, err := cli.Put(ctx, k.Map(), string(a.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	l1 := put.Header.Revision
	awaitState(t, ob, "the map", func(s State) bool { return s.Version == 5 && s.Lineage == l1 && s.MapError == "" })

	// The key re-created by hand with a change record (of another map,
	// whose whole map is nowhere): nobody can read it.
	b := wire.Map{Schema: 3, Version: 7, Slots: 4, Members: []string{"b", "c"}, Table: wire.SlotTable{0, 1, 0, 1}}
	c := wire.Map{Schema: 3, Version: 8, Slots: 4, Members: []string{"b", "c"}, Table: wire.SlotTable{1, 1, 0, 0}}
	rec := wire.Diff(&b, &c)
	if _, err := cli.Delete(ctx, k.Map()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, k.Map(), string(rec.Encode())); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ob, "the record refused", func(s State) bool { return s.MapError != "" })

	del, err := cli.Delete(ctx, k.Map())
	if err != nil {
		t.Fatal(err)
	}
	s := awaitState(t, ob, "the deletion", func(s State) bool { return s.Revision >= del.Header.Revision })
	if s.MapError == "" && s.Lineage != l1 {
		owner, _ := s.Owner("x")
		t.Fatalf("after the deletion it shows map version %d (lineage %d's, owner of x %q) as lineage %d's", s.Version, l1, owner, s.Lineage)
	}
	if o, ok := s.Owner("x"); ok && o != "a" {
		t.Fatalf("owner of x %q", o)
	}
}
