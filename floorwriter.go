package rink

import (
	"context"
	"time"

	"github.com/rink-go/rink/internal/core"
)

// writeFloors writes the newest floor handed to it (see floorWriter) while
// ctx lasts.
func (r *Rink) writeFloors(ctx context.Context, electKey string, electRev int64, reqs <-chan []byte) {
	w := core.NewFloorWriter(r.keys, electKey, electRev, r.log, newBackoff())
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case next := <-reqs:
			w.Take(next) // a newer floor replaces one not yet written
		default:
		}
		txn, wait := w.Next(r.now())
		if txn != nil {
			wctx, cancel := context.WithTimeout(ctx, r.opts.ttl)
			resp, err := execTxn(wctx, r.cli, txn)
			cancel()
			if ctx.Err() != nil || !w.Replied(resp, err, r.now()) {
				return
			}
			continue
		}
		var due <-chan time.Time
		if !wait.IsZero() {
			timer.Reset(wait.Sub(r.now()))
			due = timer.C
		}
		select {
		case next := <-reqs:
			w.Take(next)
		case <-due:
		case <-ctx.Done():
			return
		}
	}
}
