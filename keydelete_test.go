package rink

import (
	"context"
	"testing"
	"time"
)

// An operator deletes the member key of a member cut off etcd. The member
// cannot see the deletion and holds its roles until it fences (up to 7/8
// of the TTL after its last renewal); the others must not start them
// before then: the member is a ghost until its lease is gone (see
// ghosts.go). Before ghosts, they started them as soon as the key was
// gone, and the history showed two holders (found by rink-chaos -mode
// storm -seed 24).
func TestKeyDeletedWhileCutOff(t *testing.T) {
	t.Parallel()
	h := &history{}
	name, a, _, role, ctxX := cutOffHolder(t, h, nil, []Option{h.hook()})
	if _, err := newClient(t).Delete(context.Background(), newKeys(name).Member("x")); err != nil {
		t.Fatal(err)
	}
	ctxA, err := a.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
	if err != nil {
		t.Fatal(err)
	}
	if ctxX.Err() == nil {
		t.Errorf("a holds %s while x, cut off, still holds it", role)
	}
	_ = ctxA
	h.check(t)
}
