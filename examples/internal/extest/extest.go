// Package extest holds what the examples' tests share: an embedded etcd, a
// client of it, and a way to make a member lose its roles at once.
package extest

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink/internal/embedetcd"
)

// Etcd starts an embedded etcd without fsync. The caller closes it (with a
// defer, so that it is gone before goleak looks).
func Etcd(t testing.TB) *embedetcd.Server {
	t.Helper()
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Client returns a new client of srv. The caller closes it.
func Client(t testing.TB, srv *embedetcd.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// RevokeMember revokes the lease of member's key in the rink called name, as
// etcd does when a lease runs out: the member fences itself at once (every
// role context ends with cause rink.ErrFenced) and then rejoins by itself.
func RevokeMember(ctx context.Context, cli *clientv3.Client, name, member string) error {
	key := "rink/" + name + "/members/" + member
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return fmt.Errorf("no member key %s with a lease", key)
	}
	_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}
