package core

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/rink-go/rink/internal/wire"
)

// OwnNameCheck decides the check a newcomer in the narrow view makes for
// an earlier incarnation of its own name (see Rink.checkOwnName): it
// lists the election keys, then waits, one GhostAsk after another, until
// every lease that campaigns under the name, other than this process's
// own, is gone. Only then may the newcomer start the name's slots: a
// process of the same name cut off from etcd may still act on them until
// its lease ends. One machine, driven by the production driver and by the
// simulator.
//
// Invariant: waiting holds the leases still to wait for, in the listing's
// order; none is own or this process's incarnation at the listing.
type OwnNameCheck struct {
	k       wire.Keys
	member  string
	own     int64 // the lease of the incarnation that asked
	retry   func() time.Duration
	log     *zap.Logger
	waiting []int64
}

// OwnNameStep is what an OwnNameCheck wants next: the election keys
// listed (List, After from now), a lease awaited until gone (Await: run a
// GhostAsk that does not tell, then call Gone), or nothing more (Done).
type OwnNameStep struct {
	List  bool
	After time.Duration
	Await int64
	Done  bool
}

// NewOwnNameCheck returns the check for member's name, asked by the
// incarnation of lease own, and its first step: the listing, at once.
func NewOwnNameCheck(k wire.Keys, member string, own int64, retry func() time.Duration, log *zap.Logger) (*OwnNameCheck, OwnNameStep) {
	return &OwnNameCheck{k: k, member: member, own: own, retry: retry, log: log}, OwnNameStep{List: true}
}

// Range is the key range the listing reads: every election key.
func (c *OwnNameCheck) Range() (key, end string) {
	return c.k.Election(), wire.PrefixEnd(c.k.Election())
}

// Listed handles the listing's answer (kvs, or err); cur is the lease of
// this process's incarnation as the listing returns (0: none), whose key
// is not an earlier incarnation's either.
func (c *OwnNameCheck) Listed(kvs []*mvccpb.KeyValue, err error, cur int64) OwnNameStep {
	if err != nil {
		c.log.Warn("listing the election keys failed, retrying", zap.Error(err))
		return OwnNameStep{List: true, After: c.retry()}
	}
	c.waiting = c.waiting[:0]
	for _, kv := range kvs {
		if kv.Lease == c.own || cur != 0 && kv.Lease == cur {
			continue
		}
		if string(kv.Value) == c.member && c.k.IsCandidate(kv) { // (names first: 10,000 keys at 10,000 members)
			c.waiting = append(c.waiting, kv.Lease)
		}
	}
	return c.next()
}

// Gone handles the end of the wait for the lease Await named.
func (c *OwnNameCheck) Gone() OwnNameStep {
	c.waiting = c.waiting[1:]
	return c.next()
}

func (c *OwnNameCheck) next() OwnNameStep {
	if len(c.waiting) == 0 {
		return OwnNameStep{Done: true}
	}
	return OwnNameStep{Await: c.waiting[0]}
}
