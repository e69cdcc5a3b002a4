// Package rink turns the replicas of a service into a sticky ranked ring on
// etcd.
//
// Every replica joins as a member: it learns its rank (index m of n ranked
// members) and holds named roles — "leader", "BTC/ETH", "partition:42" —
// each of which belongs to exactly one ranked member at a time. Roles hash to
// a fixed number of slots, and a slot table proclaimed by the rink's leader
// gives each slot to one member. When members join, leave, crash or are
// replaced one by one in a rolling deploy, as few slots as possible move,
// and a role never has two live holders.
//
// # Use
//
//	r, err := rink.New(cli, "orders") // cli is a *clientv3.Client
//	if err != nil { ... }
//	defer r.Shutdown(context.Background())
//	for {
//		ctx := r.AwaitRole("leader") // blocks until this member holds "leader"
//		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
//			return
//		}
//		runLeaderLoop(ctx) // ctx is cancelled the moment the role is lost
//	}
//
// Get answers without blocking, Owner tells which member owns a role (for
// routing requests), Rank tells this member's index and the rink's size, and
// Token gives a role context's fencing token. NewContext joins like New but
// gives up when its context ends (a SIGTERM during a long join); Err tells,
// once Done is closed, why the rink stopped.
//
// # After a stop
//
// A rink stops on Shutdown, or when its etcd client is closed under it.
// Whatever stopped it, its methods agree on why: from the moment the stop
// begins, AwaitRole's context comes back cancelled and AwaitRoleContext,
// Run, Watch and RoleSet.Add return an error, and the role contexts the
// stop ends are cancelled with a cause, all of them the error Err gives
// once Done is closed — ErrShutdown, or ErrClientClosed, which wraps it,
// so errors.Is(err, ErrShutdown) tells that the rink stopped either way.
// Ready is false from then on. Once the rink has stopped, or Shutdown has
// returned, Get, Owner and Owners answer false (a router must not route by
// a stopped member's last map); once Done is closed, Rank has Index -1,
// Size 0 and no Leader, AddLoad is ignored, and RoleSets have had every
// role revoked. An
// Observer after Close answers no Owner or Owners, and its State is empty
// but for Rink and Closed; a State taken before Close stays a snapshot.
//
// # Events
//
// WithEvents reports this member's state changes as Events, for metrics
// and logs (rinkprom turns them into Prometheus metrics; Event.String
// prints one as a line). Holdings are reported per slot, not per role: a
// member acquires and releases every slot its map gives it, one
// EventAcquired and one EventReleased each, whether any role hashes there
// or not — a lone member of a rink of 1,024 slots logs 1,024 acquisitions
// as it starts, however few roles it awaits. Event.Roles counts the roles
// this member awaits in the slot, so a log that keeps only the events
// whose Roles is not 0 shows the acquisitions that matter to the service.
// To act on roles, read AwaitRole, Run or Watch (Handler.Assigned and
// Revoked name each role), not events.
//
// # The rink's leader
//
// In this documentation "the leader", "the rink's leader" and Rank().Leader
// (State.Leader for an Observer) mean one thing: the member currently
// elected, through an etcd election among the members, to coordinate the
// rink. It proclaims the maps, ranks waiting members and summarises
// acknowledgements; any member may be elected, and a change of leader moves
// no role. It has nothing to do with a role a service happens to name
// "leader", as in the example above: that role hashes to a slot like any
// other role, may be held by any ranked member, and Owner("leader") tells
// which. etcd's own Raft leader is called the etcd leader.
//
// # Membership
//
// A member joins with an etcd lease and a member key bound to it. The first
// member of an empty rink is ranked at once. A member that joins a non-empty
// rink waits (index -1) until a ranked member leaves — it then takes that
// member's index and all its slots at once, so a rolling deploy moves every
// role exactly once — or until it has waited the rebalance delay (measured
// on the leader's monotonic clock), when the leader ranks it and it takes
// its share of slots from the most loaded members. When a ranked member
// leaves and nobody waits, the member with the highest index moves into its
// index and the leaver's slots are spread over the survivors; nothing else
// moves. Slot tables stay balanced: every member owns floor(S/n) or
// ceil(S/n) of the S slots, or, with WithCapacity, its share S·c/Σc rounded
// down or up.
//
// # Load
//
// Holders may record the work each role costs (AddLoad); members publish a
// decaying rate per slot, which Observers, rinkctl and rinkprom show. The
// leader balances by that load (or, where nobody records load, by the
// roles the members await) instead of by slot count, whenever some slot
// carries load. Members report the roles they await as they join, so a
// newcomer is ranked with its share of them; after that, at most once per
// load interval and only while the load is out of balance, the leader
// moves loaded slots from the most to the least loaded members, a few per
// cent of the slots at a time, through the same handover barrier as every
// other move, until the most loaded member is within the tolerance
// (WithImbalanceTolerance, 10 % by default; 0 turns it off) of the mean.
//
// # At rest
//
// Rank().Settled (and Observer's State.Settled, rinkctl status, and
// EventSettled) says that the rink is at rest: its leader plans no move
// (nobody waits to be ranked, no move is announced, no load round would
// move a slot) and every member has acknowledged the map. A rink at rest
// moves nothing until its membership, the roles awaited or the load
// measured change; tests and rollouts can wait for it instead of sleeping.
//
// # Work per role, drain and warm-up
//
// Run runs a function per holding of a role; Watch calls a Handler as this
// member gains and loses any number of roles, with no goroutine per role,
// and RoleSet.Held lists those it holds. With WithDrainTimeout a role that
// moves away is handed over only once those functions have returned (or
// the timeout has passed), so its holder may finish what it was doing.
// With WithWarmup the leader announces planned moves (a scale-out, a load
// move, a Shutdown) before it makes them: the heir's Handler.Warm prepares
// the role while its owner still serves it, and the move waits until the
// heir is ready (or the warm-up time has passed). A crash moves roles at
// once, cold.
//
// # Replicas and zones
//
// WithReplicas(k) gives every slot k replicas on distinct members: its
// primary, which holds its roles exactly as above (AwaitRole, Get, Token,
// Owner, Run, Handler.Assigned), and k-1 secondaries, which keep a warm
// copy of the roles' state: Handler.Secondary runs while this member holds
// a role as a secondary, with a context that ends when that holding does.
// When a primary crashes, or leaves with nobody waiting, its secondary
// that has held the slot longest takes it over (its secondary context ends
// with ErrPromoted, and Assigned follows, with a token above every earlier
// one); a graceful leave with a member waiting hands the leaver's index
// with every replica to it, so a rolling deploy moves each primary once.
// WithZone(z) names a member's failure domain: a slot's replicas sit in as
// many distinct zones as the members' zones allow, so that losing a zone
// promotes its primaries to secondaries in other zones. Owners lists a
// role's replicas, primary first. Every member must agree on k; with one
// (the default) the rink's map is that of earlier releases, plus the leases
// it records (which they ignore).
//
// # Guarantees
//
// At most one holder: a member starts holding a role only when the role's
// slot is its own in the newest map it has applied and every other live
// member has either acknowledged a map version that took the slot away from
// it or never had the slot in any map since its last acknowledgement. Only
// the leader reads the acknowledgements; it publishes one summary (a lower
// bound per member) that every member follows. Only the members whose slots
// a map moves acknowledge it, and from protocol 3 the map reaches members
// as a record of what changed, so a map change costs each member a handful
// of small watch events whatever the rink's size. A
// member that cannot confirm its lease renewal in time cancels every role
// context before the lease can expire on the etcd server, so members whose
// lease has ended hold nothing. Role contexts are the unit of the promise:
// the previous holder's context is cancelled before the next holder's
// context starts. Work that ignores cancellation is not covered; downstream
// stores can make it harmless with fencing tokens.
//
// With replicas, at no instant do more than k members hold a slot, as
// primary or secondary, nor more than one its primary: a member joins a
// slot's replicas only once every member a map dropped from them has
// acknowledged a map without it, as an heir waits for the previous owner.
//
// Fencing tokens: every role context carries an int64 (an etcd revision)
// that strictly increases across successive holdings of the role, whichever
// members hold it.
//
// Smooth handover: roles whose slot keeps its owner are never interrupted by
// a map change. A graceful Shutdown hands its roles over without waiting for
// a lease to expire or an election: the leaving member proclaims the map
// without itself and deletes its key in one etcd transaction.
//
// These hold under these assumptions: etcd is linearizable (a majority of
// its members is up and reachable from the etcd leader); clocks of members and
// etcd servers may differ arbitrarily but their rates differ by far less than
// the fencing margin, one eighth of the session TTL; nobody but a member
// itself deletes its member key or revokes its lease; and a process paused
// (GC, SIGSTOP) longer than that margin while it holds roles is not stopped
// from running the code it was in — no library can do that; fencing tokens
// are the defence.
//
// # Not guaranteed
//
// Liveness needs etcd: while etcd is unreachable or has no etcd leader, roles
// that lose their holder stay unheld. A crashed member's roles move after
// its lease expires (the session TTL, plus up to half a second for etcd's
// expiry check). Owner answers from this member's newest map, which can lag
// the rink's by a watch delivery.
package rink
