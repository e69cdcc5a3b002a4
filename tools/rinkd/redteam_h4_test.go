package rinkd

import (
	"context"
	"testing"
	"time"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/rinkd/rinkv1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestDrainWhileSessionJoins: a Drain that comes while a session is still
// joining the rink (here: waiting out a live member of the same name) must
// not return before that session is over. It returned at once, and the
// session then opened (and held roles) after the drain had answered: a
// preStop hook's `rinkd drain` would say the member had left while it was
// about to join.
func TestDrainWhileSessionJoins(t *testing.T) {
	t.Parallel()
	name := rinkName(t)
	// A live member named m0 keeps rinkd's join waiting.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pred, err := rink.New(cli, name, rink.WithMemberName("m0"), rink.WithSessionTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	predDown := false
	defer func() {
		if !predDown {
			_ = pred.Shutdown(context.Background())
		}
	}()
	s := startServer(t, name, "m0")
	conn, err := grpc.NewClient("passthrough:///"+s.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rinkv1.NewRinkClient(conn).OpenSession(ctx, &rinkv1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan *rinkv1.SessionEvent, 16)
	streamErr := make(chan error, 1)
	go func() {
		defer close(evs)
		for {
			ev, err := stream.Recv()
			if err != nil {
				streamErr <- err
				return
			}
			evs <- ev
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		opening := s.opening
		s.mu.Unlock()
		if opening {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never began to join")
		}
		time.Sleep(time.Millisecond)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if _, err := s.Drain(dctx, &rinkv1.DrainRequest{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	joining, open := s.opening, s.sess != nil
	s.mu.Unlock()
	// The name is free now: a join still under way completes.
	predDown = true
	if err := pred.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(4 * testTTL)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				if joining || open {
					t.Fatalf("Drain returned while the session was joining (%v) or open (%v)", joining, open)
				}
				t.Logf("session stream: %v", <-streamErr)
				return
			}
			if ev.GetOpened() != nil {
				t.Fatalf("the session opened after Drain had returned: %v (joining %v, open %v when Drain returned)", ev, joining, open)
			}
		case <-timeout:
			t.Fatal("the session stream never ended")
		}
	}
}

// TestShutdownTimeoutKeepsTheGrant: a Shutdown whose context ends before
// the app has released a revoked role stops serving, which ends the app's
// streams from rinkd's side. That is no sign that the app has stopped (a
// stopped or busy app has not even read the end yet, and its grant is still
// valid): the heir must still wait for the grant's validity. It was granted
// the moment rinkd closed its listeners.
func TestShutdownTimeoutKeepsTheGrant(t *testing.T) {
	t.Parallel()
	h, o, _ := stableHolder(t, "leader")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		stopped <- h.s.Shutdown(ctx)
	}()
	rev := next(t, h.evs, "REVOKED", 10*time.Second)
	// The app never releases.
	g2 := next(t, o.evs, "GRANTED", 3*testTTL)
	if until := time.UnixMilli(rev.ValidUntil); g2.at.Before(until) {
		t.Fatalf("heir granted at %v, %v before the holder's grant lapsed at %v", g2.at, until.Sub(g2.at), until)
	}
	if err := <-stopped; err == nil {
		t.Error("Shutdown returned no error though its context ended before the drain did")
	}
}
