package rinkd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/internal/rinkdhttp"
)

// TestHTTPApp is an app of rinkd through its HTTP/JSON client
// (rinkdhttp): its await of a role another member holds opens with
// WAITING and nothing more; its unary calls, served by the Server's
// methods without the gRPC hop, answer as gRPC would (an invalid release
// refused with InvalidArgument, HTTP 400; a release in no session with
// NotFound, 404); and it is GRANTED the role once the holder's app closes
// its session.
func TestHTTPApp(t *testing.T) {
	name := rinkName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var apps []*rinkdhttp.Client
	var sessions []*rinkdhttp.Session
	for i := range 2 {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		s, err := New(ctx, Config{Client: cli, Rink: name, Member: fmt.Sprint("m", i), TTL: 2 * time.Second,
			Options: []rink.Option{rink.WithRebalanceDelay(0)}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		addrs, err := s.Start("127.0.0.1:0", "127.0.0.1:0", "")
		if err != nil {
			t.Fatal(err)
		}
		app := rinkdhttp.New(addrs.HTTP)
		defer app.Close()
		sess, err := app.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		apps, sessions = append(apps, app), append(sessions, sess)
	}
	// A role m0 owns once both are ranked in one map.
	role := ""
	for role == "" {
		if ctx.Err() != nil {
			t.Fatal("the two members never settled")
		}
		r0, err0 := apps[0].Rank(ctx, sessions[0].ID)
		r1, err1 := apps[1].Rank(ctx, sessions[1].ID)
		if err0 != nil || err1 != nil || !r0.Settled || !r1.Settled || r0.Version != r1.Version || r0.Size != 2 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for i := 0; i < 4096; i++ {
			o, err := apps[1].Owners(ctx, fmt.Sprint("role-", i))
			if err != nil {
				t.Fatal(err)
			}
			if o.Owner == "m0" && o.Version == r0.Version {
				role = o.Role
				break
			}
		}
	}
	held, err := apps[0].Await(ctx, sessions[0].ID, role)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if ev := <-held.Events(); ev.Kind != rinkdhttp.Waiting {
		t.Fatalf("m0's first event %+v, want WAITING", ev)
	}
	if ev := <-held.Events(); ev.Kind != rinkdhttp.Granted {
		t.Fatalf("m0's second event %+v, want GRANTED", ev)
	}
	waiting, err := apps[1].Await(ctx, sessions[1].ID, role)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	if ev := <-waiting.Events(); ev.Kind != rinkdhttp.Waiting {
		t.Fatalf("m1's first event %+v, want WAITING", ev)
	}
	select {
	case ev := <-waiting.Events():
		t.Fatalf("m1 got %+v while m0 holds %s", ev, role)
	default:
	}
	// Unary calls (served by the Server's methods without the gRPC hop)
	// answer as gRPC would: an invalid release is refused with
	// InvalidArgument (HTTP 400), a valid one accepted.
	var se *rinkdhttp.StatusError
	if err := apps[0].Release(ctx, sessions[0].ID, role, 0); !errors.As(err, &se) || se.HTTP != 400 || se.Code != 3 {
		t.Fatalf("a release with no token: %v, want HTTP 400, code 3", err)
	}
	if err := apps[0].Release(ctx, "nope", role, 1); !errors.As(err, &se) || se.HTTP != 404 {
		t.Fatalf("a release in no session: %v, want HTTP 404", err)
	}
	if err := apps[0].Release(ctx, sessions[0].ID, role, 1); err != nil {
		t.Fatalf("a release of a token never granted: %v, want it accepted (it releases nothing)", err)
	}
	held.Close()
	sessions[0].Close()
	select {
	case ev := <-waiting.Events():
		if ev.Kind != rinkdhttp.Granted || ev.Role != role || ev.Token <= 0 || ev.Deadline().Before(ev.Read) {
			t.Fatalf("m1 got %+v, want GRANTED of %s with a token and a validity", ev, role)
		}
	case <-ctx.Done():
		t.Fatal("m1 was never granted the role")
	}
}
