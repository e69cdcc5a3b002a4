package core

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestStrayDelete: the deletion is guarded by the revision the key was
// seen at; a failed request goes again after the retry while the
// incarnation lasts, and not after it ends.
func TestStrayDelete(t *testing.T) {
	done := make(chan struct{})
	d := NewStrayDelete("rink/r/election/zz", 41, &Inc{Done: done}, func() time.Duration { return 3 * time.Millisecond })
	txn := d.Txn()
	if len(txn.Compare) != 1 || txn.Compare[0].GetModRevision() != 41 || txn.Compare[0].Target != etcdserverpb.Compare_MOD ||
		len(txn.Success) != 1 || string(txn.Success[0].GetRequestDeleteRange().Key) != "rink/r/election/zz" {
		t.Fatalf("txn %v", txn)
	}
	if deleted, again := d.Replied(&etcdserverpb.TxnResponse{Succeeded: true}, nil); !deleted || again != 0 {
		t.Fatalf("deleted: %v, again %v", deleted, again)
	}
	if deleted, again := d.Replied(&etcdserverpb.TxnResponse{}, nil); deleted || again != 0 {
		t.Fatalf("written since (the guard failed): deleted %v, again %v", deleted, again)
	}
	if _, again := d.Replied(nil, errors.New("unavailable")); again != 3*time.Millisecond {
		t.Fatalf("failed: again %v, want the retry", again)
	}
	close(done)
	if _, again := d.Replied(nil, errors.New("unavailable")); again != 0 {
		t.Fatalf("failed after the incarnation ended: again %v, want none", again)
	}
}
