package core

import (
	"fmt"
	"time"

	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

// campaigner decides what a campaign for leader does (see Rink.campaign):
// etcd's election recipe as a state machine with no I/O. It writes the
// candidate's election key if it is missing, then, until no election key
// with a lower create revision is left, looks at the one just below its
// own: it deletes that key, guarded by its revision, if no campaign made
// it (a stray), and otherwise waits until it is put or deleted.
//
// The key below is found in two steps: a listing of keys alone, sorted by
// create revision, which etcd answers by reading every election key
// (10,000 at 10,000 members), then a read of that one key, whose lease
// tells a candidate from a stray (a listing of keys alone says no lease).
// A newcomer skips the listing: it reads the key its join found in the
// tail (see CandidacyHint), and lists only if that key no longer holds.
type Campaigner struct {
	Inc      *Inc
	hint     CandidacyHint // the join's (see CandidacyHint); zero once used
	key      string        // our election key
	member   string        // our member name: the key's value
	k        wire.Keys
	log      *zap.Logger
	stage    campaignStage
	rev      int64            // our key's create revision (stage > campaignWrite)
	below    *mvccpb.KeyValue // the key just below ours (campaignPeek: its key and create revision only; campaignDelete, campaignWait)
	belowRev int64            // the revision it was seen at
	retryAt  time.Time        // a request failed: start again then (zero: none)
	Retry    *Backoff
}

type campaignStage uint8

const (
	campaignWrite  campaignStage = iota // write our key if missing
	campaignList                        // find the key just below ours
	campaignPeek                        // read it
	campaignDelete                      // delete the stray below
	campaignWait                        // wait for the key below to change
)

func NewCampaigner(k wire.Keys, member string, inc *Inc, log *zap.Logger, retry *Backoff) *Campaigner {
	return &Campaigner{Inc: inc, hint: inc.Hint, key: k.ElectionKey(int64(inc.Lease)), member: member, k: k, log: log, Retry: retry}
}

// Next returns what to do at now: a transaction to send (then replied),
// a key to watch until it changes after revision after (then changed), or
// nothing until wait.
func (c *Campaigner) Next(now time.Time) (txn *etcdserverpb.TxnRequest, watchKey string, after int64, wait time.Time) {
	if now.Before(c.retryAt) {
		return nil, "", 0, c.retryAt
	}
	c.retryAt = time.Time{}
	switch c.stage {
	case campaignWrite:
		return &etcdserverpb.TxnRequest{
			Compare: []*etcdserverpb.Compare{wire.CreateRevisionEq(c.key, 0)},
			Success: []*etcdserverpb.RequestOp{wire.Put(c.key, c.member, int64(c.Inc.Lease))},
			Failure: []*etcdserverpb.RequestOp{wire.Get(c.key)},
		}, "", 0, time.Time{}
	case campaignList:
		prefix := c.k.Election()
		return &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestRange{
			RequestRange: &etcdserverpb.RangeRequest{
				Key: []byte(prefix), RangeEnd: []byte(wire.PrefixEnd(prefix)),
				SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_CREATE,
				Limit: 1, MaxCreateRevision: c.rev - 1, KeysOnly: true,
			}}}}}, "", 0, time.Time{}
	case campaignPeek:
		return &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{wire.Get(string(c.below.Key))}}, "", 0, time.Time{}
	case campaignDelete:
		key := string(c.below.Key)
		return &etcdserverpb.TxnRequest{
			Compare: []*etcdserverpb.Compare{wire.ModRevisionEq(key, c.below.ModRevision)},
			Success: []*etcdserverpb.RequestOp{wire.Delete(key)},
		}, "", 0, time.Time{}
	default: // campaignWait
		return nil, string(c.below.Key), c.belowRev, time.Time{}
	}
}

// Replied handles the answer to the transaction next returned; it returns
// the election once won.
func (c *Campaigner) Replied(resp *etcdserverpb.TxnResponse, err error, now time.Time) *Elected {
	if err != nil {
		c.Fail(err, now)
		return nil
	}
	switch c.stage {
	case campaignWrite:
		c.rev = resp.Header.Revision
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				c.Fail(fmt.Errorf("rink: election key %s went while campaigning", c.key), now)
				return nil
			}
			c.rev = kvs[0].CreateRevision
		}
		c.stage = campaignList
		if h := c.hint; h.Key != "" && h.Key != c.key && h.Rev < c.rev && c.k.IsElection(h.Key) {
			c.below, c.stage = &mvccpb.KeyValue{Key: []byte(h.Key), CreateRevision: h.Rev}, campaignPeek
		}
		c.hint = CandidacyHint{}
	case campaignList:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return &Elected{Inc: c.Inc, Key: c.key, Rev: c.rev}
		}
		c.below, c.stage = kvs[0], campaignPeek
	case campaignPeek:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != c.below.CreateRevision {
			c.stage = campaignList // gone, or made anew since: look again
			return nil
		}
		c.below, c.belowRev = kvs[0], resp.Header.Revision
		c.stage = campaignWait
		if !c.k.IsCandidate(c.below) {
			c.stage = campaignDelete
		}
	case campaignDelete:
		if resp.Succeeded {
			c.log.Warn("deleted a stray key", zap.String("key", string(c.below.Key)))
		}
		c.stage = campaignList
	}
	return nil
}

// Changed handles the end of the wait next asked for: the key below ours
// was put or deleted, or the watch failed (err).
func (c *Campaigner) Changed(err error, now time.Time) {
	if err != nil {
		c.Fail(err, now)
		return
	}
	c.stage = campaignList
}

// Fail starts the campaign again after a backoff.
func (c *Campaigner) Fail(err error, now time.Time) {
	if c.Inc.Ended() {
		return
	}
	wait := c.Retry.Next()
	c.log.Warn("campaign failed, retrying", zap.Error(err), zap.Duration("backoff", wait))
	c.stage, c.retryAt = campaignWrite, now.Add(wait)
}

type Elected struct {
	Inc *Inc
	Key string
	Rev int64
}
