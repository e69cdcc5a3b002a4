package conformance

import (
	"context"
	"testing"
	"time"
)

// TestRinkdOpenedReplicas: the opened event names the replicas per slot the
// member joined with, for the first member of a new rink too.
func TestRinkdOpenedReplicas(t *testing.T) {
	t.Parallel()
	hist := &History{}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, name := range []string{"m1", "m2"} {
		m, err := rinkdDriver{}.Join(ctx, t, Config{Rink: "conf-rinkd-opened-replicas", Member: name, TTL: ttl, Replicas: 2,
			RebalanceDelay: 200 * time.Millisecond, History: hist})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.(*rinkdMember).cur().Replicas(); got != 2 {
			t.Errorf("%s: opened says replicas %d, joined with 2", name, got)
		}
	}
}
