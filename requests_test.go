package rink

import (
	"testing"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestOpsOfKeepsWhatRequestsSay: every field the core's requests set
// survives the conversion to the client's operations (a range that lost
// its sort and limit once made every campaign wait for its own key; one
// that lost KeysOnly made every campaign read values it never looks at).
func TestOpsOfKeepsWhatRequestsSay(t *testing.T) {
	ops := opsOf([]*etcdserverpb.RequestOp{
		wire.Put("k", "v", 7),
		{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{
			Key: []byte("a"), RangeEnd: []byte("b"), Limit: 1, MaxCreateRevision: 9, KeysOnly: true,
			SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_CREATE}}},
		wire.Delete("d"),
		wire.Range("x", "y"),
	})
	if len(ops) != 4 {
		t.Fatalf("%d ops", len(ops))
	}
	if p := ops[0]; !p.IsPut() || string(p.KeyBytes()) != "k" || string(p.ValueBytes()) != "v" {
		t.Fatalf("put: %+v", p)
	}
	if g := ops[1]; !g.IsGet() || string(g.RangeBytes()) != "b" || g.Limit() != 1 || g.MaxCreateRev() != 9 || !g.IsSortSet() || !g.IsKeysOnly() {
		t.Fatalf("range: %+v", g)
	}
	if d := ops[2]; !d.IsDelete() || string(d.KeyBytes()) != "d" || len(d.RangeBytes()) != 0 {
		t.Fatalf("delete: %+v", d)
	}
	if g := ops[3]; !g.IsGet() || string(g.RangeBytes()) != "y" {
		t.Fatalf("range: %+v", g)
	}
}
