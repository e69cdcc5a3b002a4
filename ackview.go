package rink

import (
	"github.com/rink-go/rink/internal/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// noteLoad folds a load key's put or deletion into loads, and reports
// whether it was one. A summary that does not decode counts as none.
func (r *Rink) noteLoad(loads map[string]wire.LoadReport, kv *mvccpb.KeyValue, deleted bool) bool {
	key := string(kv.Key)
	if !r.keys.IsLoad(key) {
		return false
	}
	name := r.keys.LoadName(key)
	if rep, ok := wire.DecodeLoad(kv.Value, r.opts.slots); ok && !deleted && validName(name, false) == "" {
		loads[name] = rep
	} else {
		delete(loads, name)
	}
	return true
}
