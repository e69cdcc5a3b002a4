package embedetcd

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

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
