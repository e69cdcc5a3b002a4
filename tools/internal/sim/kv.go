// Package sim is rink's deterministic simulation: a model of etcd in
// virtual time, on which a seeded scheduler drives members through
// histories that real time reaches rarely, and replays any of them from
// its seed.
//
// This file holds the model's keys: one store with a global revision,
// each key's create and mod revisions and version, ranges, puts, deletes
// and transactions with compares, as etcd's server applies them. Requests
// and responses are etcd's own protocol buffers, so that a differential
// test can send the same request to the model and to a real etcd and
// compare the answers (see etcd_test.go). The model holds one server's
// state and answers at once: delays, reordering and faults are the
// world's to add (world.go: a virtual clock, one seed and the events
// scheduled on them; client.go: connections with delays, cuts, lost
// answers, and watches delivered in drawn batches, or broken).
package sim

import (
	"bytes"
	"errors"
	"slices"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// Errors the model answers with, beside etcd's own (rpctypes).
var (
	// ErrUnsupported is a request the model does not implement (a range
	// at a past revision, for one).
	ErrUnsupported = errors.New("sim: request not supported by the model")
)

// maxTxnOps is etcd's default --max-txn-ops.
const maxTxnOps = 128

// Etcd is a model of one etcd server. It is not safe for concurrent use:
// the simulator runs in one goroutine.
//
// Invariants: rev is the revision of the newest write (1 before any, as in
// a new etcd); every key
// in kvs is live, with ModRevision ≤ rev, and order lists kvs' keys sorted;
// log holds every change from revision compacted on (see compact), in
// revision order and, within a revision, in the order the write made
// them; leases and watchers are described in lease.go and watch.go.
type Etcd struct {
	now       time.Duration // virtual time since the model started
	rev       int64
	compacted int64 // the newest compaction's revision (-1: none, as in etcd: a compaction at 0 is one)
	kvs       map[string]*mvccpb.KeyValue
	order     []string
	log       []*mvccpb.Event

	leases    map[int64]*lease
	nextLease int64
	minTTL    int64 // seconds

	watchers  map[int64]*Watcher
	nextWatch int64

	// OnPut, when set, is told every value a request puts (not a
	// restore's), after the store holds it; it must not change kv.
	OnPut func(kv *mvccpb.KeyValue)
}

// NewEtcd returns an empty model. minTTL is the shortest lease TTL it
// grants, in seconds (an embedded etcd with the default election timeout
// grants at least 2).
func NewEtcd(minTTL int64) *Etcd {
	return &Etcd{rev: 1, compacted: -1, kvs: map[string]*mvccpb.KeyValue{}, leases: map[int64]*lease{}, minTTL: minTTL, watchers: map[int64]*Watcher{}}
}

// Rev returns the store's revision.
func (e *Etcd) Rev() int64 { return e.rev }

// Now returns the model's virtual time.
func (e *Etcd) Now() time.Duration { return e.now }

func (e *Etcd) header() *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{Revision: e.rev}
}

// inRange reports whether key is in the range of a request: key alone
// when end is empty, every key from key on when end is "\x00", else
// [start, end).
func inRange(key, start, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(key, start)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(key, start) >= 0
	default:
		return bytes.Compare(key, start) >= 0 && bytes.Compare(key, end) < 0
	}
}

// keysIn returns the live keys of a range, sorted.
func (e *Etcd) keysIn(start, end []byte) []string {
	if len(end) == 0 {
		if _, ok := e.kvs[string(start)]; ok {
			return []string{string(start)}
		}
		return nil
	}
	i, _ := slices.BinarySearch(e.order, string(start))
	var out []string
	for _, k := range e.order[i:] {
		if !inRange([]byte(k), start, end) {
			break
		}
		out = append(out, k)
	}
	return out
}

func clone(kv *mvccpb.KeyValue) *mvccpb.KeyValue { return proto.Clone(kv).(*mvccpb.KeyValue) }

// Range answers a range request at the current revision.
func (e *Etcd) Range(r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	switch {
	case r.Revision > e.rev:
		return nil, rpctypes.ErrGRPCFutureRev
	case r.Revision > 0 && r.Revision < e.compacted:
		return nil, rpctypes.ErrGRPCCompacted
	case r.Revision > 0 && r.Revision != e.rev:
		return nil, ErrUnsupported
	}
	keys := e.keysIn(r.Key, r.RangeEnd)
	resp := &etcdserverpb.RangeResponse{Header: e.header(), Count: int64(len(keys))}
	if r.CountOnly {
		return resp, nil
	}
	kvs := make([]*mvccpb.KeyValue, 0, len(keys))
	for _, k := range keys {
		kv := e.kvs[k]
		if r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision ||
			r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision ||
			r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision ||
			r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision {
			continue
		}
		kvs = append(kvs, clone(kv))
	}
	sortKVs(kvs, r.SortTarget, r.SortOrder)
	if r.Limit > 0 && len(kvs) > int(r.Limit) {
		kvs, resp.More = kvs[:r.Limit], true
	}
	for _, kv := range kvs {
		if r.KeysOnly {
			// (etcd answers keys alone from its index, which knows no
			// lease, unless it must read the values to sort by them.)
			kv.Value = nil
			if r.SortTarget != etcdserverpb.RangeRequest_VALUE {
				kv.Lease = 0
			}
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

// sortKVs sorts a range's answer as etcd does: the same comparisons with
// the same (unstable) sort over the same input, sorted by key, so that
// ties come out alike.
func sortKVs(kvs []*mvccpb.KeyValue, target etcdserverpb.RangeRequest_SortTarget, order etcdserverpb.RangeRequest_SortOrder) {
	if target != etcdserverpb.RangeRequest_KEY && order == etcdserverpb.RangeRequest_NONE {
		order = etcdserverpb.RangeRequest_ASCEND
	}
	if order == etcdserverpb.RangeRequest_NONE || target == etcdserverpb.RangeRequest_KEY && order == etcdserverpb.RangeRequest_ASCEND {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch target {
	case etcdserverpb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case etcdserverpb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case etcdserverpb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case etcdserverpb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case etcdserverpb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return
	}
	s := kvSorter{kvs, less}
	if order == etcdserverpb.RangeRequest_DESCEND {
		sort.Sort(sort.Reverse(s))
	} else {
		sort.Sort(s)
	}
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSorter) Len() int           { return len(s.kvs) }
func (s kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }

// write is one write transaction: its changes all take revision e.rev+1,
// which the store takes when the write ends having changed something.
type write struct {
	e       *Etcd
	changes int
	// before holds each key the write changed as it was before the write
	// (nil: absent): a watch event's previous value is the key at the
	// revision before, whatever the write did to it first.
	before map[string]*mvccpb.KeyValue
}

// prior records key's value before the write, the first time the write
// changes it, and returns it.
func (w *write) prior(k string) *mvccpb.KeyValue {
	if kv, ok := w.before[k]; ok {
		return kv
	}
	if w.before == nil {
		w.before = map[string]*mvccpb.KeyValue{}
	}
	var kv *mvccpb.KeyValue
	if cur, ok := w.e.kvs[k]; ok {
		kv = clone(cur)
	}
	w.before[k] = kv
	return kv
}

func (e *Etcd) begin() *write { return &write{e: e} }

// rev is the revision the write's changes take.
func (w *write) rev() int64 { return w.e.rev + 1 }

// end ends the write: the store moves to its revision if it changed
// anything.
func (w *write) end() {
	if w.changes > 0 {
		w.e.rev++
	}
}

func (w *write) put(key, value []byte, leaseID int64) {
	e, k := w.e, string(key)
	rev := w.rev()
	before := w.prior(k)
	kv := &mvccpb.KeyValue{Key: bytes.Clone(key), Value: bytes.Clone(value), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: leaseID}
	prev, ok := e.kvs[k]
	if ok {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		if prev.Lease != 0 && prev.Lease != leaseID {
			e.detach(prev.Lease, k)
		}
	} else {
		i, _ := slices.BinarySearch(e.order, k)
		e.order = slices.Insert(e.order, i, k)
	}
	e.kvs[k] = kv
	if leaseID != 0 {
		e.attach(leaseID, k)
	}
	ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: clone(kv)}
	if before != nil && kv.Version > 1 { // (etcd gives a key's creation no previous value)
		ev.PrevKv = clone(before)
	}
	e.log = append(e.log, ev)
	w.changes++
	if e.OnPut != nil {
		e.OnPut(kv)
	}
}

func (w *write) deleteKey(k string) {
	e := w.e
	before := w.prior(k)
	prev := e.kvs[k]
	delete(e.kvs, k)
	if i, ok := slices.BinarySearch(e.order, k); ok {
		e.order = slices.Delete(e.order, i, i+1)
	}
	if prev.Lease != 0 {
		e.detach(prev.Lease, k)
	}
	ev := &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: w.rev()}}
	if before != nil {
		ev.PrevKv = clone(before)
	}
	e.log = append(e.log, ev)
	w.changes++
}

// Put answers a put request.
func (e *Etcd) Put(r *etcdserverpb.PutRequest) (*etcdserverpb.PutResponse, error) {
	if err := e.checkPut(r); err != nil {
		return nil, err
	}
	w := e.begin()
	resp := w.applyPut(r)
	w.end()
	resp.Header = e.header()
	return resp, nil
}

func (e *Etcd) checkPut(r *etcdserverpb.PutRequest) error {
	if err := checkPutRequest(r); err != nil {
		return err
	}
	return e.checkStored(r)
}

// checkStored checks a put against the store: its lease, and its key when
// it keeps the key's value or lease.
func (e *Etcd) checkStored(r *etcdserverpb.PutRequest) error {
	if r.Lease != 0 {
		if _, ok := e.leases[r.Lease]; !ok {
			return rpctypes.ErrGRPCLeaseNotFound
		}
	}
	if _, ok := e.kvs[string(r.Key)]; !ok && (r.IgnoreValue || r.IgnoreLease) {
		return rpctypes.ErrGRPCKeyNotFound
	}
	return nil
}

func (w *write) applyPut(r *etcdserverpb.PutRequest) *etcdserverpb.PutResponse {
	resp := &etcdserverpb.PutResponse{}
	prev, ok := w.e.kvs[string(r.Key)]
	value, leaseID := r.Value, r.Lease
	// (A transaction can delete the key before such a put, behind its
	// checks: etcd's server fails there; the model puts no value or lease.)
	if r.IgnoreValue && ok {
		value = prev.Value
	}
	if r.IgnoreLease && ok {
		leaseID = prev.Lease
	}
	if r.PrevKv && ok {
		resp.PrevKv = clone(prev)
	}
	w.put(r.Key, value, leaseID)
	return resp
}

// DeleteRange answers a delete request.
func (e *Etcd) DeleteRange(r *etcdserverpb.DeleteRangeRequest) (*etcdserverpb.DeleteRangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	w := e.begin()
	resp := w.applyDelete(r)
	w.end()
	resp.Header = e.header()
	return resp, nil
}

func (w *write) applyDelete(r *etcdserverpb.DeleteRangeRequest) *etcdserverpb.DeleteRangeResponse {
	resp := &etcdserverpb.DeleteRangeResponse{}
	for _, k := range w.e.keysIn(r.Key, r.RangeEnd) {
		if r.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, clone(w.e.kvs[k]))
		}
		w.deleteKey(k)
		resp.Deleted++
	}
	return resp
}

// Txn answers a transaction request.
func (e *Etcd) Txn(r *etcdserverpb.TxnRequest) (*etcdserverpb.TxnResponse, error) {
	if err := e.checkTxn(r); err != nil {
		return nil, err
	}
	ops, _ := e.branch(r)
	if err := e.checkApply(ops); err != nil {
		return nil, err
	}
	w := e.begin()
	resp := w.applyTxn(r)
	w.end()
	resp.Header = e.header()
	return resp, nil
}

// checkTxn refuses what etcd's server refuses before it proposes a
// transaction (too many operations, an empty key, a value or lease given
// with the flag that ignores it, a key put twice or put and deleted in one
// branch; nested transactions are checked level by level, which etcd
// checks more finely: the model is used without them).
func (e *Etcd) checkTxn(r *etcdserverpb.TxnRequest) error {
	if max(len(r.Compare), len(r.Success), len(r.Failure)) > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, branch := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
		for _, op := range branch {
			var err error
			switch x := op.Request.(type) {
			case *etcdserverpb.RequestOp_RequestRange:
				if len(x.RequestRange.Key) == 0 {
					err = rpctypes.ErrGRPCEmptyKey
				}
			case *etcdserverpb.RequestOp_RequestPut:
				err = checkPutRequest(x.RequestPut)
			case *etcdserverpb.RequestOp_RequestDeleteRange:
				if len(x.RequestDeleteRange.Key) == 0 {
					err = rpctypes.ErrGRPCEmptyKey
				}
			case *etcdserverpb.RequestOp_RequestTxn:
				err = e.checkTxn(x.RequestTxn)
			default:
				err = rpctypes.ErrGRPCKeyNotFound
			}
			if err != nil {
				return err
			}
		}
	}
	for _, branch := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
		puts := map[string]bool{}
		var dels [][2][]byte
		for _, op := range branch {
			switch x := op.Request.(type) {
			case *etcdserverpb.RequestOp_RequestPut:
				if puts[string(x.RequestPut.Key)] {
					return rpctypes.ErrGRPCDuplicateKey
				}
				puts[string(x.RequestPut.Key)] = true
			case *etcdserverpb.RequestOp_RequestDeleteRange:
				dels = append(dels, [2][]byte{x.RequestDeleteRange.Key, x.RequestDeleteRange.RangeEnd})
			}
		}
		for k := range puts {
			for _, d := range dels {
				// (etcd takes a range's end literally here: a delete
				// of every key from one on, whose end is "\x00",
				// overlaps no put.)
				if len(d[1]) == 0 && k == string(d[0]) || k >= string(d[0]) && k < string(d[1]) {
					return rpctypes.ErrGRPCDuplicateKey
				}
			}
		}
	}
	return nil
}

// checkPutRequest is what etcd's server checks of a put before it
// proposes it.
func checkPutRequest(r *etcdserverpb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// checkApply is what etcd checks as it applies a transaction, of the
// branch its compares chose only, against the store before it: each put's
// lease and, for a put that keeps the value or lease, its key.
func (e *Etcd) checkApply(ops []*etcdserverpb.RequestOp) error {
	for _, op := range ops {
		switch x := op.Request.(type) {
		case *etcdserverpb.RequestOp_RequestPut:
			if err := e.checkStored(x.RequestPut); err != nil {
				return err
			}
		case *etcdserverpb.RequestOp_RequestTxn:
			ops, _ := e.branch(x.RequestTxn)
			if err := e.checkApply(ops); err != nil {
				return err
			}
		}
	}
	return nil
}

// branch returns the operations a transaction's compares choose, and
// whether they all held.
func (e *Etcd) branch(r *etcdserverpb.TxnRequest) (ops []*etcdserverpb.RequestOp, ok bool) {
	for _, c := range r.Compare {
		if !e.compare(c) {
			return r.Failure, false
		}
	}
	return r.Success, true
}

func (w *write) applyTxn(r *etcdserverpb.TxnRequest) *etcdserverpb.TxnResponse {
	ops, ok := w.e.branch(r)
	resp := &etcdserverpb.TxnResponse{Succeeded: ok}
	for _, op := range ops {
		// A range inside a write sees the write's earlier changes: they
		// are in the store already, at the revision the write takes.
		switch x := op.Request.(type) {
		case *etcdserverpb.RequestOp_RequestRange:
			rr, err := w.e.Range(x.RequestRange)
			if err != nil {
				rr = &etcdserverpb.RangeResponse{}
			}
			rr.Header = &etcdserverpb.ResponseHeader{Revision: w.readRev()}
			resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: rr}})
		case *etcdserverpb.RequestOp_RequestPut:
			pr := w.applyPut(x.RequestPut)
			pr.Header = &etcdserverpb.ResponseHeader{Revision: w.rev()}
			resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: pr}})
		case *etcdserverpb.RequestOp_RequestDeleteRange:
			dr := w.applyDelete(x.RequestDeleteRange)
			dr.Header = &etcdserverpb.ResponseHeader{Revision: w.readRev()}
			resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}})
		case *etcdserverpb.RequestOp_RequestTxn:
			tr := w.applyTxn(x.RequestTxn)
			tr.Header = &etcdserverpb.ResponseHeader{Revision: w.readRev()}
			resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: tr}})
		}
	}
	return resp
}

// readRev is the revision a read inside the write sees: the write's own
// once it has changed something.
func (w *write) readRev() int64 {
	if w.changes > 0 {
		return w.rev()
	}
	return w.e.rev
}

// compare evaluates one compare of a transaction: every key of its range
// must satisfy it; an empty range compares as a key with zero revisions,
// version and lease, and fails a comparison of values.
func (e *Etcd) compare(c *etcdserverpb.Compare) bool {
	keys := e.keysIn(c.Key, c.RangeEnd)
	if len(keys) == 0 {
		if c.Target == etcdserverpb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for _, k := range keys {
		if !compareKV(c, e.kvs[k]) {
			return false
		}
	}
	return true
}

func compareKV(c *etcdserverpb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case etcdserverpb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case etcdserverpb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case etcdserverpb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case etcdserverpb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case etcdserverpb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case etcdserverpb.Compare_EQUAL:
		return result == 0
	case etcdserverpb.Compare_NOT_EQUAL:
		return result != 0
	case etcdserverpb.Compare_GREATER:
		return result > 0
	case etcdserverpb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Compact compacts the store's history at revision rev: watches from
// before it are cancelled (see Watcher.Take), and so are ranges at past
// revisions.
func (e *Etcd) Compact(r *etcdserverpb.CompactionRequest) (*etcdserverpb.CompactionResponse, error) {
	switch {
	case r.Revision <= e.compacted:
		return nil, rpctypes.ErrGRPCCompacted
	case r.Revision > e.rev:
		return nil, rpctypes.ErrGRPCFutureRev
	}
	e.compacted = r.Revision
	i := sort.Search(len(e.log), func(i int) bool { return e.log[i].Kv.ModRevision >= r.Revision })
	e.log = slices.Delete(e.log, 0, i) // (a watch from the compaction's revision still gets its changes)
	return &etcdserverpb.CompactionResponse{Header: e.header()}, nil
}
