package sim

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The model's leases, in virtual time.
//
// A lease lives until its expiry, which a grant sets to now + TTL and each
// keep-alive moves to now + TTL again; Advance moves the clock and expires
// the leases whose time has come, one write each, in order of expiry (and
// ID). Revoking or expiring a lease deletes its keys in one write, in key
// order, as etcd's lessor does.

// maxLeaseTTL is etcd's longest lease TTL, in seconds.
const maxLeaseTTL = 9_000_000_000

// lease is one lease. Invariant: keys holds exactly the keys in the
// store whose Lease is this lease's ID.
type lease struct {
	id, ttl int64
	expiry  time.Duration
	keys    map[string]bool
}

func (e *Etcd) attach(id int64, key string) {
	if l := e.leases[id]; l != nil {
		l.keys[key] = true
	}
}

func (e *Etcd) detach(id int64, key string) {
	if l := e.leases[id]; l != nil {
		delete(l.keys, key)
	}
}

// LeaseGrant grants a lease: of the ID asked for, or else of the next
// free one, and of at least the model's minimum TTL.
func (e *Etcd) LeaseGrant(r *etcdserverpb.LeaseGrantRequest) (*etcdserverpb.LeaseGrantResponse, error) {
	if r.TTL > maxLeaseTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	id := r.ID
	if id == 0 {
		for e.nextLease++; e.leases[e.nextLease] != nil; e.nextLease++ {
		}
		id = e.nextLease
	}
	if e.leases[id] != nil {
		return nil, rpctypes.ErrGRPCLeaseExist
	}
	ttl := max(r.TTL, e.minTTL)
	e.leases[id] = &lease{id: id, ttl: ttl, expiry: e.now + time.Duration(ttl)*time.Second, keys: map[string]bool{}}
	return &etcdserverpb.LeaseGrantResponse{Header: e.header(), ID: id, TTL: ttl}, nil
}

// LeaseRevoke revokes a lease and deletes its keys.
func (e *Etcd) LeaseRevoke(r *etcdserverpb.LeaseRevokeRequest) (*etcdserverpb.LeaseRevokeResponse, error) {
	if e.leases[r.ID] == nil {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	e.end(r.ID)
	return &etcdserverpb.LeaseRevokeResponse{Header: e.header()}, nil
}

// end ends a lease, revoked or expired: its keys go in one write.
func (e *Etcd) end(id int64) {
	l := e.leases[id]
	delete(e.leases, id)
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w := e.begin()
	for _, k := range keys {
		w.deleteKey(k)
	}
	w.end()
}

// LeaseKeepAlive renews a lease: it lives its TTL from now. A lease that
// is not there answers a TTL of 0, as etcd's keep-alive stream does.
func (e *Etcd) LeaseKeepAlive(r *etcdserverpb.LeaseKeepAliveRequest) *etcdserverpb.LeaseKeepAliveResponse {
	l := e.leases[r.ID]
	if l == nil {
		return &etcdserverpb.LeaseKeepAliveResponse{Header: e.header(), ID: r.ID}
	}
	l.expiry = e.now + time.Duration(l.ttl)*time.Second
	return &etcdserverpb.LeaseKeepAliveResponse{Header: e.header(), ID: r.ID, TTL: l.ttl}
}

// LeaseTimeToLive answers how long a lease has left (whole seconds,
// rounded down), its granted TTL and, if asked, its keys sorted; TTL -1
// when it is not there.
func (e *Etcd) LeaseTimeToLive(r *etcdserverpb.LeaseTimeToLiveRequest) *etcdserverpb.LeaseTimeToLiveResponse {
	l := e.leases[r.ID]
	if l == nil {
		return &etcdserverpb.LeaseTimeToLiveResponse{Header: e.header(), ID: r.ID, TTL: -1}
	}
	resp := &etcdserverpb.LeaseTimeToLiveResponse{Header: e.header(), ID: r.ID, TTL: int64((l.expiry - e.now) / time.Second), GrantedTTL: l.ttl}
	if r.Keys {
		for k := range l.keys {
			resp.Keys = append(resp.Keys, []byte(k))
		}
		slices.SortFunc(resp.Keys, func(a, b []byte) int { return cmp.Compare(string(a), string(b)) })
	}
	return resp
}

// Advance moves the model's clock on by d and expires the leases whose
// time has come, in order of expiry and then of ID.
func (e *Etcd) Advance(d time.Duration) {
	e.now += d
	for {
		var next *lease
		for _, l := range e.leases {
			if l.expiry <= e.now && (next == nil || l.expiry < next.expiry || l.expiry == next.expiry && l.id < next.id) {
				next = l
			}
		}
		if next == nil {
			return
		}
		e.end(next.id)
	}
}

// NextExpiry returns when the next lease expires, if any lease is live.
func (e *Etcd) NextExpiry() (at time.Duration, ok bool) {
	for _, l := range e.leases {
		if !ok || l.expiry < at {
			at, ok = l.expiry, true
		}
	}
	return at, ok
}

// ExtendLeases gives every live lease its TTL again from now, as a new
// etcd leader does when it takes over (its lessor renews every lease, so
// that none expires for the time the cluster had no leader).
func (e *Etcd) ExtendLeases() {
	for _, l := range e.leases {
		l.expiry = max(l.expiry, e.now+time.Duration(l.ttl)*time.Second)
	}
}
