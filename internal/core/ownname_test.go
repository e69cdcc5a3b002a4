package core

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/rink-go/rink/internal/wire"
)

// TestOwnNameCheck: the check waits, in the listing's order, for every
// lease that campaigns under the member's name, except its own and the
// process's current one; keys of other names, and keys no campaign made,
// are not waited for; a failed listing is retried.
func TestOwnNameCheck(t *testing.T) {
	k := wire.NewKeys("r")
	elect := func(lease int64, name string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(k.ElectionKey(lease)), Value: []byte(name), Lease: lease}
	}
	c, step := NewOwnNameCheck(k, "m", 0x10, func() time.Duration { return 9 * time.Millisecond }, zap.NewNop())
	if !step.List || step.After != 0 {
		t.Fatalf("first step %+v, want the listing at once", step)
	}
	if key, end := c.Range(); key != "rink/r/election/" || end != "rink/r/election0" {
		t.Fatalf("range %q %q", key, end)
	}
	if step = c.Listed(nil, errors.New("unavailable"), 0); !step.List || step.After != 9*time.Millisecond {
		t.Fatalf("failed listing: %+v, want the listing again after the retry", step)
	}
	stray := &mvccpb.KeyValue{Key: []byte(k.Election() + "zz"), Value: []byte("m")}
	kvs := []*mvccpb.KeyValue{elect(0x10, "m"), elect(0x11, "other"), elect(0x12, "m"), stray, elect(0x13, "m"), elect(0x14, "m")}
	if step = c.Listed(kvs, nil, 0x14); step.Await != 0x12 {
		t.Fatalf("listed: %+v, want to await 0x12", step)
	}
	if step = c.Gone(); step.Await != 0x13 {
		t.Fatalf("after 0x12: %+v, want to await 0x13", step)
	}
	if step = c.Gone(); !step.Done {
		t.Fatalf("after 0x13: %+v, want done (0x10 own, 0x14 current)", step)
	}
	c, _ = NewOwnNameCheck(k, "m", 0x10, func() time.Duration { return 0 }, zap.NewNop())
	if step = c.Listed([]*mvccpb.KeyValue{elect(0x10, "m")}, nil, 0); !step.Done {
		t.Fatalf("only its own key: %+v, want done", step)
	}
}
