package peer

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

// TestJoin follows two members' ranks and runs jobs on the holders of their
// shards: every job on exactly one member.
func TestJoin(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	var mu sync.Mutex
	seen := map[string]rink.Rank{}
	var peers []*Peer
	for _, name := range []string{"a", "b"} {
		p, err := Join(cli, "join", func(rk rink.Rank) {
			mu.Lock()
			seen[rk.Member] = rk
			mu.Unlock()
		}, rink.WithMemberName(name), rink.WithRebalanceDelay(0))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown(context.Background())
		peers = append(peers, p)
	}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		a, b := seen["a"], seen["b"]
		mu.Unlock()
		if a.Size == 2 && b.Size == 2 && a.Index >= 0 && b.Index >= 0 {
			if a.Index == b.Index {
				t.Fatalf("both members have index %d", a.Index)
			}
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("ranks did not reach 2 members: %+v, %+v", a, b)
		}
	}
	for id := 0; id < Shards; id++ {
		for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
			ran := 0
			for _, p := range peers {
				if p.Do(id, func(context.Context) {}) {
					ran++
				}
			}
			if ran > 1 {
				t.Fatalf("job %d ran on %d members", id, ran)
			}
			if ran == 1 {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("job %d ran nowhere for 10s", id)
			}
		}
	}
}
