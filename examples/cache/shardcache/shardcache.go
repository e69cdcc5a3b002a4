// Package shardcache is the part of the cache example to copy into a
// service: a read-through cache whose key space is cut into shards, each
// shard a rink role ("shard-17") served by exactly one member.
//
// A Cache watches every shard role on the member's rink (rink.Watch) and
//
//   - on Assigned, starts serving the shard, with whatever Warm preloaded
//     for it or with an empty cache;
//   - on Revoked, stops accepting requests for the shard, waits for the
//     ones in flight to be answered (with rink.WithDrainTimeout the shard's
//     heir starts only then), and drops the shard's entries;
//   - on Warm (with rink.WithWarmup, before a planned move reaches this
//     member, while the current holder still serves the shard), reads the
//     shard's hottest keys from the store, so that the first requests
//     after the move are hits.
//
// Requests reach the member that owns a key's shard (route with rink's
// Owner or an Observer); Get answers ErrNotOwner when the shard is not
// served here (it has just moved): route the request again.
package shardcache

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rink-go/rink"
)

// Store is the slow store behind the cache.
type Store interface {
	// Get reads key's value.
	Get(ctx context.Context, key string) (string, error)
	// Hot returns up to n keys of shard worth preloading, the most
	// requested first. Where that knowledge comes from is the service's
	// business: the store's own statistics, an access log, a list the
	// shard's holder publishes from time to time.
	Hot(ctx context.Context, shard string, n int) ([]string, error)
}

// Config is a cache member's configuration. Every member and every router
// of the service must use the same Shards.
type Config struct {
	// Shards is how many shards the key space is cut into (at least 1).
	// Each is a role; more shards than members, by far, spread the keys
	// evenly (rink balances the slots the roles hash to, not the roles).
	Shards int
	// Preload is how many of a shard's hottest keys Warm reads (0: 32).
	Preload int
	// KeepWarm is how long keys preloaded for a shard are kept while the
	// shard has not been assigned to this member (0: one minute): a move
	// that is announced and then withdrawn leaves nothing behind for long.
	KeepWarm time.Duration
}

// ErrNotOwner reports a request for a key whose shard this member does not
// serve (it moved since the caller routed it): route it again.
var ErrNotOwner = errors.New("shardcache: this member does not serve the key's shard")

// ShardOf returns the role of key's shard: "shard-N", N in [0, shards).
func ShardOf(key string, shards int) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return fmt.Sprint("shard-", h.Sum32()%uint32(shards))
}

// Roles returns the roles of all shards, "shard-0" to "shard-(shards-1)".
func Roles(shards int) []string {
	out := make([]string, shards)
	for i := range out {
		out[i] = fmt.Sprint("shard-", i)
	}
	return out
}

// shard is the cache of one shard.
type shard struct {
	roleCtx  context.Context // the holding's context; nil while only preloaded
	inflight sync.WaitGroup  // requests being served (Add under Cache.mu)
	expire   *time.Timer     // drops a preloaded shard never assigned

	mu      sync.Mutex
	entries map[string]string
}

func newShard() *shard { return &shard{entries: map[string]string{}} }

func (sh *shard) get(key string) (string, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.entries[key]
	return v, ok
}

func (sh *shard) put(key, v string) {
	sh.mu.Lock()
	sh.entries[key] = v
	sh.mu.Unlock()
}

// Stats counts a member's requests since New.
type Stats struct {
	// Hits and Misses count the requests served from the cache and those
	// read through to the store.
	Hits, Misses int64
	// Preloaded counts the keys Warm read ahead of a move.
	Preloaded int64
}

// Cache is one member's part of the cache.
type Cache struct {
	store Store
	cfg   Config
	set   *rink.RoleSet

	mu     sync.Mutex
	served map[string]*shard // shards assigned and not revoked
	warm   map[string]*shard // shards preloaded, not assigned yet
	closed bool

	hits, misses, preloaded atomic.Int64
}

// New serves shards of the key space on r: it watches every shard's role
// and serves those r holds. Close the cache when the member is done: after
// r.Shutdown, so that the shards are handed over through Revoked (drained).
func New(r *rink.Rink, store Store, cfg Config) (*Cache, error) {
	if cfg.Shards < 1 {
		return nil, fmt.Errorf("shardcache: %d shards: want at least 1", cfg.Shards)
	}
	if store == nil {
		return nil, errors.New("shardcache: no store")
	}
	if cfg.Preload <= 0 {
		cfg.Preload = 32
	}
	if cfg.KeepWarm <= 0 {
		cfg.KeepWarm = time.Minute
	}
	c := &Cache{store: store, cfg: cfg, served: map[string]*shard{}, warm: map[string]*shard{}}
	set, err := r.Watch(rink.Handler{Assigned: c.assigned, Revoked: c.revoked, Warm: c.preload}, Roles(cfg.Shards)...)
	if err != nil {
		return nil, err
	}
	c.set = set
	return c, nil
}

// Get returns key's value and whether it came from the cache. It serves
// only keys whose shard this member serves, and returns ErrNotOwner for
// the others. A miss reads through to the store under ctx.
func (c *Cache) Get(ctx context.Context, key string) (value string, hit bool, err error) {
	role := ShardOf(key, c.cfg.Shards)
	c.mu.Lock()
	sh := c.served[role]
	if sh == nil || sh.roleCtx.Err() != nil {
		c.mu.Unlock()
		return "", false, ErrNotOwner
	}
	sh.inflight.Add(1) // before revoked can look: it takes the shard out under c.mu first
	c.mu.Unlock()
	defer sh.inflight.Done()
	if v, ok := sh.get(key); ok {
		c.hits.Add(1)
		return v, true, nil
	}
	v, err := c.store.Get(ctx, key)
	if err != nil {
		return "", false, err
	}
	sh.put(key, v)
	c.misses.Add(1)
	return v, false, nil
}

// Serves reports whether this member serves shard (a role from Roles).
func (c *Cache) Serves(shard string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	sh := c.served[shard]
	return sh != nil && sh.roleCtx.Err() == nil
}

// Stats returns the member's counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Preloaded: c.preloaded.Load()}
}

// Close stops serving: every shard is revoked and its entries dropped. It
// does not leave the rink; call it after the rink's Shutdown.
func (c *Cache) Close() {
	c.set.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for role, sh := range c.warm {
		sh.expire.Stop()
		delete(c.warm, role)
	}
}

// assigned starts serving role (Handler.Assigned).
func (c *Cache) assigned(ctx context.Context, role string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sh := c.warm[role]
	if sh != nil {
		sh.expire.Stop()
		delete(c.warm, role)
	} else {
		sh = newShard()
	}
	sh.roleCtx = ctx
	c.served[role] = sh
}

// revoked stops serving role (Handler.Revoked): no new request is taken,
// the requests in flight are answered — this is the drain, which holds
// the heir back under rink.WithDrainTimeout — and the entries are dropped.
// A write-back cache would flush its dirty entries here.
func (c *Cache) revoked(role string) {
	c.mu.Lock()
	sh := c.served[role]
	delete(c.served, role)
	c.mu.Unlock()
	if sh == nil {
		return
	}
	sh.inflight.Wait()
	sh.mu.Lock()
	clear(sh.entries)
	sh.mu.Unlock()
}

// preload reads role's hottest keys before the shard moves here
// (Handler.Warm). It returns when they are read, or when ctx ends (the
// move was withdrawn): returning tells rink this member is ready. Keys
// read before the shard is assigned wait for it for cfg.KeepWarm.
func (c *Cache) preload(ctx context.Context, role string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	sh := c.served[role]
	if sh == nil { // not served yet, as expected: preload into a shard of its own
		if sh = c.warm[role]; sh == nil { // (an announcement repeated keeps what was read)
			sh = newShard()
			c.warm[role] = sh
			sh.expire = time.AfterFunc(c.cfg.KeepWarm, func() { c.dropWarm(role, sh) })
		} else {
			sh.expire.Reset(c.cfg.KeepWarm)
		}
	}
	c.mu.Unlock()
	keys, err := c.store.Hot(ctx, role, c.cfg.Preload)
	if err != nil {
		return
	}
	for _, key := range keys {
		if ctx.Err() != nil {
			return
		}
		if _, ok := sh.get(key); ok {
			continue
		}
		if v, err := c.store.Get(ctx, key); err == nil {
			sh.put(key, v)
			c.preloaded.Add(1)
		}
	}
}

// dropWarm forgets a preloaded shard that was never assigned.
func (c *Cache) dropWarm(role string, sh *shard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warm[role] == sh {
		delete(c.warm, role)
	}
}
