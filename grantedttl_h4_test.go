package rink

import (
	"context"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestFenceDeadlineWithinTheTTL: etcd grants no lease less than 1.5 of its
// election timeouts (8 s for a 5 s election timeout), whatever TTL the
// member asked for. The member's fence deadline followed the TTL granted,
// so it trusted its lease, and ValidFor promised, up to 7.75 s, while
// everything timed by the TTL asked for assumes a member cut off or paused
// stops within 7/8 of it: the quiet times after a restore or a new
// lineage, and rinkd's drain timeout (TTL + 1 s), which handed a role over
// while its app's grant was valid.
func TestFenceDeadlineWithinTheTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("an etcd of its own, with a 5 s election timeout")
	}
	t.Parallel()
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true, ElectionMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m := join(t, cli, rinkName(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := m.AwaitRoleContext(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // across a renewal or two
		d, ok := ValidFor(roleCtx)
		if !ok || d > 2*time.Second*7/8 {
			t.Fatalf("ValidFor = %v, %v with a TTL of 2 s: want at most 7/8 of it", d, ok)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
