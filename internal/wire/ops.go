package wire

import "go.etcd.io/etcd/api/v3/etcdserverpb"

// Requests as rink's state machines build them: etcd's own protocol
// buffers. Each builder makes exactly what clientv3's helper of the same
// meaning makes (TestComparesMatchClientv3, in package rink, checks it),
// so a request built here and one built through the client are the same
// bytes on the wire.

// Put puts value into key, bound to lease (0: none).
func Put(key, value string, lease int64) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{
		RequestPut: &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease}}}
}

// Get reads key.
func Get(key string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{
		RequestRange: &etcdserverpb.RangeRequest{Key: []byte(key)}}}
}

// Range reads the keys in [key, end).
func Range(key, end string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{
		RequestRange: &etcdserverpb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
}

// Delete deletes key.
func Delete(key string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{
		RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(key)}}}
}

// PrefixEnd is the end of the range of keys that start with prefix: the
// prefix with its last byte below 0xff raised by one, and what follows it
// dropped; "\x00" (every key from prefix on) when it has no such byte.
func PrefixEnd(prefix string) string {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00"
}

// VersionEq: key's version is v (0: the key does not exist).
func VersionEq(key string, v int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_VERSION,
		TargetUnion: &etcdserverpb.Compare_Version{Version: v}}
}

// CreateRevisionEq: key was created at rev (0: it does not exist).
func CreateRevisionEq(key string, rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_CREATE,
		TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: rev}}
}

// ModRevisionEq: key was last written at rev (0: it does not exist).
func ModRevisionEq(key string, rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_MOD,
		TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: rev}}
}

// ValueEq: key holds value.
func ValueEq(key, value string) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_VALUE,
		TargetUnion: &etcdserverpb.Compare_Value{Value: []byte(value)}}
}

// LeaseEq: key is bound to lease.
func LeaseEq(key string, lease int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_LEASE,
		TargetUnion: &etcdserverpb.Compare_Lease{Lease: lease}}
}

// CreatedBelow: every key under prefix was created before rev (none is
// newer).
func CreatedBelow(prefix string, rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: []byte(prefix), RangeEnd: []byte(PrefixEnd(prefix)),
		Target: etcdserverpb.Compare_CREATE, Result: etcdserverpb.Compare_LESS,
		TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: rev}}
}
