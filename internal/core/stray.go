package core

import (
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/rink-go/rink/internal/wire"
)

// StrayDelete decides the deletion of a stray key (see sweepStrays), or of
// the map key of a lineage a restore brought back (see dropLineage), or a
// member's own key written back over a value somebody else wrote into it
// (see NewKeyRepair): the key as the member saw it, guarded by the
// revision it saw it at, so that a key written since is left alone; a
// request that fails is sent again after a backoff, while the incarnation
// that saw it lasts. One machine, driven by the production driver and by
// the simulator.
type StrayDelete struct {
	Key   string
	rev   int64
	inc   *Inc
	retry func() time.Duration
	// put, when set, is written instead of the deletion, provided the key
	// also passes also (a repair: see NewKeyRepair).
	put  *etcdserverpb.RequestOp
	also []*etcdserverpb.Compare
}

// NewKeyRepair returns the write of value into key, bound to inc's lease,
// over the value seen at mod revision rev, provided the key is still inc's
// (its create revision and lease): a member's own key that somebody else
// wrote into, put back.
func NewKeyRepair(key string, rev int64, value string, inc *Inc, retry func() time.Duration) *StrayDelete {
	return &StrayDelete{Key: key, rev: rev, inc: inc, retry: retry,
		put:  wire.Put(key, value, int64(inc.Lease)),
		also: []*etcdserverpb.Compare{wire.CreateRevisionEq(key, inc.CreateRev), wire.LeaseEq(key, int64(inc.Lease))}}
}

// NewStrayDelete returns the deletion of key, seen at mod revision rev by
// the incarnation inc.
func NewStrayDelete(key string, rev int64, inc *Inc, retry func() time.Duration) *StrayDelete {
	return &StrayDelete{Key: key, rev: rev, inc: inc, retry: retry}
}

// Txn is the request to send.
func (d *StrayDelete) Txn() *etcdserverpb.TxnRequest {
	if d.put != nil {
		return &etcdserverpb.TxnRequest{
			Compare: append([]*etcdserverpb.Compare{wire.ModRevisionEq(d.Key, d.rev)}, d.also...),
			Success: []*etcdserverpb.RequestOp{d.put},
		}
	}
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{wire.ModRevisionEq(d.Key, d.rev)},
		Success: []*etcdserverpb.RequestOp{wire.Delete(d.Key)},
	}
}

// Replied handles the answer: whether the key was deleted or written (then
// the driver logs it), and, when the request failed and the incarnation
// lasts, the wait before sending it again (0: done).
func (d *StrayDelete) Replied(resp *etcdserverpb.TxnResponse, err error) (deleted bool, again time.Duration) {
	if err == nil {
		return resp.Succeeded, 0
	}
	if d.inc.Ended() {
		return false, 0
	}
	return false, d.retry()
}
