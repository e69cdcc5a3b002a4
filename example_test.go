package rink_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/rink-go/rink"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var exampleSeq int

// exampleClient returns a client of the test etcd and a rink name of the
// example's own.
func exampleClient(name string) (*clientv3.Client, string) {
	exampleSeq++
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{rink.EtcdEndpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		log.Fatal(err)
	}
	return cli, fmt.Sprintf("%s-%d", name, exampleSeq)
}

func ExampleNew() {
	cli, name := exampleClient("orders")
	defer cli.Close()

	r, err := rink.New(cli, name,
		rink.WithMemberName("orders-0"),
		rink.WithSessionTTL(5*time.Second),
		rink.WithRebalanceDelay(10*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	// Wait to be ranked, without polling.
	rk := r.Rank()
	for rk.Index < 0 {
		<-rk.Changed()
		rk = r.Rank()
	}
	fmt.Printf("%s is %d of %d\n", rk.Member, rk.Index, rk.Size)
	// Output: orders-0 is 0 of 1
}

func ExampleNewContext() {
	cli, name := exampleClient("payments")
	defer cli.Close()

	// In a service, the context ends on SIGTERM:
	//
	//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	//	defer stop()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r, err := rink.NewContext(ctx, cli, name, rink.WithMemberName("payments-0"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	fmt.Println("joined as", r.Member())

	// A process restarted under a live member's name waits for that
	// member's key to go, up to the join timeout (15 s by default). Told to
	// stop meanwhile, it gives up at once.
	restarted, sigterm := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, sigterm)
	_, err = rink.NewContext(restarted, cli, name, rink.WithMemberName("payments-0"))
	fmt.Println("second join abandoned:", errors.Is(err, context.Canceled))
	// Output:
	// joined as payments-0
	// second join abandoned: true
}

func ExampleRink_AwaitRole() {
	cli, name := exampleClient("jobs")
	defer cli.Close()
	r, err := rink.New(cli, name, rink.WithMemberName("jobs-0"))
	if err != nil {
		log.Fatal(err)
	}

	leading := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ctx := r.AwaitRole("leader")
			if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
				fmt.Println("stopped")
				return
			}
			fmt.Println("leading")
			leading <- struct{}{}
			<-ctx.Done() // the singleton's work runs until the role is lost
			fmt.Println("lost the role:", context.Cause(ctx))
		}
	}()

	<-leading // then shut down, as on SIGTERM
	if err := r.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	<-done
	// Output:
	// leading
	// lost the role: rink: shut down
	// stopped
}

func ExampleRink_AwaitRoleContext() {
	cli, name := exampleClient("pairs")
	defer cli.Close()
	r, err := rink.New(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roleCtx, err := r.AwaitRoleContext(ctx, "BTC/ETH")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding BTC/ETH:", roleCtx.Err() == nil)
	// Output: holding BTC/ETH: true
}

func ExampleRink_Get() {
	cli, name := exampleClient("tenants")
	defer cli.Close()
	r, err := rink.New(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	// Get never blocks: handle a tenant's request here only if we hold it.
	if _, ok := r.Get("tenant:acme"); !ok {
		fmt.Println("not ours (yet)")
	}
	// Output: not ours (yet)
}

func ExampleRink_Owner() {
	cliA, name := exampleClient("routing")
	defer cliA.Close()
	cliB, _ := exampleClient("unused")
	defer cliB.Close()

	a, err := rink.New(cliA, name, rink.WithMemberName("a"), rink.WithRebalanceDelay(0))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	for a.Rank().Index < 0 {
		<-a.Rank().Changed()
	}
	b, err := rink.New(cliB, name, rink.WithMemberName("b"), rink.WithRebalanceDelay(0))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	for b.Rank().Index < 0 || a.Rank().Size < 2 {
		select {
		case <-a.Rank().Changed():
		case <-b.Rank().Changed():
		}
	}

	// Route each request to the member that owns its key.
	for _, pair := range []string{"BTC/ETH", "ETH/USDT", "SOL/USDC"} {
		owner, _ := a.Owner(pair)
		fmt.Printf("%s -> %s\n", pair, owner)
	}
	// Output:
	// BTC/ETH -> a
	// ETH/USDT -> a
	// SOL/USDC -> b
}

func ExampleToken() {
	cli, name := exampleClient("ledger")
	defer cli.Close()
	r, err := rink.New(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())

	ctx := r.AwaitRole("account:42")
	token, ok := rink.Token(ctx)
	// A store that keeps the highest token seen per key rejects writes that
	// carry a lower one: a stale holder cannot overwrite its successor.
	fmt.Println(ok, token > 0)
	// Output: true true
}

func ExampleRink_Shutdown() {
	cli, name := exampleClient("shutdown")
	defer cli.Close()
	r, err := rink.New(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	ctx := r.AwaitRole("leader")

	// On SIGTERM: leave within the pod's grace period.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		log.Fatal(err)
	}
	<-r.Done()
	fmt.Println(context.Cause(ctx))
	// Output: rink: shut down
}

func ExampleNewObserver() {
	cli, name := exampleClient("routed")
	defer cli.Close()
	r, err := rink.New(cli, name, rink.WithMemberName("api-0"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	r.AwaitRole("tenant:acme") // the member is up and holds its roles

	// A router that is not a member follows the rink read-only.
	ob, err := rink.NewObserver(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	for st := ob.State(); len(st.Members) == 0; st = ob.State() {
		<-st.Changed()
	}
	owner, _ := ob.Owner("tenant:acme")
	fmt.Println("send tenant:acme requests to", owner)
	// Output: send tenant:acme requests to api-0
}

func ExampleWithEvents() {
	cli, name := exampleClient("events")
	defer cli.Close()
	acquired := make(chan int64, rink.DefaultSlots)
	r, err := rink.New(cli, name, rink.WithEvents(func(e rink.Event) {
		if e.Kind == rink.EventAcquired { // called synchronously: be quick
			acquired <- e.Token
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	r.AwaitRole("leader")
	fmt.Println("first acquisition has a token:", <-acquired > 0)
	// Output: first acquisition has a token: true
}

func ExampleWithCapacity() {
	cliA, name := exampleClient("capacity")
	defer cliA.Close()
	cliB, _ := exampleClient("unused")
	defer cliB.Close()

	small, err := rink.New(cliA, name, rink.WithMemberName("small"), rink.WithRebalanceDelay(0))
	if err != nil {
		log.Fatal(err)
	}
	defer small.Shutdown(context.Background())
	for small.Rank().Index < 0 {
		<-small.Rank().Changed()
	}
	// A replica with three times the CPU takes three times the slots.
	big, err := rink.New(cliB, name, rink.WithMemberName("big"), rink.WithCapacity(3), rink.WithRebalanceDelay(0))
	if err != nil {
		log.Fatal(err)
	}
	defer big.Shutdown(context.Background())

	ob, err := rink.NewObserver(cliA, name)
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	for s := ob.State(); len(s.Members) < 2; s = ob.State() {
		<-s.Changed()
	}
	for _, m := range ob.State().Members {
		fmt.Printf("%s: capacity %v, %d slots\n", m.Name, m.Capacity, m.Slots)
	}
	// Output:
	// small: capacity 1, 256 slots
	// big: capacity 3, 768 slots
}

func ExampleRink_AddLoad() {
	cli, name := exampleClient("load")
	defer cli.Close()
	r, err := rink.New(cli, name, rink.WithMemberName("a"), rink.WithLoadInterval(100*time.Millisecond), rink.WithLoadWindow(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	ctx := r.AwaitRole("BTC/ETH")

	ob, err := rink.NewObserver(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	// Each order handled for the role counts one unit; the member
	// reports the rate in its load summary, once per load interval.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s := ob.State(); len(s.Members) == 0 || s.Members[0].Load == 0; s = ob.State() {
		select {
		case <-tick.C:
			if ctx.Err() == nil {
				r.AddLoad("BTC/ETH", 1)
			}
		case <-s.Changed():
		}
	}
	m := ob.State().Members[0]
	fmt.Printf("%s reports load: %v, awaited roles: %d\n", m.Name, m.Load > 0, m.Roles)
	// Output: a reports load: true, awaited roles: 1
}

func ExampleWithImbalanceTolerance() {
	var members []*rink.Rink
	var name string
	for i := 0; i < 3; i++ {
		cli, n := exampleClient("fair")
		defer cli.Close()
		if i == 0 {
			name = n
		}
		r, err := rink.New(cli, name, rink.WithMemberName(fmt.Sprint("m", i)), rink.WithRebalanceDelay(0),
			rink.WithImbalanceTolerance(0.1), rink.WithLoadInterval(100*time.Millisecond), rink.WithLoadWindow(200*time.Millisecond))
		if err != nil {
			log.Fatal(err)
		}
		defer r.Shutdown(context.Background())
		for r.Rank().Index < 0 {
			<-r.Rank().Changed()
		}
		members = append(members, r)
	}
	// Every member awaits three trading pairs; by hashing alone one member
	// could own two. Balanced by the roles awaited, each ends with one.
	pairs := []string{"BTC/ETH", "ETH/USDT", "SOL/USDC"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range members {
		for _, pair := range pairs {
			go func() {
				for ctx.Err() == nil {
					if held, err := r.AwaitRoleContext(ctx, pair); err == nil {
						<-held.Done()
					}
				}
			}()
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		held := map[string]int{}
		for _, r := range members {
			for _, pair := range pairs {
				if _, ok := r.Get(pair); ok {
					held[r.Member()]++
				}
			}
		}
		if len(held) == 3 && held["m0"] == 1 && held["m1"] == 1 && held["m2"] == 1 {
			fmt.Println("one pair per member")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("not balanced")
	// Output: one pair per member
}

func ExampleRink_Run() {
	cli, name := exampleClient("run")
	defer cli.Close()
	// With a drain timeout the heir of a role starts only once fn has
	// returned: fn may finish what it is doing after its context ends.
	r, err := rink.New(cli, name, rink.WithMemberName("worker-0"), rink.WithDrainTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- r.Run(context.Background(), "leader", func(ctx context.Context) error {
			fmt.Println("leading")
			close(started)
			<-ctx.Done() // the singleton's work, until the role is lost
			fmt.Println("flushing before the heir starts")
			return nil
		})
	}()
	<-started
	if err := r.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("Run returned:", <-done)
	// Output:
	// leading
	// flushing before the heir starts
	// Run returned: rink: shut down
}

func ExampleRink_Watch() {
	cli, name := exampleClient("tenants")
	defer cli.Close()
	r, err := rink.New(cli, name, rink.WithMemberName("tenants-0"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	assigned := make(chan string, 3)
	set, err := r.Watch(rink.Handler{
		Assigned: func(ctx context.Context, role string) { assigned <- role }, // start serving role until ctx ends
		Revoked:  func(role string) {},                                        // stop serving it: flush, close
	}, "tenant-a", "tenant-b", "tenant-c")
	if err != nil {
		log.Fatal(err)
	}
	defer set.Close()
	for range 3 {
		<-assigned
	}
	fmt.Println("held:", set.Held())
	// Output: held: [tenant-a tenant-b tenant-c]
}

// Wait until the rink is at rest, for a test or a rollout step that must
// not race a move: nothing moves in a settled rink until its members, the
// roles awaited or the load change.
func ExampleRank_settled() {
	cli, name := exampleClient("settled")
	defer cli.Close()

	var ms []*rink.Rink
	for i := 0; i < 3; i++ {
		r, err := rink.New(cli, name, rink.WithMemberName(fmt.Sprint("m", i)), rink.WithRebalanceDelay(0))
		if err != nil {
			log.Fatal(err)
		}
		defer r.Shutdown(context.Background())
		ms = append(ms, r)
	}
	for _, r := range ms {
		rk := r.Rank()
		for !rk.Settled || rk.Size != len(ms) {
			<-rk.Changed()
			rk = r.Rank()
		}
	}
	fmt.Println("at rest with", ms[0].Rank().Size, "members")
	// Output: at rest with 3 members
}

func ExampleObserver_Owners() {
	cli, name := exampleClient("replicated")
	defer cli.Close()
	// Two replicas per slot, in two zones: each role has a primary, which
	// serves it, and a secondary, which keeps its state warm and takes
	// over if the primary crashes.
	for i, zone := range []string{"zone-a", "zone-b"} {
		r, err := rink.New(cli, name, rink.WithMemberName(fmt.Sprint("kv-", i)),
			rink.WithReplicas(2), rink.WithZone(zone), rink.WithRebalanceDelay(0))
		if err != nil {
			log.Fatal(err)
		}
		defer r.Shutdown(context.Background())
	}

	ob, err := rink.NewObserver(cli, name)
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	st := ob.State()
	for owners, _ := st.Owners("tenant:acme"); len(owners) < 2; owners, _ = st.Owners("tenant:acme") {
		<-st.Changed() // until both members are ranked
		st = ob.State()
	}
	owners, _ := st.Owners("tenant:acme")
	primary, _ := st.Owner("tenant:acme")
	zone := map[string]string{}
	for _, m := range st.Members {
		zone[m.Name] = m.Zone
	}
	fmt.Println("replicas per slot:", st.Replicas)
	fmt.Println("the primary first:", owners[0] == primary)
	fmt.Println("zones:", slices.Sorted(slices.Values([]string{zone[owners[0]], zone[owners[1]]})))
	// Output:
	// replicas per slot: 2
	// the primary first: true
	// zones: [zone-a zone-b]
}
