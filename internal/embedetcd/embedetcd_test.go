package embedetcd

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"go.uber.org/goleak"
)

// TestNoGateway checks that the embedded etcd serves no HTTP/JSON gateway:
// the goroutine that builds it reads os.Stderr after Start returns, which
// races with testing.M.Run under 'go test -json' when etcd is started in
// TestMain.
func TestNoGateway(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := Start(Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srv.Endpoint()+"/v3/kv/range", strings.NewReader(`{"key":"Zm9v"}`))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("POST /v3/kv/range: %s; want no gateway", resp.Status)
	}
}

// TestClientAddrAndRestart: a server started on a given address and data
// directory serves there, and a second start on the same directory (the
// peer port chosen anew) finds what the first stored.
func TestClientAddrAndRestart(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	for i, want := range []string{"", "kept"} {
		u, err := FreeURL()
		if err != nil {
			t.Fatal(err)
		}
		srv, err := Start(Options{Dir: dir, NoFsync: true, ClientAddr: u.Host})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if srv.Endpoint() != u.Host || srv.Dir() != dir {
			srv.Close()
			t.Fatalf("start %d: serving at %s in %s; want %s in %s", i, srv.Endpoint(), srv.Dir(), u.Host, dir)
		}
		func() {
			defer srv.Close()
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u.Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if len(resp.Kvs) > 0 {
				got = string(resp.Kvs[0].Value)
			}
			if got != want {
				t.Fatalf("start %d: k = %q, want %q", i, got, want)
			}
			if _, err := cli.Put(ctx, "k", "kept"); err != nil {
				t.Fatal(err)
			}
		}()
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the data directory given is not removed by Close: %v", err)
	}
}
