package rink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Members that join one after another list the election keys once in
// all (the first, with no candidacy before it): each later one waits for
// the candidacy its join found named in .tail. A listing sorted by create
// revision makes etcd read every election key, so one per join made
// building a rink quadratic in etcd (a fifth of the CPU at 10,000
// members).
func TestJoinsListNoCandidates(t *testing.T) {
	name := rinkName(t)
	prefix := newKeys(name).Election()
	var listings atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*etcdserverpb.TxnRequest); ok {
			for _, op := range txn.Success {
				if rr := op.GetRequestRange(); rr != nil && string(rr.Key) == prefix && len(rr.RangeEnd) > 0 {
					listings.Add(1)
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testEndpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var ms []*Rink
	for i := range 8 {
		ms = append(ms, join(t, cli, name, WithMemberName(fmt.Sprintf("m%d", i))))
		waitSettled(t, ms...)
	}
	if n := listings.Load(); n > 1 {
		t.Fatalf("%d listings of the election keys for %d joins, want at most 1", n, len(ms))
	}
	// A tail put by hand (not an election key; an election key with the
	// revision of the put, not of its creation; a key that is not there)
	// costs the next joiner a listing, and nothing else.
	k := newKeys(name)
	resp, err := cli.Get(context.Background(), k.Election(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatal("no election key", err)
	}
	for i, val := range []string{"garbage", string(resp.Kvs[0].Key), k.ElectionKey(0x7777)} {
		if _, err := cli.Put(context.Background(), k.Tail(), val); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, join(t, cli, name, WithMemberName(fmt.Sprintf("h%d", i))))
		waitSettled(t, ms...)
	}
	if n := listings.Load(); n > 4 {
		t.Fatalf("%d listings of the election keys after 3 joins that found a tail put by hand, want at most 4", n)
	}
	// The leader's successor takes over (it waits for the key its join
	// found), and the rink goes on.
	if err := ms[0].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ms[1:]...)
	eventually(t, 10*time.Second, "m1 leads", func() bool { return ms[len(ms)-1].Rank().Leader == "m1" })
}
