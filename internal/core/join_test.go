package core

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// testJoiner returns a joiner with a TTL of 3 s whose transactions say
// which lease, and whether they resume, in their compare's key.
func testJoiner(old *Inc) *Joiner {
	txn := func(lease int64, old *Inc) *etcdserverpb.TxnRequest {
		return &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{{Key: []byte("m/a"), TargetUnion: &etcdserverpb.Compare_Lease{Lease: lease}}},
			Success: []*etcdserverpb.RequestOp{}, Failure: []*etcdserverpb.RequestOp{}}
	}
	return NewJoiner(3*time.Second, "m/a", old, txn, NewBackoff(rand.New(rand.NewPCG(1, 2))))
}

func succeeded(rev int64) *etcdserverpb.TxnResponse {
	return &etcdserverpb.TxnResponse{Succeeded: true, Header: &etcdserverpb.ResponseHeader{Revision: rev}}
}

// taken is a join's failed answer: the name's key, bound to lease.
func taken(rev, lease int64) *etcdserverpb.TxnResponse {
	return &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: rev},
		Responses: []*etcdserverpb.ResponseOp{{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{
			Kvs: []*mvccpb.KeyValue{{Key: []byte("m/a"), Lease: lease}}}}}}}
}

func TestJoinerJoins(t *testing.T) {
	j := testJoiner(nil)
	if s := j.Start(100); !s.Grant || j.TTL() != 3 {
		t.Fatalf("start: %+v, TTL %d; want a grant of 3 s", s, j.TTL())
	}
	s := j.Granted(7, 3, nil)
	if s.Txn == nil || s.Txn.Compare[0].GetLease() != 7 {
		t.Fatalf("granted: %+v, want the join's transaction on lease 7", s)
	}
	s = j.Answered(succeeded(40), nil, 200)
	in := s.Joined
	if in == nil || in.Lease != 7 || in.CreateRev != 40 || in.BoundRev != 40 || in.Sent != 100 || in.Resumed || len(s.Revoke) > 0 {
		t.Fatalf("answered: %+v %+v", s, in)
	}
	if want := DeadlineAfter(100, 3, 3*time.Second); in.Deadline != want {
		t.Fatalf("deadline %d, want %d (from the grant's send time)", in.Deadline, want)
	}
}

// TestJoinerWaitsForTheName: a key of another process in the name's place
// is waited for, and the join starts over once it goes.
func TestJoinerWaitsForTheName(t *testing.T) {
	j := testJoiner(nil)
	j.Start(0)
	j.Granted(7, 3, nil)
	s := j.Answered(taken(50, 99), nil, 10)
	if !slices.Equal(s.Revoke, []int64{7}) || s.AwaitDeleted == nil || *s.AwaitDeleted != (AwaitDeleted{Key: "m/a", Rev: 50}) {
		t.Fatalf("name taken: %+v", s)
	}
	if s := j.Deleted(nil); !s.Again || s.Wait != 0 {
		t.Fatalf("key gone: %+v, want to start over at once", s)
	}
	if s := j.Deleted(errors.New("watch broken")); s.Again || s.Err == nil {
		t.Fatalf("wait failed: %+v, want an error", s)
	}
}

// TestJoinerTakesBackItsOwnKey: a join whose transaction failed unanswered
// may have created the member key; if the revoke failed too, the next
// attempt finds its own key in the name's place. It takes it away and
// joins again, rather than wait a TTL for it and blame a live member.
func TestJoinerTakesBackItsOwnKey(t *testing.T) {
	j := testJoiner(nil)
	j.Start(0)
	j.Granted(7, 3, nil)
	s := j.Answered(nil, rpctypes.ErrTimeout, 10)
	if !slices.Equal(s.Revoke, []int64{7}) || !s.Again || s.Err == nil {
		t.Fatalf("unanswered: %+v, want lease 7 revoked and another attempt", s)
	}
	j.Start(20)
	j.Granted(8, 3, nil)
	s = j.Answered(taken(60, 7), nil, 30)
	if !slices.Equal(s.Revoke, []int64{8, 7}) || !s.Again || s.AwaitDeleted != nil {
		t.Fatalf("own key found: %+v, want leases 8 and 7 revoked and another attempt", s)
	}
	if s := j.Answered(nil, errors.New("permission denied"), 40); s.Again || s.Err == nil {
		t.Fatalf("a lasting error: %+v, want the join to fail", s)
	}
}

func TestJoinerGrantErrors(t *testing.T) {
	j := testJoiner(nil)
	j.Start(0)
	if s := j.Granted(0, 0, rpctypes.ErrTooManyRequests); !s.Again || s.Wait <= 0 || s.Err == nil {
		t.Fatalf("transient: %+v, want another attempt after a wait", s)
	}
	if s := j.Granted(0, 0, rpctypes.ErrPermissionDenied); s.Again || !errors.Is(s.Err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("lasting: %+v, want the error", s)
	}
	if j.Retry() <= 0 {
		t.Fatal("no wait after a failed attempt")
	}
}

// TestJoinerTooSlow: a lease whose grant was sent a TTL ago is not
// trusted. A join's is revoked; a resume's key is left bound to it, to
// expire (it may be what keeps the member's slots from others).
func TestJoinerTooSlow(t *testing.T) {
	late := int64(3 * time.Second)
	j := testJoiner(nil)
	j.Start(0)
	j.Granted(7, 3, nil)
	if s := j.Answered(succeeded(5), nil, late); s.Joined != nil || !errors.Is(s.Err, ErrJoinSlow) || !slices.Equal(s.Revoke, []int64{7}) {
		t.Fatalf("join: %+v", s)
	}
	// Its key, if the revoke failed, is its own: taken back, not waited for.
	j.Start(late)
	j.Granted(8, 3, nil)
	if s := j.Answered(taken(9, 7), nil, late+1); !slices.Equal(s.Revoke, []int64{8, 7}) || !s.Again {
		t.Fatalf("the slow attempt's key found: %+v", s)
	}
	j = testJoiner(&Inc{Lease: 3, CreateRev: 2})
	j.Start(0)
	j.Granted(7, 3, nil)
	if s := j.Answered(succeeded(5), nil, late); s.Joined != nil || !errors.Is(s.Err, ErrJoinSlow) || len(s.Revoke) > 0 {
		t.Fatalf("resume: %+v", s)
	}
	if !j.Resuming() {
		t.Fatal("a resume that failed does not resume again")
	}
}

func TestJoinerResumes(t *testing.T) {
	j := testJoiner(&Inc{Lease: 3, CreateRev: 2})
	j.Start(0)
	j.Granted(7, 3, nil)
	s := j.Answered(succeeded(9), nil, 10)
	if s.Joined == nil || !s.Joined.Resumed || s.Joined.CreateRev != 2 || s.Joined.BoundRev != 9 {
		t.Fatalf("resumed: %+v", s)
	}
	// Its key gone: the core is told, and the member joins anew.
	j = testJoiner(&Inc{Lease: 3, CreateRev: 2})
	j.Start(0)
	j.Granted(7, 3, nil)
	s = j.Answered(&etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: 9}}, nil, 10)
	if s.KeyGone != 3 || !s.Again || !slices.Equal(s.Revoke, []int64{7}) || j.Resuming() {
		t.Fatalf("key gone: %+v", s)
	}
	// An unanswered rebinding fails the attempt (the key may be bound to
	// the revoked lease now: the next attempt finds out).
	j = testJoiner(&Inc{Lease: 3, CreateRev: 2})
	j.Start(0)
	j.Granted(7, 3, nil)
	if s := j.Answered(nil, rpctypes.ErrTimeout, 10); s.Again || s.Err == nil || !slices.Equal(s.Revoke, []int64{7}) {
		t.Fatalf("unanswered: %+v", s)
	}
	if s := j.Granted(0, 0, rpctypes.ErrTooManyRequests); s.Again || s.Err == nil {
		t.Fatalf("a resume's grant failed: %+v, want the attempt to fail (rejoin tries again)", s)
	}
}
