package rink

import (
	"context"

	"github.com/rink-go/rink/internal/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CandidacyHint is the newest candidacy before ours, as our join read it
// from the tail key, which every join names its own election key in, in
// the transaction that creates it (see joinTxn): that key, and the
// revision of that join, the key's create revision. A campaign waits for
// it, once a read shows it still there and made then, instead of listing
// the election keys to find the one just below its own: etcd answers a
// listing sorted by create revision by reading every election key, and
// building a rink of 10,000 made one per member.
//
// Waiting for any candidate with a lower create revision than ours is as
// safe as waiting for the one just below: a campaign is won only by a
// listing that finds no key below, and the key waited for is below ours
// while it lasts; once it changes, the campaign lists as etcd's recipe
// does. It stays live as the recipe does: every key waited for belongs to
// a candidate, or is listed anew. Joins of releases that do not write the
// tail key leave it naming an older candidacy, which is no less safe.
type CandidacyHint = core.CandidacyHint

// runCampaign drives a campaigner with the client while inc lasts, and
// hands the run goroutine the election once won.
func (r *Rink) runCampaign(inc *incarnation) {
	c := core.NewCampaigner(r.keys, r.opts.member, &inc.Inc, r.log, newBackoff())
	for inc.ctx.Err() == nil {
		txn, key, after, wait := c.Next(r.now())
		switch {
		case txn != nil:
			resp, err := execTxn(inc.ctx, r.cli, txn)
			if e := c.Replied(resp, err, r.now()); e != nil {
				select {
				case r.handoffCh <- input{kind: inElected, elected: *e}:
				case <-inc.ctx.Done():
				}
				return
			}
		case key != "":
			c.Changed(waitChanged(inc.ctx, r.cli, key, after), r.now())
		default:
			sleep(inc.ctx, wait.Sub(r.now()))
		}
	}
}

// waitChanged returns once key is put or deleted after revision rev (a
// put may make an election key a stray: see campaigner), or ctx ends.
func waitChanged(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	return ctx.Err()
}
