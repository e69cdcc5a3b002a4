package rink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
		{EventLoadReported, "load-reported"},
		{EventLoadBalanced, "load-balanced"},
		{EventDrained, "drained"},
		{EventDrainTimedOut, "drain-timed-out"},
		{EventIncoming, "incoming"},
		{EventSettled, "settled"},
		{EventSecondaryAcquired, "secondary-acquired"},
		{EventSecondaryReleased, "secondary-released"},
		{EventSecondaryReleased + 1, "EventKind(14)"},
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

// TestObserverRefusesMemberOptions: NewObserver refuses, by name, every
// option that configures a member, and takes the two it uses.
func TestObserverRefusesMemberOptions(t *testing.T) {
	cli := newClient(t)
	name := rinkName(t)
	for _, tc := range []struct {
		option string
		opt    Option
	}{
		{"WithMemberName", WithMemberName("m")},
		{"WithSessionTTL", WithSessionTTL(5 * time.Second)},
		{"WithRebalanceDelay", WithRebalanceDelay(time.Second)},
		{"WithSlots", WithSlots(64)},
		{"WithEvents", WithEvents(func(Event) {})},
	} {
		ob, err := NewObserver(cli, name, WithLogger(zap.NewNop()), tc.opt)
		if ob != nil {
			ob.Close()
		}
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.option) {
			t.Errorf("NewObserver with %s: %v, want ErrInvalidOption naming it", tc.option, err)
		}
		if err != nil && strings.Contains(err.Error(), "WithLogger does not apply") {
			t.Errorf("NewObserver refused WithLogger: %v", err)
		}
	}

	// Every refused option is named, and an invalid accepted one reported.
	_, err := NewObserver(cli, name, WithSlots(64), WithJoinTimeout(0), WithMemberName("m"))
	for _, want := range []string{"WithSlots", "WithMemberName", "join timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewObserver with two member options and a bad timeout: %v, want it to mention %s", err, want)
		}
	}
	if !errors.Is(err, ErrInvalidOption) {
		t.Errorf("not ErrInvalidOption: %v", err)
	}

	// The options an Observer uses are accepted.
	ob, err := NewObserver(cli, name, WithLogger(zap.NewNop()), WithJoinTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("NewObserver with WithLogger and WithJoinTimeout: %v", err)
	}
	ob.Close()

	// New still takes every option.
	r := join(t, cli, name, WithMemberName("m"), WithSlots(64), WithEvents(func(Event) {}), WithJoinTimeout(5*time.Second))
	if r.Member() != "m" {
		t.Fatalf("member %q", r.Member())
	}
}

// TestNewContextCancelWhileWaiting cancels NewContext while it waits for
// a live member's name to be freed (which would take the whole join
// timeout): it returns at once with ctx's error, and the live member is
// untouched.
func TestNewContextCancelWhileWaiting(t *testing.T) {
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("x"))
	eventually(t, 10*time.Second, "x ranked", func() bool { return a.Rank().Index == 0 })

	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		r   *Rink
		err error
	}
	res := make(chan result, 1)
	cli := newClient(t)
	go func() {
		r, err := NewContext(ctx, cli, name, WithMemberName("x"), WithSessionTTL(2*time.Second),
			WithJoinTimeout(time.Minute), WithLogger(zap.New(core)))
		res <- result{r, err}
	}()
	eventually(t, 10*time.Second, "the second x waiting for the name", func() bool {
		return logs.FilterMessage("member name in use, waiting for its key to go").Len() > 0
	})
	cancelled := time.Now()
	cancel()
	var got result
	select {
	case got = <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("NewContext did not return within 5 s of the cancellation")
	}
	if got.r != nil {
		got.r.Shutdown(context.Background())
		t.Fatal("NewContext returned a Rink after its context was cancelled")
	}
	if !errors.Is(got.err, context.Canceled) || errors.Is(got.err, ErrMemberExists) {
		t.Fatalf("NewContext error: %v, want context.Canceled", got.err)
	}
	t.Logf("returned %v after the cancellation: %v", time.Since(cancelled), got.err)
	if a.Err() != nil || a.Rank().Index != 0 {
		t.Fatalf("the live member x: Err %v, rank %+v", a.Err(), a.Rank())
	}
	// The live member's key is still its own.
	resp, err := a.cli.Get(ctxTimeout(t, 5*time.Second), a.keys.Member("x"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("member key of x: %v, %v", resp, err)
	}
}

// TestNewContextEnds covers the other ways ctx can end a join: already
// cancelled, cancelled with a cause, a deadline shorter than the join
// timeout; and that a ctx ending after the join leaves the rink running.
func TestNewContextEnds(t *testing.T) {
	name := rinkName(t)
	cli := newClient(t)
	opts := []Option{WithSessionTTL(2 * time.Second), WithRebalanceDelay(0), WithJoinTimeout(time.Minute)}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := NewContext(cancelled, cli, name, opts...); r != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("already cancelled: %v, %v", r, err)
	}

	// A member name held by a live member makes the join wait.
	held := join(t, cli, name, WithMemberName("x"))
	eventually(t, 10*time.Second, "x ranked", func() bool { return held.Rank().Index == 0 })

	why := errors.New("SIGTERM")
	caused, cancelCause := context.WithCancelCause(context.Background())
	time.AfterFunc(200*time.Millisecond, func() { cancelCause(why) })
	began := time.Now()
	r, err := NewContext(caused, cli, name, append(opts, WithMemberName("x"))...)
	if r != nil || !errors.Is(err, context.Canceled) || !errors.Is(err, why) {
		t.Fatalf("cancelled with a cause: %v, %v", r, err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("cancelled with a cause: returned after %v", d)
	}

	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began = time.Now()
	r, err = NewContext(short, cli, name, append(opts, WithMemberName("x"))...)
	if r != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, %v", r, err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("deadline: returned after %v", d)
	}

	// ctx bounds the join only.
	ctx, cancel := context.WithCancel(context.Background())
	r, err = NewContext(ctx, cli, name, append(opts, WithMemberName("y"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	cancel()
	eventually(t, 10*time.Second, "y ranked after its join context was cancelled", func() bool { return r.Rank().Index >= 0 })
	if _, err := r.AwaitRoleContext(ctxTimeout(t, 10*time.Second), roleOf(t, r)); err != nil {
		t.Fatalf("y after its join context was cancelled: %v", err)
	}
	if r.Err() != nil {
		t.Fatalf("Err of y: %v", r.Err())
	}
}
