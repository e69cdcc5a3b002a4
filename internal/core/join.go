package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Joiner decides how a member joins the rink, or resumes a fenced
// incarnation (see Rink.resume): the production driver and the
// simulator's both carry out what it says.
//
// A join grants a lease, then in one transaction creates the member key
// bound to it if the name is free. A lease is granted only when the name
// looks free, so that waiting out a predecessor does not eat into the
// member's own lease. A resume rebinds the fenced incarnation's key to a
// new lease, if the key is still that incarnation's; when it is not, the
// member joins anew, and the core is told (KeyGone).
//
// A resume brings back a member that fenced itself while its key is still
// there, bound to the old lease (the server has not expired it yet, or
// extended it after an outage). A put keeps the key's create revision, so
// the leader sees no departure and the member keeps its rank and slots.
// That is safe: the member cancelled every holding when it fenced, and the
// old incarnation's writes are guarded by the key's lease. The old
// candidacy goes in the same transaction, and the core revokes the old
// lease once the new incarnation begins (see Rink.revokeFenced).
//
// Invariants: tried holds the leases whose join transaction went
// unanswered (each may have committed, so a key found bound to one is
// this member's own, which never acted); lease is the lease granted for
// the attempt in flight (0: none); a lease is trusted only until the
// deadline its grant allows, counted from when the grant was sent.
type Joiner struct {
	ttl   time.Duration
	old   *Inc // the fenced incarnation to resume (nil: join anew)
	b     *Backoff
	tried []int64
	lease int64  // the lease granted for this attempt (0: none yet)
	sent  int64  // the clock reading the grant was sent at
	ttlS  int64  // the TTL it granted, in seconds
	key   string // the member key
	// txn builds the transaction that creates (old nil) or rebinds the
	// member key, bound to lease.
	txn func(lease int64, old *Inc) *etcdserverpb.TxnRequest
}

// JoinStep is what a Joiner asks for next. Revoke comes first (best
// effort, in order), then KeyGone is told; then exactly one of the rest,
// checked in this order.
type JoinStep struct {
	Revoke []int64
	// KeyGone: the resumed incarnation's key is gone, or bound to another
	// lease: tell the core (its lease is revoked once no key is bound to
	// it); the member joins anew (Again, at once).
	KeyGone int64
	// Joined: the member key is bound to Lease: begin the incarnation.
	Joined *Joined
	// Again: start the join over (Start) after Wait. If the caller
	// cannot wait that long (its join timeout ends first), Err is the
	// join's error (nil: the timeout's).
	Again bool
	Wait  time.Duration
	// Err: the join failed.
	Err error
	// Why says, for the log, why it waits or fails.
	Why string
	// Grant: send a lease grant (then Granted), at the clock reading
	// passed to Grant's caller.
	Grant bool
	// Txn: send it (then Answered).
	Txn *etcdserverpb.TxnRequest
	// AwaitDeleted: the name is taken; wait until Key is deleted after
	// Rev (then Deleted).
	AwaitDeleted *AwaitDeleted
}

// Joined is the incarnation a join or a resume made.
type Joined struct {
	Lease     int64
	CreateRev int64 // the key's create revision: the join's, or the resumed key's
	BoundRev  int64 // the revision the key was bound to Lease at
	Sent      int64 // the clock reading the grant was sent at
	Deadline  int64 // the fence deadline its TTL allows
	Resumed   bool
	Resp      *etcdserverpb.TxnResponse // the join's answer (its tail read: see CandidacyHint)
}

// AwaitDeleted names a key to wait for the deletion of.
type AwaitDeleted struct {
	Key string
	Rev int64
}

// ErrKeyGone means that a fenced incarnation's member key is gone, or no
// longer bound to its lease: the member cannot resume, and joins anew.
var ErrKeyGone = errors.New("rink: member key gone or bound to another lease")

// ErrJoinSlow means that a join or a resume took longer than its lease
// allows: the lease may be near its end. (The production driver returns
// it wrapped with context.DeadlineExceeded too.)
var ErrJoinSlow = errors.New("rink: joining took longer than the lease allows")

// NewJoiner returns a joiner for a member whose leases have TTL ttl, that
// resumes old (nil: joins anew) whose member key is key, builds its transactions with txn and
// draws its waits from b.
func NewJoiner(ttl time.Duration, key string, old *Inc, txn func(lease int64, old *Inc) *etcdserverpb.TxnRequest, b *Backoff) *Joiner {
	return &Joiner{ttl: ttl, key: key, old: old, txn: txn, b: b}
}

// TTL is the TTL to grant, in seconds.
func (j *Joiner) TTL() int64 { return int64(j.ttl / time.Second) }

// Resuming reports whether the joiner still resumes an incarnation.
func (j *Joiner) Resuming() bool { return j.old != nil }

// Start begins an attempt at clock reading now: grant a lease.
func (j *Joiner) Start(now int64) JoinStep {
	j.lease, j.sent = 0, now
	return JoinStep{Grant: true}
}

// Granted handles the grant's answer: a lease of ttl seconds, or err.
func (j *Joiner) Granted(lease, ttl int64, err error) JoinStep {
	if err != nil {
		again := !j.Resuming() && Transient(err)
		err = fmt.Errorf("rink: granting lease: %w", err)
		if again {
			return JoinStep{Again: true, Wait: j.b.Next(), Err: err, Why: "granting the lease failed, retrying"}
		}
		return JoinStep{Err: err}
	}
	j.lease, j.ttlS = lease, ttl
	return JoinStep{Txn: j.txn(lease, j.old)}
}

// Answered handles the answer to the join's or the resume's transaction,
// at clock reading now.
func (j *Joiner) Answered(resp *etcdserverpb.TxnResponse, err error, now int64) JoinStep {
	lease := j.lease
	j.lease = 0
	revoke := []int64{lease}
	switch {
	case err != nil && j.Resuming():
		// If the put landed after all, the key goes with the new lease:
		// the member joins anew, as when its key vanished. (And a key
		// found bound to it is its own, which never acted.)
		j.tried = append(j.tried, lease)
		return JoinStep{Revoke: revoke, Err: fmt.Errorf("rink: rebinding member key: %w", err)}
	case err != nil:
		// (It may have committed: the revoke takes the key with the
		// lease, or the retry finds it, ours, and revokes it again.)
		j.tried = append(j.tried, lease)
		again := Transient(err)
		err = fmt.Errorf("rink: creating member key: %w", err)
		if again {
			return JoinStep{Revoke: revoke, Again: true, Wait: j.b.Next(), Err: err, Why: "creating the member key failed, retrying"}
		}
		return JoinStep{Revoke: revoke, Err: err}
	case !resp.Succeeded && j.Resuming():
		old := j.old.Lease
		j.old = nil
		return JoinStep{Revoke: revoke, KeyGone: old, Again: true}
	case !resp.Succeeded:
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && slices.Contains(j.tried, kvs[0].Lease) {
			// Our own key, from an attempt whose answer was lost: it
			// never acted. Take it away and try again.
			return JoinStep{Revoke: append(revoke, kvs[0].Lease), Again: true, Wait: j.b.Next(),
				Why: "own member key from an unanswered attempt revoked, retrying"}
		}
		// The name is taken: wait for its key to go, then try again.
		return JoinStep{Revoke: revoke, AwaitDeleted: &AwaitDeleted{Key: j.key, Rev: resp.Header.Revision}}
	}
	deadline := DeadlineAfter(j.sent, j.ttlS, j.ttl)
	if now >= deadline {
		if j.Resuming() {
			// The key is bound to a lease we cannot trust. It is left to
			// expire, not revoked: while it is there it keeps our slots
			// from others, which after a restore may be what keeps them
			// safe (see hush). The next attempt waits for it to go.
			return JoinStep{Err: fmt.Errorf("%w (resuming)", ErrJoinSlow)}
		}
		// The lease may already be near its end. (If the revoke fails, a
		// key found bound to it is this member's own, which never acted.)
		j.tried = append(j.tried, lease)
		return JoinStep{Revoke: revoke, Err: ErrJoinSlow}
	}
	in := &Joined{Lease: lease, CreateRev: resp.Header.Revision, BoundRev: resp.Header.Revision, Sent: j.sent, Deadline: deadline, Resp: resp}
	if j.Resuming() {
		in.CreateRev, in.Resumed = j.old.CreateRev, true
		j.old = nil
	}
	return JoinStep{Joined: in}
}

// Retry returns, after an attempt that failed (Err, with no Again), how
// long to wait before the next.
func (j *Joiner) Retry() time.Duration { return j.b.Next() }

// Deleted handles the end of the wait for the name's key: deleted (err
// nil), try again at once; else the join failed.
func (j *Joiner) Deleted(err error) JoinStep {
	if err != nil {
		return JoinStep{Err: fmt.Errorf("rink: waiting for member key: %w", err)}
	}
	return JoinStep{Again: true}
}

// Transient reports whether err is an etcd error that a retry may not
// meet: an overloaded or leaderless cluster, a request that timed out (and
// may have committed), a connection lost. A join retries them until its
// timeout (at 10,000 members joining at once, etcd answered "too many
// requests" while its apply caught up).
func Transient(err error) bool {
	for _, e := range []error{rpctypes.ErrTooManyRequests, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged} {
		if errors.Is(err, e) {
			return true
		}
	}
	return status.Code(err) == codes.Unavailable
}
