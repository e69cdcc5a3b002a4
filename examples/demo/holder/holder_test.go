package holder

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

// loseFirst hands out the role contexts of a real rink, but the first
// holding is lost before its context is handed out: the member's lease is
// revoked and the context has ended (cause rink.ErrFenced) when AwaitRole
// returns it — the case of a role lost at once after it was acquired.
type loseFirst struct {
	t    *testing.T
	r    *rink.Rink
	lose func() error
	done atomic.Bool
}

func (l *loseFirst) AwaitRole(role string) context.Context {
	ctx := l.r.AwaitRole(role)
	if ctx.Err() == nil && l.done.CompareAndSwap(false, true) {
		if err := l.lose(); err != nil {
			l.t.Error(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			l.t.Error("the holding did not end after the member's lease was revoked")
		}
	}
	return ctx
}

// TestHoldAfterImmediateLoss loses the role at once after acquiring it, and
// checks that the loop holds it again once the member has rejoined. (The
// demo's old loop returned on ctx.Err() != nil right after AwaitRole, and so
// stopped for good here.)
func TestHoldAfterImmediateLoss(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	r, err := rink.New(cli, "hold", rink.WithMemberName("m"), rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	lose := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return extest.RevokeMember(ctx, cli, "hold", "m")
	}

	type holding struct {
		token int64
		cause error // the context's cause when work got it
	}
	got := make(chan holding, 16)
	returned := make(chan error, 1)
	go func() {
		returned <- Hold(&loseFirst{t: t, r: r, lose: lose}, "leader", func(ctx context.Context) {
			token, _ := rink.Token(ctx)
			got <- holding{token, context.Cause(ctx)}
			<-ctx.Done()
		})
	}()

	deadline := time.After(30 * time.Second)
	var first holding
	select {
	case first = <-got:
	case err := <-returned:
		t.Fatalf("Hold returned (%v) after the role was lost at once; want it to await the role again", err)
	case <-deadline:
		t.Fatal("no holding within 30s")
	}
	if !errors.Is(first.cause, rink.ErrFenced) {
		t.Fatalf("first holding's cause %v, want %v", first.cause, rink.ErrFenced)
	}
	select {
	case second := <-got:
		if second.cause != nil || second.token <= first.token {
			t.Fatalf("second holding: token %d, cause %v; want a live holding with a token above %d", second.token, second.cause, first.token)
		}
	case err := <-returned:
		t.Fatalf("Hold returned (%v) after the role was lost at once; want it to await the role again", err)
	case <-deadline:
		t.Fatal("the role was not held again within 30s of the loss")
	}

	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Hold did not return after Shutdown")
	}
}

func TestHoldEmptyRole(t *testing.T) {
	if err := Hold(nil, "", nil); !errors.Is(err, rink.ErrInvalidRole) {
		t.Fatalf("Hold with an empty role: %v, want %v", err, rink.ErrInvalidRole)
	}
}
