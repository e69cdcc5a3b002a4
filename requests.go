package rink

import (
	"context"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Requests as the core's state machines build them (see package wire):
// etcd's own protocol buffers, which the production driver sends through
// the client (execTxn) and a simulator answers itself.

// execTxn sends t through cli's KV, as a transaction built with cli.Txn:
// the client's call options (it waits for a ready connection) and its
// errors are the same as for any other request of the member.
func execTxn(ctx context.Context, cli *clientv3.Client, t *etcdserverpb.TxnRequest) (*etcdserverpb.TxnResponse, error) {
	cmps := make([]clientv3.Cmp, len(t.Compare))
	for i, c := range t.Compare {
		cmps[i] = clientv3.FromCompare(c)
	}
	resp, err := cli.Txn(ctx).If(cmps...).Then(opsOf(t.Success)...).Else(opsOf(t.Failure)...).Commit()
	if err != nil {
		return nil, err
	}
	return (*etcdserverpb.TxnResponse)(resp), nil
}

// opsOf is ops as the client's operations: puts with a lease, deletes of
// a key or a range, and ranges with a sort, a limit, a maximal create
// revision and keys only. Other fields of a request are not carried over (none is used).
func opsOf(ops []*etcdserverpb.RequestOp) []clientv3.Op {
	out := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		switch {
		case op.GetRequestPut() != nil:
			p := op.GetRequestPut()
			out = append(out, clientv3.OpPut(string(p.Key), string(p.Value), clientv3.WithLease(clientv3.LeaseID(p.Lease))))
		case op.GetRequestRange() != nil:
			g := op.GetRequestRange()
			var opts []clientv3.OpOption
			if len(g.RangeEnd) > 0 {
				opts = append(opts, clientv3.WithRange(string(g.RangeEnd)))
			}
			if g.SortOrder != etcdserverpb.RangeRequest_NONE {
				opts = append(opts, clientv3.WithSort(clientv3.SortTarget(g.SortTarget), clientv3.SortOrder(g.SortOrder)))
			}
			if g.Limit != 0 {
				opts = append(opts, clientv3.WithLimit(g.Limit))
			}
			if g.MaxCreateRevision != 0 {
				opts = append(opts, clientv3.WithMaxCreateRev(g.MaxCreateRevision))
			}
			if g.KeysOnly {
				opts = append(opts, clientv3.WithKeysOnly())
			}
			out = append(out, clientv3.OpGet(string(g.Key), opts...))
		case op.GetRequestDeleteRange() != nil:
			d := op.GetRequestDeleteRange()
			var opts []clientv3.OpOption
			if len(d.RangeEnd) > 0 {
				opts = append(opts, clientv3.WithRange(string(d.RangeEnd)))
			}
			out = append(out, clientv3.OpDelete(string(d.Key), opts...))
		}
	}
	return out
}
