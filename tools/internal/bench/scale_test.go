package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

func startEtcd(t *testing.T) (*embedetcd.Server, *clientv3.Client) {
	t.Helper()
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

// TestKeepAliveSize checks the size Run subtracts per lease renewal
// against what etcd's own counter adds for renewals and nothing else.
func TestKeepAliveSize(t *testing.T) {
	_, cli := startEtcd(t)
	ctx := context.Background()
	if _, err := cli.Put(ctx, "k", "v"); err != nil { // a revision above 1
		t.Fatal(err)
	}
	grant, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := readEtcd()
	if err != nil {
		t.Fatal(err)
	}
	const renewals = 10
	var resp *clientv3.LeaseKeepAliveResponse
	for range renewals {
		if resp, err = cli.KeepAliveOnce(ctx, grant.ID); err != nil {
			t.Fatal(err)
		}
	}
	c1, err := readEtcd()
	if err != nil {
		t.Fatal(err)
	}
	h := resp.ResponseHeader
	size := keepAliveSize(h.ClusterId, h.MemberId, h.Revision, h.RaftTerm, int64(grant.ID), 30)
	if got := c1.keepAlives - c0.keepAlives; got != renewals {
		t.Fatalf("%v renewals counted, want %d", got, renewals)
	}
	if got, want := c1.sentBytes-c0.sentBytes, float64(renewals*size); got != want {
		t.Fatalf("etcd sent %v bytes for %d renewals; keepAliveSize says %d each (%v)", got, renewals, size, want)
	}
	if cost := costBetween(c0, c1, size); cost.sentBytes != 0 || cost.writes != 0 || cost.renewals != renewals {
		t.Fatalf("renewals alone cost %+v", cost)
	}
	t.Logf("a renewal's answer: %d bytes", size)
}

func TestMembersChanged(t *testing.T) {
	before := slotMap{Members: []string{"a", "b", "c"}, Table: []int{0, 1, 2, 0, 1, 2}}
	for _, c := range []struct {
		after slotMap
		want  int
	}{
		{before, 0},
		{slotMap{Members: []string{"c", "a", "b"}, Table: []int{1, 2, 0, 1, 2, 0}}, 0}, // reindexed, same owners
		{slotMap{Members: []string{"a", "b", "c", "d"}, Table: []int{0, 1, 2, 3, 1, 2}}, 2},
		{slotMap{Members: []string{"a", "b", "c", "d"}, Table: []int{3, 1, 2, 0, 3, 2}}, 3},
		{slotMap{Members: []string{"a", "c"}, Table: []int{0, 0, 1, 0, 1, 1}}, 3},
	} {
		if got := membersChanged(before, c.after); got != c.want {
			t.Errorf("%v -> %v: %d members changed, want %d", before, c.after, got, c.want)
		}
	}
}

func TestScaleSizes(t *testing.T) {
	for _, c := range []struct {
		members, slots int
		ttl            time.Duration
	}{
		{2, 1024, 10 * time.Second},
		{1000, 1024, 10 * time.Second},
		{2000, 2048, 10 * time.Second},
		{5000, 8192, 15 * time.Second},
		{10000, 16384, 30 * time.Second},
		{100000, rink.MaxSlots, 300 * time.Second},
	} {
		if got := ScaleSlots(c.members); got != c.slots {
			t.Errorf("ScaleSlots(%d) = %d, want %d", c.members, got, c.slots)
		}
		if got := ScaleTTL(c.members); got != c.ttl {
			t.Errorf("ScaleTTL(%d) = %v, want %v", c.members, got, c.ttl)
		}
	}
}

// write is one revision seen by a watch on every key.
type write struct {
	rev  int64
	at   time.Time
	ops  []string
	size int // the keys' and values' bytes
}

// TestBreadthCountsWrites runs the breadth part on 3 members, with a watch
// on every key of etcd beside it, and checks the writes Run counts from
// etcd's metrics against the revisions the watch saw in each window. It
// logs the writes, for counting them by hand.
func TestBreadthCountsWrites(t *testing.T) {
	s, _ := runWatched(t, 3, ScaleSlots(3))
	// 3 members and a newcomer on 1,024 slots: the newcomer takes slots
	// from each of the 3; the leaver's slots go to the 3 left.
	if got := s["members_changed_join"]; got != 4 {
		t.Errorf("members_changed_join %v, want 4", got)
	}
	if got := s["members_changed_leave"]; got != 4 {
		t.Errorf("members_changed_leave %v, want 4", got)
	}
	if s["overlaps"] != 0 {
		t.Errorf("overlaps %v", s["overlaps"])
	}
}

// runWatched runs the breadth part on n members, with a watch on every key
// of etcd beside it, checks the writes Run counts from etcd's metrics
// against the revisions the watch saw in each window, and logs them. It
// returns Run's sample and, per change ("join", "leave"), how many of the
// writes wrote the floor key, and what those writes cost each member
// (floorBytes: each member's watch receives each floor write: its key and
// value, and floorOverhead).
func runWatched(t *testing.T, n, slots int) (Sample, map[string]int) {
	srv, cli := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var writes []write
	wch := cli.Watch(ctx, "", clientv3.WithPrefix())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for resp := range wch {
			mu.Lock()
			for _, ev := range resp.Events {
				if len(writes) == 0 || writes[len(writes)-1].rev != ev.Kv.ModRevision {
					writes = append(writes, write{rev: ev.Kv.ModRevision, at: time.Now()})
				}
				op := "put "
				if ev.Type == clientv3.EventTypeDelete {
					op = "del "
				}
				w := &writes[len(writes)-1]
				w.ops = append(w.ops, op+string(ev.Kv.Key))
				w.size += len(ev.Kv.Key) + len(ev.Kv.Value)
			}
			mu.Unlock()
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	b, err := NewBreadth(Env{Endpoints: []string{srv.Endpoint()}}, n, 2, BreadthConfig{Slots: slots, TTL: ScaleTTL(n), LoadInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Run()
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The watch has seen every write of the windows once it has seen the
	// last one.
	if err := until(10*time.Second, "the watch saw the leave's writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(writes) > 0 && writes[len(writes)-1].rev >= b.leaveRevs[1]
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	floors := map[string]int{}
	for _, c := range []struct {
		change string
		revs   [2]int64
	}{{"join", b.joinRevs}, {"leave", b.leaveRevs}} {
		var seen []string
		n := 0
		for _, w := range writes {
			if w.rev > c.revs[0] && w.rev <= c.revs[1] {
				n++
				if len(w.ops) == 1 && strings.HasSuffix(w.ops[0], "/floor") {
					floors[c.change]++
					floors[c.change+"_bytes"] += w.size + floorOverhead
				}
				ops := append([]string(nil), w.ops...)
				sort.Strings(ops)
				seen = append(seen, fmt.Sprintf("  %d %s: %s", w.rev, w.at.Format("05.000"), strings.Join(ops, ", ")))
			}
		}
		t.Logf("the %s (%s): %v writes, %v proposals, %v members changed, %.0f bytes per member\n%s", c.change, b.name, s["etcd_writes_per_"+c.change], s["etcd_proposals_per_"+c.change],
			s["members_changed_"+c.change], s["etcd_sent_bytes_per_member_"+c.change], strings.Join(seen, "\n"))
		if got := s["etcd_writes_per_"+c.change]; got != float64(n) || n == 0 {
			t.Errorf("the %s: %v writes counted, the watch saw %d", c.change, got, n)
		}
		if got := s["etcd_proposals_per_"+c.change]; got < float64(n) {
			t.Errorf("the %s: %v proposals, fewer than the %d writes", c.change, got, n)
		}
		if s["etcd_sent_bytes_per_member_"+c.change] <= 0 {
			t.Errorf("the %s: no bytes sent", c.change)
		}
	}
	return s, floors
}

// TestCostFollowsTheChange guards what one join and one graceful leave
// cost in rinks of 50 and 200 members (issue 25), by counting, not timing:
//
//   - the bytes etcd sends each member (at most 2 KiB besides the floor
//     writes) and the allocations per member grow by at most half from 50
//     to 200 members;
//   - besides the floor, etcd's writes stay within two per member whose
//     slots the change moved (its acknowledgement and its load summary)
//     and three more (the newcomer's key, or the departure; the map; the
//     newcomer's first load summary, or the lease's end), whatever the
//     rink's size;
//   - the floor is written at most twice per member moved, and once more:
//     once per change when the acknowledgements come together, as on an
//     idle machine; under -race on a loaded one they trickle in, each
//     raising a bound somebody waits for, and a floor held back waits
//     twice as long each time its pause runs out (floorPause).
//
// Before acknowledgements followed the change, every member acknowledged
// every map: at e518f46 a join at 200 members cost 212 writes, and each
// member received the whole map.
func TestCostFollowsTheChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 250 members")
	}
	samples := map[int]Sample{}
	floorBytes := map[int]map[string]int{}
	for _, n := range []int{50, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// Four slots per member, as in large rinks (ScaleSlots), so that
			// a change moves about as many slots at either size.
			s, floors := runWatched(t, n, 4*n)
			samples[n] = s
			floorBytes[n] = map[string]int{"join": floors["join_bytes"], "leave": floors["leave_bytes"]}
			for _, c := range []string{"join", "leave"} {
				writes, changed, floors := s["etcd_writes_per_"+c], s["members_changed_"+c], float64(floors[c])
				if limit := 2*changed + 3; writes-floors > limit {
					t.Errorf("the %s in a rink of %d: %v writes besides the floor's for %v members changed, want at most %v", c, n, writes-floors, changed, limit)
				}
				if floors > 2*changed+1 {
					t.Errorf("the %s in a rink of %d: %v floor writes for %v members changed", c, n, floors, changed)
				}
			}
			if s["overlaps"] != 0 {
				t.Errorf("overlaps %v", s["overlaps"])
			}
		})
	}
	// What each member receives from etcd, and allocates, per change does
	// not grow with the rink: a member reads a change record, not the
	// whole map (protocol 3).
	small, large := samples[50], samples[200]
	if small == nil || large == nil {
		return
	}
	for _, f := range []string{"etcd_sent_bytes_per_member_join", "etcd_sent_bytes_per_member_leave", "allocs_per_member_join", "allocs_per_member_leave"} {
		t.Logf("%s: %.0f at 50 members, %.0f at 200", f, small[f], large[f])
		a, b := small[f], large[f]
		if c, ok := strings.CutPrefix(f, "etcd_sent_bytes_per_member_"); ok {
			// Less the floors, whose count (bounded above) depends on how
			// the acknowledgements come in: apart under -race.
			a -= float64(floorBytes[50][c])
			b -= float64(floorBytes[200][c])
			t.Logf("  less the floors: %.0f at 50 members, %.0f at 200", a, b)
			// A change costs each member at most 2 KiB from etcd besides
			// the floor (the whole map cost 6 to 8 KiB at e518f46).
			if max(a, b) > 2048 {
				t.Errorf("%s less the floors: %.0f at 50 members, %.0f at 200, want at most 2048", f, a, b)
			}
		}
		if b > 1.5*a {
			t.Errorf("%s grows with the rink: %.0f at 50 members, %.0f at 200", f, a, b)
		}
	}
}

// floorOverhead is what a watch event of the floor key costs beside its
// key and value: the event's revisions, version and framing.
const floorOverhead = 48
