// Package trader gives each trading pair to one member of a rink, which
// keeps the pair's order book in memory while it holds the pair and
// persists every change to etcd with a write fenced by the holding's token.
// It is the part of the symbols example to copy into a service, and imports
// only rink, the etcd client, zap and the standard library.
//
// The fence is claimed when a holding starts, before the book is read: a
// transaction raises the pair's fence key to the holding's token (unless it
// holds a higher one already) and reads the book. From then on every write
// of an earlier holder, whose token is lower — a member paused by GC or
// SIGSTOP, cut off from etcd, or just slow — is refused, so no order that
// the new holder has not seen can be acknowledged, and none it acknowledges
// can be overwritten.
package trader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

var (
	// ErrStale is returned for a write refused because a newer holder of
	// the pair has claimed its fence.
	ErrStale = errors.New("trader: a newer holder claimed the pair: write refused")
	// ErrNotHeld is returned by Order when this member does not hold the
	// pair, or has not loaded its book yet: send the order to Owner(pair).
	ErrNotHeld = errors.New("trader: pair not held here")
)

// Book is a pair's state: what its holder keeps in memory and persists.
type Book struct {
	Orders int     `json:"orders"`
	Volume float64 `json:"volume"`
	Token  int64   `json:"token"` // the fencing token of the write that stored it
}

// BookKey and FenceKey are where a pair's book and the token of its newest
// holder are stored.
func BookKey(pair string) string  { return "symbols/books/" + pair }
func FenceKey(pair string) string { return "symbols/fence/" + pair }

// token20 formats a token so that etcd's byte-wise comparison of values
// orders tokens numerically.
func token20(t int64) string { return fmt.Sprintf("%020d", t) }

// opTimeout bounds each etcd request, so that a hung request becomes an
// error to retry.
const opTimeout = 5 * time.Second

// Claim starts a holding of pair in the store: in one transaction, it
// raises the pair's fence to token unless the fence holds a higher token
// already (ErrStale: a newer holder exists), and reads the pair's book. It
// is idempotent: a claim retried after an error of unknown outcome succeeds.
func Claim(ctx context.Context, cli *clientv3.Client, pair string, token int64) (Book, error) {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(FenceKey(pair)), ">", token20(token))).
		Else(clientv3.OpPut(FenceKey(pair), token20(token)), clientv3.OpGet(BookKey(pair))).
		Commit()
	if err != nil {
		return Book{}, err
	}
	if resp.Succeeded {
		return Book{}, ErrStale
	}
	var b Book
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := json.Unmarshal(kvs[0].Value, &b); err != nil {
			return Book{}, fmt.Errorf("trader: book of %s: %w", pair, err)
		}
	}
	return b, nil
}

// Save persists b as pair's book if the pair's fence still holds token, the
// token of the holding that claimed it; otherwise it returns ErrStale.
func Save(ctx context.Context, cli *clientv3.Client, pair string, b Book, token int64) error {
	b.Token = token
	val, err := json.Marshal(b)
	if err != nil {
		return err
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(FenceKey(pair)), "=", token20(token))).
		Then(clientv3.OpPut(BookKey(pair), string(val))).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return ErrStale
	}
	return nil
}

// Config says which rink to join and which pairs to hold.
type Config struct {
	// Rink is the name of the rink.
	Rink string
	// Pairs are the pairs this member is ready to hold.
	Pairs []string
	// Log receives takeovers and errors (default: none).
	Log *zap.Logger
}

// Trader is one member: a rink membership and the books of the pairs it
// holds.
type Trader struct {
	cli   *clientv3.Client
	r     *rink.Rink
	log   *zap.Logger
	mu    sync.Mutex
	held  map[string]*holding // pair -> its current holding, once claimed
	loops sync.WaitGroup
}

// holding is one holding of a pair: the role's context and token, and the
// book read when the holding claimed the fence. Orders use the three
// together, never a book read under another token.
type holding struct {
	ctx   context.Context
	token int64
	mu    sync.Mutex // one order at a time on the pair
	book  Book
	dirty bool // the outcome of the last save is unknown: read the book again
}

// Start joins cfg.Rink on cli with opts and holds each of cfg.Pairs while
// the rink gives it to this member.
func Start(cli *clientv3.Client, cfg Config, opts ...rink.Option) (*Trader, error) {
	for _, pair := range cfg.Pairs {
		if pair == "" {
			return nil, fmt.Errorf("%w: empty pair", rink.ErrInvalidRole)
		}
	}
	r, err := rink.New(cli, cfg.Rink, opts...)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	t := &Trader{cli: cli, r: r, log: log.With(zap.String("member", r.Member())), held: map[string]*holding{}}
	for _, pair := range cfg.Pairs {
		t.loops.Add(1)
		go func() {
			defer t.loops.Done()
			t.hold(pair)
		}()
	}
	return t, nil
}

// Rink returns the member's rink, for Owner and Rank.
func (t *Trader) Rink() *rink.Rink { return t.r }

// Shutdown leaves the rink, which hands every pair over at once, and waits
// for the pairs' loops to return.
func (t *Trader) Shutdown(ctx context.Context) error {
	err := t.r.Shutdown(ctx)
	t.loops.Wait()
	return err
}

// Holds reports whether this member holds pair and has its book, ready for
// orders.
func (t *Trader) Holds(pair string) bool {
	t.mu.Lock()
	h := t.held[pair]
	t.mu.Unlock()
	return h != nil && h.ctx.Err() == nil
}

// hold is the loop for one pair: on each holding, claim the fence and read
// the book; drop it when the holding ends.
func (t *Trader) hold(pair string) {
	for {
		ctx := t.r.AwaitRole(pair)
		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
			return
		}
		token, _ := rink.Token(ctx)
		h := &holding{ctx: ctx, token: token}
		err := retry(ctx, func() (err error) {
			cctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			h.book, err = Claim(cctx, t.cli, pair, token)
			if err != nil && !errors.Is(err, ErrStale) && ctx.Err() == nil {
				t.log.Warn("claiming a pair failed; retrying", zap.String("pair", pair), zap.Error(err))
			}
			return err
		}, ErrStale)
		switch {
		case err == nil:
			t.log.Info("holding", zap.String("pair", pair), zap.Int64("token", token), zap.Int("orders", h.book.Orders))
			t.mu.Lock()
			t.held[pair] = h
			t.mu.Unlock()
		case errors.Is(err, ErrStale):
			// A newer holder exists, so this holding is about to end.
			t.log.Warn("pair claimed by a newer holder", zap.String("pair", pair), zap.Int64("token", token))
		}
		<-ctx.Done()
		t.mu.Lock()
		if t.held[pair] == h {
			delete(t.held, pair)
		}
		t.mu.Unlock()
	}
}

// Order handles an order for a pair this member holds, and returns the book
// once the order is persisted: then, and only then, is it acknowledged. It
// returns ErrNotHeld or ErrStale when the order belongs elsewhere.
func (t *Trader) Order(ctx context.Context, pair string, qty float64) (Book, error) {
	t.mu.Lock()
	h := t.held[pair]
	t.mu.Unlock()
	if h == nil {
		return Book{}, ErrNotHeld
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return Book{}, ErrNotHeld
	}
	// Requests end with the caller's context, and within opTimeout, but
	// not with the holding: the fence, not the holding's context, decides
	// whether a write lands. A write cancelled when the holding ends might
	// land or not, and the caller could not know whether its order is in.
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if h.dirty {
		b, err := Claim(rctx, t.cli, pair, h.token)
		if err != nil {
			return Book{}, err
		}
		h.book, h.dirty = b, false
	}
	next := h.book
	next.Orders++
	next.Volume += qty
	if err := Save(rctx, t.cli, pair, next, h.token); err != nil {
		if !errors.Is(err, ErrStale) {
			h.dirty = true // the write may have been applied: read the book again first
		}
		return Book{}, err
	}
	next.Token = h.token
	h.book = next
	return next, nil
}

// retry calls f until it returns nil or one of the final errors, or ctx
// ends, waiting between attempts: 50 ms at first, doubling up to 2 s, with
// jitter. It returns f's last error, or ctx's.
func retry(ctx context.Context, f func() error, final ...error) error {
	wait := 50 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		for _, e := range final {
			if errors.Is(err, e) {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 2*time.Second)
	}
}
