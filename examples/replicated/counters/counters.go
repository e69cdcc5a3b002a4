// Package counters keeps a small state per role — a few named counters —
// on a rink with replicas per slot (rink.WithReplicas): the role's primary
// applies the writes, each one an etcd transaction guarded by the role's
// fencing token, and its secondaries follow every write into a local copy
// while they hold the role as secondaries (rink.Handler.Secondary). When
// the primary crashes, the secondary that rink promotes serves at once from
// its warm copy instead of rebuilding it. It is the part of the replicated
// example to copy into a service, and imports only rink, the etcd client,
// zap and the standard library.
//
// Each role's state lives in etcd under Config.Prefix and the role's name
// (path-escaped):
//
//	<prefix><role>/fence       the token of the role's newest primary (20 digits)
//	<prefix><role>/seq         how many updates the role has had
//	<prefix><role>/data/<key>  counter key's value
//
// The keys belong to the package: nothing else may write them (a write
// compares the count of updates with the seq key's etcd version).
//
// A primary first claims the role: it writes its token into the fence,
// unless a higher token is there already. It then reads whatever changed
// since its local copy's etcd revision (nothing, when it followed the role
// as a secondary until then) and serves. Each write is one transaction that
// commits only while the fence still holds the primary's token and the
// role has had exactly as many updates as the primary's copy: a primary
// that lost the role (paused, cut off from etcd) can write nothing after
// its successor's claim, and no write is made from a stale copy.
//
// A secondary reads what changed since its copy's revision and then
// watches the role's keys from there, so that the copy stays within a
// watch delivery of etcd. etcd is both the durable store and the channel
// from the primary to its secondaries here; a service whose state is
// larger or lives elsewhere keeps the same shape: the primary writes,
// guarded by its token, and the secondaries follow an ordered stream of
// its writes.
package counters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// opTimeout bounds each etcd request, so that a hung request becomes an
// error (and, for the loops that claim and follow, a retry).
const opTimeout = 5 * time.Second

// Errors returned by Add and Get.
var (
	// ErrNotPrimary means this member does not serve the role as its
	// primary right now: route the request again (rink's Owner).
	ErrNotPrimary = errors.New("counters: not the role's primary here")
	// ErrStale means a newer primary has claimed the role: this member's
	// holding is ending.
	ErrStale = errors.New("counters: the role was claimed by a newer primary")
	// ErrUnknownRole means the role is not one of Config.Roles.
	ErrUnknownRole = errors.New("counters: unknown role")
	// ErrCatchingUp means the primary is reading back the outcome of a
	// write that failed with an unknown outcome (it may have been
	// committed): retry in a moment.
	ErrCatchingUp = errors.New("counters: the primary is catching up after a failed write")
)

// Config is one member's configuration. Every member of the service uses
// the same Prefix and Roles.
type Config struct {
	// Prefix is the etcd key prefix of the roles' state, such as
	// "counters/". Required.
	Prefix string
	// Roles are the roles whose state this member keeps: as their primary
	// or as one of their secondaries, as the rink assigns them. Required.
	Roles []string
	// Serving, if set, is called each time this member starts serving a
	// role as its primary, once it has claimed the role and caught up.
	// Keep it short: the role serves meanwhile.
	Serving func(Takeover)
	// Log receives retries and errors (default: none).
	Log *zap.Logger
}

// Takeover describes the start of one primary holding.
type Takeover struct {
	// Role is the role, and Token the holding's fencing token.
	Role  string
	Token int64
	// Promoted says that this member held the role as a secondary until
	// the holding began (rink.ErrPromoted).
	Promoted bool
	// Warm is how many updates the local copy held when the holding
	// began, and CaughtUp how many more the primary read from etcd before
	// serving: a promoted secondary that kept up has Warm equal to the
	// role's updates and CaughtUp 0; a cold start has Warm 0.
	Warm, CaughtUp int64
	// Took is the time from the assignment to serving: waiting for the
	// secondary's follower to stop, the claim, and the catch-up.
	Took time.Duration
}

// Update is a write as the primary committed it.
type Update struct {
	Role, Key string
	// Value is the counter's new value.
	Value int64
	// Seq is the update's number in the role's history (1, 2, …), and
	// Token the token of the primary that wrote it.
	Seq, Token int64
}

// Status is this member's part in one role.
type Status struct {
	// Primary says this member serves the role as its primary, with
	// fencing token Token.
	Primary bool
	Token   int64
	// Following says this member follows the role as a secondary, and its
	// copy has caught up with etcd once since it started following.
	Following bool
	// Updates is how many updates the local copy holds.
	Updates int64
}

// Node is one member's part of the service: the local copies of the roles
// it holds, as primary or secondary.
type Node struct {
	cli    *clientv3.Client
	cfg    Config
	log    *zap.Logger
	roles  map[string]*role
	set    *rink.RoleSet
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the primaries' goroutines
}

// role is one role's local copy and this member's holdings of it.
//
// write is held by whoever changes the copy from etcd — the primary over
// each write transaction and its catch-up, a follower over each catch-up
// and each watch response it applies — so that the copy changes in etcd's
// order; mu guards the fields for readers, and is taken after write.
type role struct {
	name   string
	prefix string // <Config.Prefix><escaped name>/

	write sync.Mutex

	mu sync.Mutex
	// values, seq and rev are the copy: it reflects every change of the
	// role's keys in etcd up to revision rev, and holds seq updates.
	values map[string]int64
	seq    int64
	rev    int64
	// primary is the primary holding that serves, or nil.
	primary *holding
	// behind says a write of the primary failed with an unknown outcome:
	// etcd may hold one update more than the copy until the primary's
	// goroutine, woken through repair, has caught up.
	behind bool
	repair chan struct{}
	// follower is closed when the newest follower (a Handler.Secondary
	// call) has returned; nil if there never was one.
	follower chan struct{}
	// following says the newest follower has caught up and watches.
	following bool
	// promoted says the last follower ended with rink.ErrPromoted and no
	// primary holding has reported it yet.
	promoted bool
	// active counts the holdings, primary or secondary, still running:
	// the copy is dropped when the last ends because the role moved away.
	active int
}

// holding is one primary holding: its role context and token.
type holding struct {
	ctx   context.Context
	token int64
}

// Start keeps the state of cfg.Roles on this member of r, whose etcd client
// is cli: it watches the roles (rink.Watch), serves those it holds as
// their primary and follows those it holds as a secondary. Create r with
// rink.WithReplicas(k), k ≥ 2, for secondaries to exist (and rink.WithZone
// to spread them over failure domains). Close the node when done: after
// r.Shutdown, so that the primaries hand over at once.
func Start(r *rink.Rink, cli *clientv3.Client, cfg Config) (*Node, error) {
	if cfg.Prefix == "" {
		return nil, errors.New("counters: empty Prefix")
	}
	if len(cfg.Roles) == 0 {
		return nil, errors.New("counters: no Roles")
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	n := &Node{cli: cli, cfg: cfg, log: log.With(zap.String("member", r.Member())), roles: map[string]*role{}}
	for _, name := range cfg.Roles {
		if _, dup := n.roles[name]; dup {
			return nil, fmt.Errorf("counters: role %q listed twice", name)
		}
		n.roles[name] = &role{name: name, prefix: Keys(cfg.Prefix, name), values: map[string]int64{}, repair: make(chan struct{}, 1)}
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	set, err := r.Watch(rink.Handler{Assigned: n.assigned, Secondary: n.secondary}, cfg.Roles...)
	if err != nil {
		n.cancel()
		return nil, err
	}
	n.set = set
	return n, nil
}

// Close stops keeping state: it ends the follows and the primaries'
// goroutines and waits for them. It does not leave the rink: call it after
// the rink's Shutdown (or once the rink has stopped by itself).
func (n *Node) Close() {
	n.set.Close()
	n.cancel()
	n.wg.Wait()
}

// Add adds delta to counter key of role, as the role's primary, and
// returns the committed update. It returns ErrNotPrimary when this member
// does not serve the role as its primary (route the request again),
// ErrStale when a newer primary has claimed it, and etcd's error when the
// transaction failed: its outcome is then unknown (the update may have
// been committed), and the primary reads it back before it serves the role
// again. Writes to one role are applied one at a time.
func (n *Node) Add(ctx context.Context, roleName, key string, delta int64) (Update, error) {
	rs := n.roles[roleName]
	if rs == nil {
		return Update{}, ErrUnknownRole
	}
	rs.write.Lock()
	defer rs.write.Unlock()
	for attempt := 0; ; attempt++ {
		rs.mu.Lock()
		h, seq, value := rs.primary, rs.seq, rs.values[key]+delta
		rs.mu.Unlock()
		// Checked right before each write: Err also checks the lease's
		// fence deadline, so a member stopped past it writes nothing.
		if h == nil || h.ctx.Err() != nil {
			return Update{}, ErrNotPrimary
		}
		tctx, cancel := opContext(ctx, h.ctx)
		resp, err := n.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.Value(rs.fenceKey()), "=", token20(h.token)),
				clientv3.Compare(clientv3.Version(rs.seqKey()), "=", seq)).
			Then(clientv3.OpPut(rs.dataKey(key), strconv.FormatInt(value, 10)),
				clientv3.OpPut(rs.seqKey(), strconv.FormatInt(seq+1, 10))).
			Else(clientv3.OpGet(rs.fenceKey())).
			Commit()
		cancel()
		if err != nil {
			rs.mu.Lock()
			rs.behind = true
			rs.mu.Unlock()
			select {
			case rs.repair <- struct{}{}:
			default:
			}
			return Update{}, err
		}
		if resp.Succeeded {
			rs.mu.Lock()
			rs.values[key], rs.seq, rs.rev = value, seq+1, resp.Header.Revision
			rs.behind = false // (the transaction compared the copy's count with etcd's)
			rs.mu.Unlock()
			return Update{Role: roleName, Key: key, Value: value, Seq: seq + 1, Token: h.token}, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || string(kvs[0].Value) != token20(h.token) {
			return Update{}, ErrStale
		}
		// The fence is ours but etcd holds more updates than the copy: an
		// earlier write whose outcome was unknown did commit. Catch up and
		// write again.
		if attempt == 2 {
			return Update{}, fmt.Errorf("counters: %s: the local copy does not catch up with etcd", roleName)
		}
		if _, err := n.catchUp(h.ctx, rs); err != nil {
			return Update{}, err
		}
	}
}

// Get returns counter key of role as the role's primary serves it (0 for a
// counter never written). It returns ErrNotPrimary when this member does
// not serve the role as its primary, and ErrCatchingUp while the primary
// reads back the outcome of a failed write. (A secondary's copy may lag its
// primary by a watch delivery; Copy reads it.)
func (n *Node) Get(roleName, key string) (int64, error) {
	rs := n.roles[roleName]
	if rs == nil {
		return 0, ErrUnknownRole
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.primary == nil || rs.primary.ctx.Err() != nil {
		return 0, ErrNotPrimary
	}
	if rs.behind {
		return 0, ErrCatchingUp
	}
	return rs.values[key], nil
}

// Copy returns this member's local copy of role: the counters and how
// many updates it holds, whatever this member's part in the role.
func (n *Node) Copy(roleName string) (values map[string]int64, updates int64) {
	rs := n.roles[roleName]
	if rs == nil {
		return nil, 0
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return maps.Clone(rs.values), rs.seq
}

// Status returns this member's part in role.
func (n *Node) Status(roleName string) Status {
	rs := n.roles[roleName]
	if rs == nil {
		return Status{}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := Status{Following: rs.following, Updates: rs.seq}
	if h := rs.primary; h != nil && h.ctx.Err() == nil {
		st.Primary, st.Token = true, h.token
	}
	return st
}

// assigned is Handler.Assigned: this member holds role as its primary. It
// serves it on a goroutine of its own, to keep the set's goroutine free.
func (n *Node) assigned(ctx context.Context, roleName string) {
	rs := n.roles[roleName]
	rs.mu.Lock()
	rs.active++
	rs.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.serve(ctx, rs)
	}()
}

// serve runs one primary holding of rs until ctx (the role's context) or
// the node ends: it waits for the follower of the role to stop, claims the
// role with the holding's token, catches the copy up, and serves.
func (n *Node) serve(ctx context.Context, rs *role) {
	began := time.Now()
	token, _ := rink.Token(ctx)
	h := &holding{ctx: ctx, token: token}
	defer func() {
		rs.write.Lock() // (after a write in flight, which may still apply)
		rs.mu.Lock()
		if rs.primary == h {
			rs.primary = nil
		}
		rs.release(context.Cause(ctx))
		rs.mu.Unlock()
		rs.write.Unlock()
	}()
	rs.mu.Lock()
	follower := rs.follower
	rs.mu.Unlock()
	if follower != nil {
		// A promoted secondary's follower returns as soon as it sees its
		// context end (rink.ErrPromoted), just before this holding began.
		select {
		case <-follower:
		case <-ctx.Done():
			return
		case <-n.ctx.Done():
			return
		}
	}
	rs.mu.Lock()
	warm, promoted := rs.seq, rs.promoted
	rs.promoted = false
	rs.mu.Unlock()

	var b backoff
	for {
		err := n.claim(ctx, rs, token)
		if err == nil {
			break
		}
		if errors.Is(err, ErrStale) {
			// A newer primary has claimed the role: this holding is about
			// to end.
			n.log.Warn("role claimed by a newer primary", zap.String("role", rs.name), zap.Int64("token", token))
			select {
			case <-ctx.Done():
			case <-n.ctx.Done():
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("claiming a role failed; retrying", zap.String("role", rs.name), zap.Error(err))
		if !b.wait(ctx) {
			return
		}
	}
	b.reset()
	for {
		rs.write.Lock()
		_, err := n.catchUp(ctx, rs)
		if err == nil {
			rs.mu.Lock()
			rs.primary, rs.behind = h, false
			rs.mu.Unlock()
		}
		rs.write.Unlock()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("reading a role's state failed; retrying", zap.String("role", rs.name), zap.Error(err))
		if !b.wait(ctx) {
			return
		}
	}
	rs.mu.Lock()
	seq := rs.seq
	rs.mu.Unlock()
	if n.cfg.Serving != nil {
		n.cfg.Serving(Takeover{Role: rs.name, Token: token, Promoted: promoted, Warm: warm, CaughtUp: seq - warm, Took: time.Since(began)})
	}
	// Serve until the holding ends, reading back the outcome of each
	// write that failed.
	b.reset()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.ctx.Done():
			return
		case <-rs.repair:
		}
		rs.write.Lock()
		rs.mu.Lock()
		behind := rs.behind
		rs.mu.Unlock()
		var err error
		if behind {
			if _, err = n.catchUp(ctx, rs); err == nil {
				rs.mu.Lock()
				rs.behind = false
				rs.mu.Unlock()
			}
		}
		rs.write.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("reading a role's state failed; retrying", zap.String("role", rs.name), zap.Error(err))
			if !b.wait(ctx) {
				return
			}
			select {
			case rs.repair <- struct{}{}:
			default:
			}
			continue
		}
		b.reset()
	}
}

// claim writes token into rs's fence, unless a higher token is there
// (ErrStale). It is idempotent: a claim retried after an error of unknown
// outcome succeeds.
func (n *Node) claim(ctx context.Context, rs *role, token int64) error {
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := n.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.Value(rs.fenceKey()), ">", token20(token))).
		Else(clientv3.OpPut(rs.fenceKey(), token20(token))).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		return ErrStale
	}
	return nil
}

// catchUp reads the role's keys changed since the copy's revision and
// applies them (rs.write held); it returns the revision the copy reflects
// now. The copy changes only if the read succeeds.
func (n *Node) catchUp(ctx context.Context, rs *role) (int64, error) {
	rs.mu.Lock()
	from := rs.rev
	rs.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := n.cli.Get(tctx, rs.prefix, clientv3.WithPrefix(), clientv3.WithMinModRev(from+1))
	if err != nil {
		return 0, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, kv := range resp.Kvs {
		rs.apply(string(kv.Key), string(kv.Value), false)
	}
	rs.rev = max(rs.rev, resp.Header.Revision)
	return rs.rev, nil
}

// secondary is Handler.Secondary: this member holds role as a secondary
// until ctx ends. It follows the role's writes into the local copy.
func (n *Node) secondary(ctx context.Context, roleName string) {
	rs := n.roles[roleName]
	done := make(chan struct{})
	rs.mu.Lock()
	prev := rs.follower
	rs.follower = done
	rs.active++
	rs.mu.Unlock()
	defer func() {
		cause := context.Cause(ctx)
		rs.write.Lock()
		rs.mu.Lock()
		if rs.follower == done {
			rs.following = false
		}
		rs.promoted = errors.Is(cause, rink.ErrPromoted)
		rs.release(cause)
		rs.mu.Unlock()
		rs.write.Unlock()
		close(done)
	}()
	if prev != nil { // the previous follow of this role, ending
		select {
		case <-prev:
		case <-ctx.Done():
			return
		}
	}
	var b backoff
	for {
		err := n.follow(ctx, rs, done, &b)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("following a role failed; retrying", zap.String("role", rs.name), zap.Error(err))
		if !b.wait(ctx) {
			return
		}
	}
}

// follow catches the copy up and then applies the role's writes as etcd's
// watch delivers them, until ctx ends or the watch fails (a compaction,
// the loss of etcd's leader): it returns why.
func (n *Node) follow(ctx context.Context, rs *role, me chan struct{}, b *backoff) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	rs.write.Lock()
	rev, err := n.catchUp(wctx, rs)
	rs.write.Unlock()
	if err != nil {
		return err
	}
	rs.mu.Lock()
	if rs.follower == me {
		rs.following = true
	}
	rs.mu.Unlock()
	b.reset()
	for resp := range n.cli.Watch(wctx, rs.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		rs.write.Lock()
		rs.mu.Lock()
		// The events of one revision (a write puts its counter and seq
		// together) come in one response: apply them all against the
		// revision the copy had before.
		from := rs.rev
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > from {
				rs.apply(string(ev.Kv.Key), string(ev.Kv.Value), ev.Type == clientv3.EventTypeDelete)
				rs.rev = max(rs.rev, ev.Kv.ModRevision)
			}
		}
		rs.mu.Unlock()
		rs.write.Unlock()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("counters: watch closed")
}

// apply applies one key of the role to the copy (rs.mu held).
func (rs *role) apply(key, value string, deleted bool) {
	rest := strings.TrimPrefix(key, rs.prefix)
	v, _ := strconv.ParseInt(value, 10, 64) // (0 for a deletion)
	switch {
	case rest == "seq":
		rs.seq = v
	case strings.HasPrefix(rest, "data/"):
		if deleted {
			delete(rs.values, rest[len("data/"):])
		} else {
			rs.values[rest[len("data/"):]] = v
		}
	}
}

// release counts one holding of the role as ended with cause (rs.write and
// rs.mu held). When the last one ends because the role moved to other
// members, the copy is dropped: this member no longer keeps the role.
func (rs *role) release(cause error) {
	rs.active--
	if rs.active == 0 && errors.Is(cause, rink.ErrRoleMoved) {
		rs.values, rs.seq, rs.rev = map[string]int64{}, 0, 0
	}
}

func (rs *role) fenceKey() string          { return rs.prefix + "fence" }
func (rs *role) seqKey() string            { return rs.prefix + "seq" }
func (rs *role) dataKey(key string) string { return rs.prefix + "data/" + key }

// Keys returns the etcd key prefix of role's state: prefix (Config.Prefix),
// the role's name path-escaped (a role may contain slashes), and a slash.
func Keys(prefix, role string) string { return prefix + url.PathEscape(role) + "/" }

// token20 formats a token so that etcd's byte-wise comparison of values
// orders tokens numerically.
func token20(t int64) string { return fmt.Sprintf("%020d", t) }

// opContext returns a context for one request: ctx with opTimeout, also
// cancelled when the role context roleCtx ends.
func opContext(ctx, roleCtx context.Context) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	stop := context.AfterFunc(roleCtx, cancel)
	return tctx, func() {
		stop()
		cancel()
	}
}

// Roles returns n role names, prefix-00 to prefix-(n-1), zero-padded so
// that they sort in order.
func Roles(prefix string, n int) []string {
	width := max(len(strconv.Itoa(n-1)), 2)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%0*d", prefix, width, i)
	}
	return out
}

// backoff spaces out retries: 50 ms at first, doubling up to 2 s, each wait
// drawn at random from its upper half.
type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

// wait sleeps before the next attempt; it reports false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	b.next = min(max(2*b.next, 50*time.Millisecond), 2*time.Second)
	t := time.NewTimer(b.next/2 + rand.N(b.next/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
