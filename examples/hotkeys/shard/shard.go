// Package shard is the part of the hotkeys example to copy into a service:
// a member that serves the keys it owns, records the work each key costs
// with AddLoad, and lets rink's leader move keys between members by load.
//
// Requests reach any member; Route sends each to the owner of its key
// (rink's Owner), and the owner serves it while it holds the key's role.
package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// Config is a shard member's configuration.
type Config struct {
	// Rink is the rink's name; every member of the service uses the same.
	Rink string
	// Tolerance is how far above the mean load a member may be before the
	// rink's leader moves keys from the most to the least loaded members
	// (rink.WithImbalanceTolerance): it moves them until all are within
	// Tolerance/2 of the mean. Zero keeps rink's default, 10 %; a negative
	// value turns load balancing off, to balance the number of keys
	// (slots) per member only.
	Tolerance float64
	// LoadInterval is how often members report their load and the leader
	// may move keys (rink.WithLoadInterval; 0: rink's default, 10 s).
	LoadInterval time.Duration
	// LoadWindow is how far back the reported rates look
	// (rink.WithLoadWindow; 0: rink's default, 1 minute).
	LoadWindow time.Duration
}

// Shard is one member.
type Shard struct {
	r *rink.Rink
}

// ErrNotOwner reports a request for a key this member does not hold (it
// moved since the caller routed it): route it again.
var ErrNotOwner = errors.New("shard: this member does not hold the key")

// Start joins the rink. opts are passed on to rink.New after the options
// cfg implies, so that a caller may set the member name, TTL and logger.
func Start(cli *clientv3.Client, cfg Config, opts ...rink.Option) (*Shard, error) {
	var o []rink.Option
	switch {
	case cfg.Tolerance > 0:
		o = append(o, rink.WithImbalanceTolerance(cfg.Tolerance))
	case cfg.Tolerance < 0:
		o = append(o, rink.WithImbalanceTolerance(0))
	}
	if cfg.LoadInterval > 0 {
		o = append(o, rink.WithLoadInterval(cfg.LoadInterval))
	}
	if cfg.LoadWindow > 0 {
		o = append(o, rink.WithLoadWindow(cfg.LoadWindow))
	}
	r, err := rink.New(cli, cfg.Rink, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("shard: joining: %w", err)
	}
	return &Shard{r: r}, nil
}

// Name is the member's name, as Owner reports it.
func (s *Shard) Name() string { return s.r.Member() }

// Owner returns the member that owns key, for routing.
func (s *Shard) Owner(key string) (string, bool) { return s.r.Owner(key) }

// Serve handles one request for key, which costs cost units of work (a
// request, bytes, CPU time: any measure every member uses alike). It
// serves only while this member holds the key, and records the cost, so
// that the leader sees where the work is.
func (s *Shard) Serve(key string, cost float64) error {
	ctx, ok := s.r.Get(key)
	if !ok || ctx.Err() != nil {
		return ErrNotOwner
	}
	// ... the work itself, under ctx ...
	s.r.AddLoad(key, cost)
	return nil
}

// Shutdown leaves the rink; the member's keys move at once.
func (s *Shard) Shutdown(ctx context.Context) error { return s.r.Shutdown(ctx) }
