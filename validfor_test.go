package rink

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestValidForBoundsTheHolding checks ValidFor's promise: a holding's
// context reports an error once the time ValidFor gave has passed, even
// when the member is cut off from etcd and no renewal comes; renewals
// extend it while etcd answers.
func TestValidForBoundsTheHolding(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	cli := proxyClient(t, p)
	name := rinkName(t)
	m := join(t, cli, name)
	ctx := m.AwaitRole("leader")
	if _, ok := ValidFor(context.Background()); ok {
		t.Fatal("ValidFor answered for a context that is not a role context")
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	first, ok := ValidFor(child)
	if !ok || first <= 0 || first > 2*time.Second {
		t.Fatalf("ValidFor of a fresh holding = %v, %v: want (0, TTL]", first, ok)
	}
	// Renewals extend it: within two TTLs it is again most of a TTL.
	promise := time.Now().Add(first)
	eventually(t, 4*time.Second, "a renewal extends the validity", func() bool {
		d, ok := ValidFor(ctx)
		return ok && time.Now().Add(d).After(promise.Add(500*time.Millisecond))
	})

	// Cut off: the last validity must bound the holding.
	d, ok := ValidFor(ctx)
	if !ok {
		t.Fatal("holding lost before the cut")
	}
	promise = time.Now().Add(d)
	p.BlackholeTx()
	p.BlackholeRx()
	deadline := time.Now().Add(5 * time.Second)
	for ctx.Err() == nil {
		if time.Now().After(promise) {
			// The promise has passed: Err must already say so.
			if ctx.Err() == nil {
				t.Fatalf("holding still valid %v after ValidFor's promise", time.Since(promise))
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the cut-off member never fenced")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !errors.Is(context.Cause(ctx), ErrFenced) {
		t.Fatalf("cause %v, want ErrFenced", context.Cause(ctx))
	}
	if _, ok := ValidFor(ctx); ok {
		t.Fatal("ValidFor answered for a fenced holding")
	}
	p.UnblackholeTx()
	p.UnblackholeRx()
}
