package rink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestEventKindString(t *testing.T) {
	for _, tc := range []struct {
		kind EventKind
		want string
	}{
		{EventAcquired, "acquired"},
		{EventReleased, "released"},
		{EventFenced, "fenced"},
		{EventRejoined, "rejoined"},
		{EventMapApplied, "map-applied"},
		{EventRankChanged, "rank-changed"},
		{EventRankChanged + 1, "EventKind(6)"},
		{-1, "EventKind(-1)"},
	} {
		if got := tc.kind.String(); got != tc.want {
			t.Errorf("EventKind(%d).String() = %q, want %q", int(tc.kind), got, tc.want)
		}
		if got := fmt.Sprint(tc.kind); got != tc.want {
			t.Errorf("fmt.Sprint(EventKind(%d)) = %q, want %q", int(tc.kind), got, tc.want)
		}
	}
}

// TestErrAfterShutdown: Err is nil while the rink runs, and ErrShutdown
// once Done is closed after Shutdown, which itself reports a clean leave.
func TestErrAfterShutdown(t *testing.T) {
	r := join(t, newClient(t), rinkName(t))
	if err := r.Err(); err != nil {
		t.Fatalf("Err of a running rink: %v", err)
	}
	if err := r.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after Shutdown returned")
	}
	if err := r.Err(); err != ErrShutdown {
		t.Fatalf("Err after Shutdown = %v, want ErrShutdown", err)
	}
	if err := r.Shutdown(context.Background()); err != nil || r.Err() != ErrShutdown {
		t.Fatalf("second Shutdown = %v, Err = %v", err, r.Err())
	}
}

// TestErrClientClosed: closing the etcd client under a running rink stops
// it, and Err says why.
func TestErrClientClosed(t *testing.T) {
	cli := newClient(t)
	r := join(t, cli, rinkName(t))
	eventually(t, 10*time.Second, "ranked", func() bool { return r.Rank().Index == 0 })
	if err := r.Err(); err != nil {
		t.Fatalf("Err of a running rink: %v", err)
	}
	cli.Close()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed within 10 s of closing the client")
	}
	if err := r.Err(); err != ErrClientClosed {
		t.Fatalf("Err after the client was closed = %v, want ErrClientClosed", err)
	}
	if err := r.Shutdown(context.Background()); !errors.Is(err, ErrClientClosed) {
		t.Fatalf("Shutdown after the client was closed = %v", err)
	}
	if err := r.Err(); err != ErrClientClosed {
		t.Fatalf("Err changed after Shutdown: %v", err)
	}
}
