// Package peer answers "which of the n replicas am I?" with rink's Rank,
// and splits work over the replicas with roles rather than with the unsafe
// `id % replicas == index`. It is the part of the peerindex example to copy
// into a service, and imports only rink, the etcd client and the standard
// library.
package peer

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// Shards is fixed for the life of the system: ids map to shards, shards to
// members. Changing the number of replicas never changes which shard an id
// is in.
const Shards = 64

// ShardOf is the role that owns job id.
func ShardOf(id int) string { return fmt.Sprint("shard:", id%Shards) }

// Follow calls fn with r's rank now and then each time a newer one is
// available, until r stops. No polling, no interval, no clock.
func Follow(r *rink.Rink, fn func(rink.Rank)) {
	for rk := r.Rank(); ; rk = r.Rank() {
		fn(rk)
		select {
		case <-rk.Changed():
		case <-r.Done():
			return
		}
	}
}

// Peer is one replica: a member of the rink that follows its rank.
type Peer struct {
	r    *rink.Rink
	done chan struct{}
}

// Join joins the rink called name on cli with opts, and calls onRank (from
// one goroutine) with this member's rank at once and each time it changes,
// until the member leaves.
func Join(cli *clientv3.Client, name string, onRank func(rink.Rank), opts ...rink.Option) (*Peer, error) {
	r, err := rink.New(cli, name, opts...)
	if err != nil {
		return nil, err
	}
	p := &Peer{r: r, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		Follow(r, onRank)
	}()
	return p, nil
}

// Rink returns the member's rink.
func (p *Peer) Rink() *rink.Rink { return p.r }

// Do runs job id with fn if this member holds the job's shard right now,
// and reports whether it did. fn gets the shard's role context: it must
// stop when the context ends, and may fence its writes with
// rink.Token(ctx). A shard has at most one holder at any instant, so no job
// runs on two members at once, whatever the replicas' count does meanwhile.
func (p *Peer) Do(id int, fn func(ctx context.Context)) bool {
	ctx, ok := p.r.Get(ShardOf(id))
	if !ok {
		return false
	}
	fn(ctx)
	return true
}

// Shutdown leaves the rink, which hands the member's shards over at once,
// and waits until onRank has returned for the last time.
func (p *Peer) Shutdown(ctx context.Context) error {
	err := p.r.Shutdown(ctx)
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}
