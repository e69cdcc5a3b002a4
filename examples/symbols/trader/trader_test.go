package trader

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stored(t *testing.T, cli *clientv3.Client, pair string) Book {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, BookKey(pair))
	if err != nil {
		t.Fatal(err)
	}
	var b Book
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestPausedOwnerRefused pauses the holder of a pair in the middle of an
// order (it has read its book and token, and writes when it resumes) while
// the pair moves to another member. The old holder's write must be refused
// as soon as the new holder has taken the pair over — before the new
// holder's first write — and every acknowledged order must be in the stored
// book. (The old trader read the book with a plain Get and claimed the
// fence only with its first write: the paused write was accepted and
// acknowledged, and the new holder's first write then overwrote it.)
func TestPausedOwnerRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cliA, cliB := extest.Client(t, srv), extest.Client(t, srv)
	defer cliA.Close()
	defer cliB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const pair = "BTC/ETH"
	opts := []rink.Option{rink.WithSessionTTL(2 * time.Second), rink.WithRebalanceDelay(time.Minute)}

	a, err := Start(cliA, Config{Rink: "paused", Pairs: []string{pair}}, append(opts, rink.WithMemberName("a"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	eventually(t, "a holds the pair", func() bool { return a.Holds(pair) })
	acked := 0
	if _, err := a.Order(ctx, pair, 1); err != nil {
		t.Fatal(err)
	}
	acked++

	// a pauses in the middle of its next order.
	a.mu.Lock()
	h := a.held[pair]
	a.mu.Unlock()
	paused, pausedToken := h.book, h.token
	paused.Orders++
	paused.Volume += 2

	// Meanwhile b joins, and a's lease ends (here: a leaves); b takes the
	// pair over.
	b, err := Start(cliB, Config{Rink: "paused", Pairs: []string{pair}}, append(opts, rink.WithMemberName("b"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	eventually(t, "b listed as waiting", func() bool { return b.Rink().Rank().Waiting })
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b holds the pair", func() bool { return b.Holds(pair) })
	b.mu.Lock()
	bToken := b.held[pair].token
	b.mu.Unlock()
	if got := bToken; got <= pausedToken {
		t.Fatalf("b's token %d, not above a's %d", got, pausedToken)
	}

	// a resumes and writes with its old token.
	err = Save(ctx, cliA, pair, paused, pausedToken)
	if err == nil {
		acked++ // a's client is told the order is in
	}
	if _, err := b.Order(ctx, pair, 4); err != nil {
		t.Fatal(err)
	}
	acked++

	if !errors.Is(err, ErrStale) {
		t.Errorf("a's write after b's takeover: %v, want %v", err, ErrStale)
	}
	if got := stored(t, cliB, pair); got.Orders != acked {
		t.Errorf("stored book has %d orders (volume %v); %d were acknowledged", got.Orders, got.Volume, acked)
	}
}

// TestOrderNotHeld: a member that does not hold the pair sends the caller
// elsewhere.
func TestOrderNotHeld(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	tr, err := Start(cli, Config{Rink: "notheld", Pairs: []string{"A/B"}}, rink.WithSessionTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if _, err := tr.Order(context.Background(), "C/D", 1); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("order for a pair not held: %v, want %v", err, ErrNotHeld)
	}
	eventually(t, "holds A/B", func() bool { return tr.Holds("A/B") })
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Order(context.Background(), "A/B", 1); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("order after Shutdown: %v, want %v", err, ErrNotHeld)
	}
}

// TestHoldingEndsMidOrder ends a holding while its order's write is in
// flight, as a rebalance does. The order's outcome must be known: either it
// is acknowledged and stored, or it is refused (ErrNotHeld, ErrStale) and not
// stored. (Order's requests ended with the holding: the write was cancelled
// after it was sent, and Order returned context.Canceled, an outcome the
// caller cannot know; the symbols example failed on it.)
func TestHoldingEndsMidOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	var hook atomic.Pointer[func()]
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/etcdserverpb.KV/Txn" {
				if f := hook.Swap(nil); f != nil {
					(*f)()
				}
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const pair = "BTC/ETH"
	tr, err := Start(cli, Config{Rink: "midorder", Pairs: []string{pair}}, rink.WithSessionTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	eventually(t, "holds the pair", func() bool { return tr.Holds(pair) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := tr.Order(ctx, pair, 1); err != nil {
		t.Fatal(err)
	}

	// The holding ends as the next order's write is sent.
	tr.mu.Lock()
	real := tr.held[pair]
	hctx, end := context.WithCancel(real.ctx)
	defer end()
	tr.held[pair] = &holding{ctx: hctx, token: real.token, book: real.book}
	tr.mu.Unlock()
	endNow := func() { end() }
	hook.Store(&endNow)
	_, err = tr.Order(ctx, pair, 2)
	want := 1
	switch {
	case err == nil:
		want = 2
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrStale):
	default:
		t.Fatalf("order whose holding ended mid-write: %v, want success, %v or %v", err, ErrNotHeld, ErrStale)
	}
	if got := stored(t, cli, pair); got.Orders != want {
		t.Errorf("stored book has %d orders; %d were acknowledged", got.Orders, want)
	}
}
