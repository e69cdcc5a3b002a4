package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/replicated/counters"
	"github.com/rink-go/rink/internal/embedetcd"
)

const (
	// slots is the rink's slot count: few, so that the story starts fast
	// (every member must agree on it; rink's default is 1024).
	slots = 64
	// pages is the number of counters per tenant.
	pages = 4
)

// member is one replica of the service: a rink member, its etcd client and
// its counters.Node, the code to copy.
type member struct {
	name, zone string
	cli        *clientv3.Client
	r          *rink.Rink
	node       *counters.Node
	down       atomic.Bool // crashed, or stopped
}

// crash drops the member's connection to etcd, as kill -9 would: it sends
// nothing more, and its lease expires after the TTL. The rink stops by
// itself (its client is closed); then the node's goroutines end.
func (m *member) crash() {
	m.down.Store(true)
	m.cli.Close()
	<-m.r.Done()
	m.node.Close()
}

// stop leaves the rink gracefully, handing its roles over at once.
func (m *member) stop() {
	m.down.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.r.Shutdown(ctx)
	m.node.Close()
	m.cli.Close()
}

// takeover is one primary holding's start, as a member reported it.
type takeover struct {
	counters.Takeover
	member *member
	at     time.Time
	// others are the other members that served the tenant as its primary
	// at that moment: there must be none.
	others []string
}

// ack is one write the writer had acknowledged.
type ack struct {
	seq, token int64
	member     string
}

// failover is one tenant lost with its primary.
type failover struct {
	tenant string
	from   *member
	// secondaries are the members that held the tenant as secondaries
	// before the loss.
	secondaries []string
	// acked is the highest update number acknowledged before the loss:
	// the new primary's copy must hold at least that many updates.
	acked int64
	// to is the holding that took the tenant over.
	to takeover
}

// outcome is what run saw, for its test to check.
type outcome struct {
	crash, zoneLoss []failover
	lostZone        string
	acks            map[string][]ack // by tenant
	takeovers       []takeover
	refused         int
}

type story struct {
	cfg       config
	out       io.Writer
	name      string // the rink's name
	prefix    string // the counters' etcd prefix
	endpoints []string
	tenants   []string
	ob        *rink.Observer // the writer routes with it

	mu      sync.Mutex
	members []*member
	res     outcome
}

// run starts the members, a writer, a crash and a zone loss, and checks
// what happened; it returns what it saw even when a check fails.
func run(ctx context.Context, out io.Writer, cfg config) (*outcome, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	admin, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	name := fmt.Sprint("replicated-", time.Now().UnixNano())
	s := &story{cfg: cfg, out: out, name: name, prefix: "counters/" + name + "/", endpoints: admin.Endpoints(),
		tenants: counters.Roles("tenant", cfg.tenants), res: outcome{acks: map[string][]ack{}}}
	defer func() { // the counters' keys, once every member has gone
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = admin.Delete(dctx, s.prefix, clientv3.WithPrefix())
	}()
	defer func() {
		for _, m := range s.live() {
			m.stop()
		}
	}()
	for i := range cfg.members {
		if err := s.start(ctx, fmt.Sprint("m", i), fmt.Sprintf("zone-%c", 'a'+i%cfg.zones)); err != nil {
			return &s.res, err
		}
	}
	if s.ob, err = rink.NewObserver(admin, name); err != nil {
		return &s.res, err
	}
	defer s.ob.Close()
	if err := until(ctx, 30*time.Second, "every tenant served by its primary and followed by its secondaries", s.settled); err != nil {
		return &s.res, err
	}
	s.layout()

	wctx, stopWriter := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		s.write(wctx)
	}()
	defer func() { stopWriter(); writer.Wait() }()
	if err := s.writes(ctx, 5); err != nil {
		return &s.res, err
	}

	// A crash: the member that is primary of the most tenants.
	victim := s.mostPrimaries(s.live())
	s.res.crash, err = s.lose(ctx, fmt.Sprintf("%s (%s) crashes", victim.name, victim.zone), "crash", []*member{victim})
	if err != nil {
		return &s.res, err
	}
	if err := until(ctx, 30*time.Second, "new secondaries follow every tenant", s.settled); err != nil {
		return &s.res, err
	}
	if err := s.writes(ctx, 5); err != nil {
		return &s.res, err
	}

	// A zone loss: the zone whose members are primaries of the most
	// tenants loses every member at once.
	byZone := map[string][]*member{}
	for _, m := range s.live() {
		byZone[m.zone] = append(byZone[m.zone], m)
	}
	zone, most := "", -1
	for _, z := range slices.Sorted(maps.Keys(byZone)) {
		if n := s.primaries(byZone[z]); n > most {
			zone, most = z, n
		}
	}
	s.res.lostZone = zone
	var names []string
	for _, m := range byZone[zone] {
		names = append(names, m.name)
	}
	s.res.zoneLoss, err = s.lose(ctx, fmt.Sprintf("%s is lost: %s crash at once", zone, strings.Join(names, " and ")), "loss", byZone[zone])
	if err != nil {
		return &s.res, err
	}
	if err := until(ctx, 30*time.Second, "new secondaries follow every tenant", s.settled); err != nil {
		return &s.res, err
	}
	if err := s.writes(ctx, 3); err != nil {
		return &s.res, err
	}
	stopWriter()
	writer.Wait()
	return &s.res, s.verify(ctx, admin)
}

// start starts member name in zone: its own etcd client, its rink member
// and its counters.Node.
func (s *story) start(ctx context.Context, name, zone string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	// The TTL is short and the rebalance delay 0 so that the story runs
	// in seconds; see README.md for settings fit for production. Balanced
	// by slot count only: no load round moves a tenant during the story.
	r, err := rink.NewContext(ctx, cli, s.name,
		rink.WithMemberName(name),
		rink.WithZone(zone),
		rink.WithReplicas(s.cfg.replicas),
		rink.WithSlots(slots),
		rink.WithSessionTTL(s.cfg.ttl),
		rink.WithRebalanceDelay(0),
		rink.WithImbalanceTolerance(0))
	if err != nil {
		cli.Close()
		return err
	}
	m := &member{name: name, zone: zone, cli: cli, r: r}
	node, err := counters.Start(r, cli, counters.Config{Prefix: s.prefix, Roles: s.tenants, Serving: s.serving(m)})
	if err != nil {
		_ = r.Shutdown(context.Background())
		cli.Close()
		return err
	}
	m.node = node
	s.mu.Lock()
	s.members = append(s.members, m)
	s.mu.Unlock()
	return nil
}

// serving returns m's counters.Config.Serving: it records the takeover,
// with the other members that served the tenant as primary at that moment.
func (s *story) serving(m *member) func(counters.Takeover) {
	return func(t counters.Takeover) {
		tk := takeover{Takeover: t, member: m, at: time.Now()}
		s.mu.Lock()
		others := slices.Clone(s.members)
		s.mu.Unlock()
		for _, o := range others {
			if o != m && o.node.Status(t.Role).Primary {
				tk.others = append(tk.others, o.name)
			}
		}
		s.mu.Lock()
		s.res.takeovers = append(s.res.takeovers, tk)
		s.mu.Unlock()
	}
}

// live returns the members that have not crashed.
func (s *story) live() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []*member
	for _, m := range s.members {
		if !m.down.Load() {
			live = append(live, m)
		}
	}
	return live
}

// member returns the member called name, or nil.
func (s *story) member(name string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// settled reports whether the live members are at rest on one map, with
// every tenant served by its primary and followed by its secondaries.
func (s *story) settled() bool {
	live := s.live()
	if len(live) == 0 {
		return false
	}
	first := live[0].r.Rank()
	for _, m := range live {
		rk := m.r.Rank()
		if rk.Index < 0 || rk.Size != len(live) || rk.Version != first.Version || !rk.Settled {
			return false
		}
	}
	for _, tenant := range s.tenants {
		owners, ok := live[0].r.Owners(tenant)
		if !ok || len(owners) != min(s.cfg.replicas, len(live)) {
			return false
		}
		for i, o := range owners {
			m := s.member(o)
			if m == nil || m.down.Load() {
				return false
			}
			st := m.node.Status(tenant)
			if i == 0 && !st.Primary || i > 0 && !st.Following {
				return false
			}
		}
	}
	return true
}

// layout prints each member's tenants, and how many tenants have their
// replicas in distinct zones.
func (s *story) layout() {
	live := s.live()
	primary, secondary := map[string][]string{}, map[string][]string{}
	distinct := 0
	for _, tenant := range s.tenants {
		owners, _ := live[0].r.Owners(tenant)
		zones := map[string]bool{}
		for i, o := range owners {
			if i == 0 {
				primary[o] = append(primary[o], tenant)
			} else {
				secondary[o] = append(secondary[o], tenant)
			}
			zones[s.member(o).zone] = true
		}
		if len(zones) == len(owners) {
			distinct++
		}
	}
	fmt.Fprintf(s.out, "%d members in %d zones, %d replicas per slot, %d tenants; replicas in distinct zones for %d of %d tenants:\n",
		len(live), s.cfg.zones, s.cfg.replicas, len(s.tenants), distinct, len(s.tenants))
	for _, m := range live {
		fmt.Fprintf(s.out, "  %s (%s): primary of %s; secondary of %s\n", m.name, m.zone, list(primary[m.name]), list(secondary[m.name]))
	}
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, " ")
}

// primaries counts the tenants whose primary is one of ms.
func (s *story) primaries(ms []*member) int {
	n := 0
	for _, tenant := range s.tenants {
		if o, ok := ms[0].r.Owner(tenant); ok && slices.ContainsFunc(ms, func(m *member) bool { return m.name == o }) {
			n++
		}
	}
	return n
}

// mostPrimaries returns the member of ms that is primary of the most
// tenants.
func (s *story) mostPrimaries(ms []*member) *member {
	best, most := ms[0], -1
	for _, m := range ms {
		if n := s.primaries([]*member{m}); n > most {
			best, most = m, n
		}
	}
	return best
}

// write adds one page view at a time, to the tenants in turn, routing each
// write with the Observer to the tenant's primary, until ctx ends. A write
// routed to a member that does not serve the tenant (it crashed, or the
// tenant is moving) is refused, and counted.
func (s *story) write(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(s.cfg.rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		tenant := s.tenants[i%len(s.tenants)]
		owner, _ := s.ob.Owner(tenant)
		m := s.member(owner)
		if m == nil || m.down.Load() {
			s.mu.Lock()
			s.res.refused++
			s.mu.Unlock()
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		u, err := m.node.Add(wctx, tenant, fmt.Sprint("page-", rand.N(pages)), 1)
		cancel()
		s.mu.Lock()
		if err != nil {
			s.res.refused++
		} else {
			s.res.acks[tenant] = append(s.res.acks[tenant], ack{seq: u.Seq, token: u.Token, member: m.name})
		}
		s.mu.Unlock()
	}
}

// writes waits until every tenant has had n more writes acknowledged.
func (s *story) writes(ctx context.Context, n int) error {
	s.mu.Lock()
	base := map[string]int{}
	for _, tenant := range s.tenants {
		base[tenant] = len(s.res.acks[tenant])
	}
	s.mu.Unlock()
	return until(ctx, 30*time.Second, fmt.Sprintf("%d writes acknowledged for every tenant", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, tenant := range s.tenants {
			if len(s.res.acks[tenant]) < base[tenant]+n {
				return false
			}
		}
		return true
	})
}

// highestAck returns the highest update number acknowledged for tenant
// (s.mu held).
func (s *story) highestAck(tenant string) int64 {
	var h int64
	for _, a := range s.res.acks[tenant] {
		h = max(h, a.seq)
	}
	return h
}

// lose crashes victims at once and waits until every tenant they were
// primaries of is served again; it prints and returns who took each over.
func (s *story) lose(ctx context.Context, what, event string, victims []*member) ([]failover, error) {
	var router *member
	for _, m := range s.live() {
		if !slices.Contains(victims, m) {
			router = m
			break
		}
	}
	var fs []failover
	s.mu.Lock()
	for _, tenant := range s.tenants {
		owners, _ := router.r.Owners(tenant)
		if i := slices.IndexFunc(victims, func(m *member) bool { return m.name == owners[0] }); i >= 0 {
			fs = append(fs, failover{tenant: tenant, from: victims[i], secondaries: owners[1:], acked: s.highestAck(tenant)})
		}
	}
	s.mu.Unlock()
	var lost []string
	for _, f := range fs {
		lost = append(lost, f.tenant)
	}
	fmt.Fprintf(s.out, "%s (etcd clients closed, as by kill -9: leases expire within %v); primaries lost: %s\n", what, s.cfg.ttl, list(lost))

	mark := time.Now()
	var wg sync.WaitGroup
	for _, m := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.crash()
		}()
	}
	wg.Wait()
	err := until(ctx, 30*time.Second, "every lost tenant served again", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i := range fs {
			j := slices.IndexFunc(s.res.takeovers, func(t takeover) bool { return t.Role == fs[i].tenant && t.at.After(mark) })
			if j < 0 {
				return false
			}
			fs[i].to = s.res.takeovers[j]
		}
		return true
	})
	if err != nil {
		return fs, err
	}
	for _, f := range fs {
		t := f.to
		how := "taken over cold (it was not a secondary)"
		if t.Promoted {
			how = "promoted from secondary"
		}
		fmt.Fprintf(s.out, "  %s: %s (%s) serves it %.2fs later, %s, token %d: its copy held %d updates (%d acknowledged before the %s), %d read from etcd\n",
			f.tenant, t.member.name, t.member.zone, t.at.Sub(mark).Seconds(), how, t.Token, t.Warm, f.acked, event, t.CaughtUp)
	}
	return fs, nil
}

// verify checks, and prints, that every copy matches etcd, that every
// lost tenant was taken over warm by one of its secondaries (in another
// zone, after the zone loss), and that no tenant had two primaries at
// once: no primary started while another served, and along each tenant's
// history the writers' tokens only rose.
func (s *story) verify(ctx context.Context, admin *clientv3.Client) error {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// etcd's state, and every replica's copy of it.
	updates := int64(0)
	want := map[string]map[string]int64{}
	wantSeq := map[string]int64{}
	for _, tenant := range s.tenants {
		prefix := counters.Keys(s.prefix, tenant)
		resp, err := admin.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return err
		}
		values, sum := map[string]int64{}, int64(0)
		for _, kv := range resp.Kvs {
			v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
			switch rest := strings.TrimPrefix(string(kv.Key), prefix); {
			case rest == "seq":
				wantSeq[tenant] = v
			case strings.HasPrefix(rest, "data/"):
				values[strings.TrimPrefix(rest, "data/")] = v
				sum += v
			}
		}
		want[tenant] = values
		updates += wantSeq[tenant]
		if sum != wantSeq[tenant] {
			fail("%s: counters sum to %d in etcd, after %d updates of 1", tenant, sum, wantSeq[tenant])
		}
	}
	live := s.live()
	copiesMatch := func() bool {
		for _, tenant := range s.tenants {
			owners, _ := live[0].r.Owners(tenant)
			for _, o := range owners {
				values, seq := s.member(o).node.Copy(tenant)
				if seq != wantSeq[tenant] || !maps.Equal(values, want[tenant]) {
					return false
				}
			}
		}
		return true
	}
	if err := until(ctx, 10*time.Second, "every copy matches etcd", copiesMatch); err != nil {
		fail("a replica's copy does not match etcd: %v", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	acked := 0
	for _, tenant := range s.tenants {
		as := slices.Clone(s.res.acks[tenant])
		acked += len(as)
		slices.SortFunc(as, func(a, b ack) int { return int(a.seq - b.seq) })
		owner := map[int64]string{}
		for i, a := range as {
			if i > 0 && a.seq == as[i-1].seq {
				fail("%s: update %d acknowledged twice", tenant, a.seq)
			}
			if i > 0 && a.token < as[i-1].token {
				fail("%s: update %d written with token %d after update %d with token %d", tenant, a.seq, a.token, as[i-1].seq, as[i-1].token)
			}
			if o, ok := owner[a.token]; ok && o != a.member {
				fail("%s: token %d written by %s and %s", tenant, a.token, o, a.member)
			}
			owner[a.token] = a.member
			if a.seq > wantSeq[tenant] {
				fail("%s: update %d acknowledged, etcd has %d", tenant, a.seq, wantSeq[tenant])
			}
		}
	}
	last := map[string]int64{}
	for _, t := range s.res.takeovers {
		if len(t.others) > 0 {
			fail("%s: %s started serving while %s served it", t.Role, t.member.name, strings.Join(t.others, ", "))
		}
		if t.Token <= last[t.Role] {
			fail("%s: %s started with token %d after token %d", t.Role, t.member.name, t.Token, last[t.Role])
		}
		last[t.Role] = t.Token
	}
	for _, f := range append(slices.Clone(s.res.crash), s.res.zoneLoss...) {
		t := f.to
		switch {
		case !t.Promoted:
			fail("%s: taken over cold by %s; its secondaries before the loss: %v", f.tenant, t.member.name, f.secondaries)
		case !slices.Contains(f.secondaries, t.member.name):
			fail("%s: taken over by %s, a secondary chosen after the loss began: its secondaries before the loss, %v, were moved away", f.tenant, t.member.name, f.secondaries)
		case t.Warm < f.acked:
			fail("%s: %s's copy held %d updates, %d were acknowledged", f.tenant, t.member.name, t.Warm, f.acked)
		}
	}
	for _, f := range s.res.zoneLoss {
		if f.to.member.zone == s.res.lostZone {
			fail("%s: taken over in the lost zone %s", f.tenant, s.res.lostZone)
		}
	}

	fmt.Fprintf(s.out, "writes: %d acknowledged, %d refused (routed to a member that did not serve the tenant: crashed, or in a handover); etcd holds %d updates\n",
		acked, s.res.refused, updates)
	if len(problems) > 0 {
		return errors.New("checks failed:\n  " + strings.Join(problems, "\n  "))
	}
	fmt.Fprintf(s.out, "checked: every tenant's counters in etcd sum to its updates, and every primary's and secondary's copy matches them\n")
	fmt.Fprintf(s.out, "checked: the %d tenants lost with their primary were each taken over by a secondary whose copy held every acknowledged update\n",
		len(s.res.crash)+len(s.res.zoneLoss))
	fmt.Fprintf(s.out, "checked: %d primary holdings, none started while another member served its tenant; along every tenant's history tokens only rose\n",
		len(s.res.takeovers))
	return nil
}

// until polls cond every few milliseconds until it holds, for at most d.
func until(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
