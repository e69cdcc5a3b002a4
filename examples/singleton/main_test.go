package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/embedetcd"
)

// TestSingleton runs two copies against one etcd: one ticks; when it
// stops, the other takes over.
func TestSingleton(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var outA, outB testutil.Buffer
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() {
		errs <- run(ctxA, &outA, config{endpoints: srv.Endpoint(), name: "a", every: 20 * time.Millisecond, ttl: 2 * time.Second})
	}()
	testutil.Eventually(t, 15*time.Second, "a ticks", func() bool { return strings.Contains(outA.String(), "tick 2 ") })
	go func() {
		errs <- run(ctxB, &outB, config{endpoints: srv.Endpoint(), name: "b", every: 20 * time.Millisecond, ttl: 2 * time.Second})
	}()
	testutil.Eventually(t, 15*time.Second, "b joined", func() bool { return strings.Contains(outB.String(), "joined") })
	time.Sleep(100 * time.Millisecond) // b must stay idle while a leads
	if strings.Contains(outB.String(), "tick") {
		t.Fatalf("b ticks while a leads:\n%s", outB.String())
	}
	stopA()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "b takes over", func() bool { return strings.Contains(outB.String(), "tick 2 ") })
	if got := outA.String(); !strings.Contains(got, `stopped leading {"member": "a"`) || !strings.Contains(got, `"cause": "rink: shut down"`) {
		t.Errorf("a's output:\n%s", got)
	}
	stopB()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func TestBadInterval(t *testing.T) {
	if err := run(context.Background(), &testutil.Buffer{}, config{every: 0}); err == nil {
		t.Fatal("-every 0 accepted")
	}
}
