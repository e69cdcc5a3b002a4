package counters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
	"github.com/rink-go/rink/internal/testutil"
)

const prefix = "test/"

// failingKV passes every request to etcd; when fail is set, a write
// transaction of package counters commits and then reports an error, as a
// request whose reply was lost does.
type failingKV struct {
	clientv3.KV
	fail atomic.Bool
}

func (f *failingKV) Txn(ctx context.Context) clientv3.Txn {
	return &failingTxn{Txn: f.KV.Txn(ctx), f: f}
}

type failingTxn struct {
	clientv3.Txn
	f     *failingKV
	write bool
}

func (t *failingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	// A write compares the fence and the count of updates.
	t.write = len(cs) == 2 && strings.HasSuffix(string(cs[0].KeyBytes()), "/fence")
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *failingTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *failingTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *failingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.write && t.f.fail.CompareAndSwap(true, false) {
		return nil, errors.New("test: the reply was lost")
	}
	return resp, err
}

// member is one rink member running a Node.
type member struct {
	r    *rink.Rink
	node *Node
	mu   sync.Mutex
	took []Takeover
}

func start(t *testing.T, cli *clientv3.Client, name string, roles ...string) *member {
	t.Helper()
	r, err := rink.New(cli, "counters", rink.WithMemberName(name), rink.WithReplicas(2), rink.WithSlots(16),
		rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{r: r}
	m.node, err = Start(r, cli, Config{Prefix: prefix, Roles: roles, Serving: func(tk Takeover) {
		m.mu.Lock()
		m.took = append(m.took, tk)
		m.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *member) stop() {
	_ = m.r.Shutdown(context.Background())
	m.node.Close()
}

func (m *member) takeovers() []Takeover {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Takeover(nil), m.took...)
}

// etcdCount returns how many updates etcd holds for role.
func etcdCount(t *testing.T, cli *clientv3.Client, role string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), Keys(prefix, role)+"seq")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	var n int64
	fmt.Sscan(string(resp.Kvs[0].Value), &n)
	return n
}

// TestStaleWriteRefused: once a newer primary has claimed the role (its
// token in the fence), the old primary's writes are refused.
func TestStaleWriteRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	m := start(t, cli, "a", "r")
	defer m.stop()
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, "a serves r", func() bool { return m.node.Status("r").Primary })
	u, err := m.node.Add(ctx, "r", "k", 1)
	if err != nil || u.Seq != 1 || u.Value != 1 {
		t.Fatalf("first write: %+v, %v", u, err)
	}
	if _, err := cli.Put(ctx, Keys(prefix, "r")+"fence", token20(u.Token+1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.node.Add(ctx, "r", "k", 1); !errors.Is(err, ErrStale) {
		t.Fatalf("write after a newer claim: %v, want %v", err, ErrStale)
	}
	if n := etcdCount(t, cli, "r"); n != 1 {
		t.Fatalf("etcd holds %d updates, want 1", n)
	}
}

// TestFailedWriteReadBack: a write that commits but whose reply is lost
// leaves the primary's copy behind etcd; the primary reads it back, and
// serves the committed value, without another write.
func TestFailedWriteReadBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	kv := &failingKV{KV: cli.KV}
	cli.KV = kv
	m := start(t, cli, "a", "r")
	defer m.stop()
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, "a serves r", func() bool { return m.node.Status("r").Primary })
	kv.fail.Store(true)
	if _, err := m.node.Add(ctx, "r", "k", 5); err == nil {
		t.Fatal("the failed write reported success")
	}
	testutil.Eventually(t, 10*time.Second, "the primary serves the committed value", func() bool {
		v, err := m.node.Get("r", "k")
		if err != nil && !errors.Is(err, ErrCatchingUp) {
			t.Fatal(err)
		}
		return err == nil && v == 5
	})
	if u, err := m.node.Add(ctx, "r", "k", 1); err != nil || u.Seq != 2 || u.Value != 6 {
		t.Fatalf("next write: %+v, %v; want update 2, value 6", u, err)
	}
}

// TestPromotedWarm: a secondary follows the primary's writes; when the
// primary leaves with nobody waiting, the secondary is promoted and serves
// from its copy, reading nothing back from etcd.
func TestPromotedWarm(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cliA, cliB := extest.Client(t, srv), extest.Client(t, srv)
	defer cliA.Close()
	defer cliB.Close()
	a := start(t, cliA, "a", "r")
	defer a.stop() // (stop may be called twice)
	b := start(t, cliB, "b", "r")
	defer b.stop()
	primary, secondary := a, b
	testutil.Eventually(t, 10*time.Second, "r served and followed", func() bool {
		if b.node.Status("r").Primary {
			primary, secondary = b, a
		}
		return primary.node.Status("r").Primary && secondary.node.Status("r").Following
	})
	ctx := context.Background()
	for i := range 20 {
		if _, err := primary.node.Add(ctx, "r", fmt.Sprint("k", i%3), 1); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the secondary follows", func() bool {
		_, n := secondary.node.Copy("r")
		return n == 20
	})
	primary.stop()
	testutil.Eventually(t, 10*time.Second, "the secondary serves r", func() bool { return len(secondary.takeovers()) > 0 })
	tk := secondary.takeovers()[0]
	if !tk.Promoted || tk.Warm != 20 || tk.CaughtUp != 0 {
		t.Fatalf("takeover %+v: want promoted, 20 updates warm, 0 caught up", tk)
	}
	if v, err := secondary.node.Get("r", "k0"); err != nil || v != 7 {
		t.Fatalf("k0 = %d, %v; want 7", v, err)
	}
}
