package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// cpuTime is the CPU time (user + system) this process has used so far:
// the members and the embedded etcd together.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mallocs is the count of heap objects the process has allocated.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// memInUse is the heap in use plus goroutine stacks, after a collection.
func memInUse() uint64 {
	heap, stacks := memSplit()
	return heap + stacks
}

// memSplit is the heap in use and the goroutine stacks, after a
// collection.
func memSplit() (heap, stacks uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// applyLog records, per member, the newest map version it applied and when.
type applyLog struct {
	mu   sync.Mutex
	last map[string]applied
	// at counts, per version, the members whose newest applied version it
	// is: converged answers "not yet" from it without a pass over every
	// member. (It polls every millisecond while a change spreads, inside
	// the window whose CPU Run measures: a pass over 10,000 names per poll
	// was the benchmark's own cost, 5 % of the window's CPU in a profile of
	// a 10,000-member join, and grew with the rink times the window.)
	at map[int64]int
}

type applied struct {
	version int64
	at      time.Time
}

func (l *applyLog) observe(e rink.Event) {
	if e.Kind == rink.EventFenced || e.Kind == rink.EventRejoined {
		// A member that loses its session in a scale run is a finding:
		// say when and why, as it happens.
		fmt.Fprintf(os.Stderr, "%s %s %s: %v\n", e.Time.Format("15:04:05.000"), e.Member, e.Kind, e.Cause)
		return
	}
	if e.Kind != rink.EventMapApplied {
		return
	}
	l.mu.Lock()
	if was := l.last[e.Member].version; e.Version > was {
		l.last[e.Member] = applied{e.Version, e.Time}
		if was != 0 {
			l.at[was]--
		}
		l.at[e.Version]++
	}
	l.mu.Unlock()
}

// converged reports the newest version every named member has applied, if
// they all have applied the same one, and the latest time one of them did.
func (l *applyLog) converged(names []string) (int64, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(names) > 0 && l.at[l.last[names[0]].version] < len(names) {
		return 0, time.Time{}, false
	}
	var v int64
	var at time.Time
	for i, n := range names {
		a := l.last[n]
		if i == 0 {
			v = a.version
		}
		if a.version != v || v == 0 {
			return 0, time.Time{}, false
		}
		if a.at.After(at) {
			at = a.at
		}
	}
	return v, at, true
}

// Breadth is a rink of many members in this process, sharing a few clients.
type Breadth struct {
	name    string
	cfg     BreadthConfig
	clients []*clientv3.Client
	members map[string]*rink.Rink
	order   []string
	log     *applyLog
	rec     *recorder
	next    int
	// The etcd revisions that began and ended Run's join and leave
	// windows (for the tests, which count the writes in them).
	joinRevs, leaveRevs [2]int64
	// Setup figures: how long building the rink took, and what it costs
	// once at rest (set by Run).
	heap0, stack0  uint64
	g0             int
	SetupTime      time.Duration
	BytesPerMember float64
	StackPerMember float64 // of BytesPerMember: goroutine stacks
	Goroutines     float64 // per member
	// Profile, if set, is a file to write a CPU profile of Run's join to
	// (and one of its leave, with ".leave" added).
	Profile string
	// Writes, if set, is where Run lists the writes of its join and its
	// leave: one line per revision, with the keys it put and deleted.
	Writes io.Writer
}

// BreadthConfig is the rink of a Breadth.
type BreadthConfig struct {
	Slots int           // rink.WithSlots
	TTL   time.Duration // rink.WithSessionTTL
	// LoadInterval is the members' rink.WithLoadInterval; 0 leaves the
	// default (rink.DefaultLoadInterval). A member whose slots a change
	// moved writes its load summary at its next load interval, so Run
	// counts a change's writes until one has passed.
	LoadInterval time.Duration
	// Joins is how many joins Run measures (0: 1); see Run.
	Joins int
}

// median is the middle of vs (the mean of the two middle ones, for an
// even count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s) == 0 {
		return 0
	}
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

func (b *Breadth) options(name string) []rink.Option {
	opts := []rink.Option{
		rink.WithMemberName(name), rink.WithRebalanceDelay(0), rink.WithJoinTimeout(time.Minute),
		rink.WithSlots(b.cfg.Slots), rink.WithSessionTTL(b.cfg.TTL),
		rink.WithEvents(func(e rink.Event) { b.log.observe(e); b.rec.observe(e) }),
	}
	if b.cfg.LoadInterval != 0 {
		opts = append(opts, rink.WithLoadInterval(b.cfg.LoadInterval))
	}
	return opts
}

func (b *Breadth) join() (string, error) {
	name := fmt.Sprintf("m%04d", b.next)
	cli := b.clients[b.next%len(b.clients)]
	b.next++
	r, err := rink.New(cli, b.name, b.options(name)...)
	if err != nil {
		return "", err
	}
	b.members[name] = r
	b.order = append(b.order, name)
	return name, nil
}

// NewBreadth starts n members of a rink on the given number of clients
// (joining up to 32 at a time) and waits until every one has applied the
// same map, in which all of them are ranked.
func NewBreadth(env Env, n, clients int, cfg BreadthConfig) (*Breadth, error) {
	if cfg.LoadInterval == 0 {
		cfg.LoadInterval = rink.DefaultLoadInterval
	}
	b := &Breadth{name: nextRink("scale"), cfg: cfg, members: map[string]*rink.Rink{}, log: &applyLog{last: map[string]applied{}, at: map[int64]int{}}, rec: &recorder{noOthers: true}}
	for range clients {
		cli, err := clientv3.New(clientv3.Config{Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Close()
			return nil, err
		}
		b.clients = append(b.clients, cli)
	}
	heap0, stack0 := memSplit()
	g0 := runtime.NumGoroutine()
	began := time.Now()
	if _, err := b.join(); err != nil { // the first leads
		b.Close()
		return nil, err
	}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		name := fmt.Sprintf("m%04d", i)
		cli := b.clients[i%len(b.clients)]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			began := time.Now()
			r, err := rink.New(cli, b.name, b.options(name)...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s %s: joining failed after %v: %v\n", time.Now().Format("15:04:05.000"), name, time.Since(began), err)
				firstErr = cmpErr(firstErr, err)
				return
			}
			b.members[name] = r
		}()
	}
	wg.Wait()
	joined := time.Since(began)
	b.next, b.order = n, nil
	for i := 0; i < n; i++ {
		if name := fmt.Sprintf("m%04d", i); b.members[name] != nil {
			b.order = append(b.order, name)
		}
	}
	if firstErr != nil {
		b.Close()
		return nil, firstErr
	}
	// A minute per thousand members, and at least two.
	if _, err := b.settle(max(2*time.Minute, time.Duration(n)*60*time.Millisecond)); err != nil {
		b.Close()
		return nil, err
	}
	b.SetupTime = time.Since(began)
	fmt.Fprintf(os.Stderr, "%s setup of %d members: every New returned after %.1f s, every member applied one map ranking all after %.1f s\n",
		time.Now().Format("15:04:05.000"), n, joined.Seconds(), b.SetupTime.Seconds())
	b.heap0, b.stack0, b.g0 = heap0, stack0, g0
	return b, nil
}

// measureMemory sets the memory figures: what the members cost, in heap
// and stacks, above what the process held before they joined (a rink at
// rest: see Run).
func (b *Breadth) measureMemory() {
	n := float64(len(b.order))
	heap1, stack1 := memSplit()
	b.BytesPerMember = (float64(heap1) - float64(b.heap0) + float64(stack1) - float64(b.stack0)) / n
	b.StackPerMember = (float64(stack1) - float64(b.stack0)) / n
	b.Goroutines = float64(runtime.NumGoroutine()-b.g0) / n
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// settle waits until every member has applied one map that ranks all of
// them, and returns when the last of them applied it.
func (b *Breadth) settle(d time.Duration) (time.Time, error) {
	var at time.Time
	err := until(d, "every member applied a map ranking all", func() bool {
		v, t, ok := b.log.converged(b.order)
		if !ok {
			return false
		}
		for _, name := range b.order {
			rk := b.members[name].Rank()
			if rk.Version != v || rk.Index < 0 || rk.Size != len(b.order) {
				return false
			}
		}
		at = t
		return true
	})
	if err != nil {
		versions := map[int64]int{}
		b.log.mu.Lock()
		for _, name := range b.order {
			versions[b.log.last[name].version]++
		}
		b.log.mu.Unlock()
		ranks := map[string]int{}
		for _, name := range b.order {
			rk := b.members[name].Rank()
			ranks[fmt.Sprintf("v%d size %d ranked %v", rk.Version, rk.Size, rk.Index >= 0)]++
		}
		err = fmt.Errorf("%w (%d members; applied versions %v; ranks %v)", err, len(b.order), versions, ranks)
	}
	return at, err
}

// Run measures one join and one leave: the time until every member has
// applied the map that follows, the CPU the process spent meanwhile, and
// the time until the slots that moved are held again; and what each cost
// etcd, from the change until the rink is at rest again and a load
// interval has passed (see restAfter): the bytes it sent to clients (less
// the answers to lease renewals), the writes it committed and its raft
// proposals; and the members whose slots the change moved.
func (b *Breadth) Run() (Sample, error) {
	n := float64(len(b.order))
	// What building the rink wrote (the last acknowledgements, floors and
	// load summaries) is not the join's. And a member's memory is
	// measured at rest: while members still join, each keeps the history
	// of the maps since the lowest acknowledgement (up to maxHistChanges
	// slot changes), which the floor prunes once they have all caught up.
	if err := until(time.Minute, "every slot held", b.allHeld); err != nil {
		return nil, fmt.Errorf("before the join: %w (%s)", err, b.unheld())
	}
	if err := b.restAfter(time.Now()); err != nil {
		return nil, fmt.Errorf("before the join: %w", err)
	}
	b.measureMemory()
	if err := writeHeapProfile(b.Profile); err != nil {
		return nil, err
	}
	s := Sample{
		"members":               n,
		"clients":               float64(len(b.clients)),
		"slots":                 float64(b.cfg.Slots),
		"ttl_s":                 b.cfg.TTL.Seconds(),
		"setup_s":               b.SetupTime.Seconds(),
		"kib_per_member":        b.BytesPerMember / 1024,
		"stack_kib_per_member":  b.StackPerMember / 1024,
		"goroutines_per_member": b.Goroutines,
	}
	kaSize, err := b.keepAliveSize()
	if err != nil {
		return nil, err
	}
	// The CPU the rink spends at rest (lease renewals, timers), for a
	// second: it runs through the join's and the leave's windows too, so
	// that their CPU figures include it times their length.
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(time.Second)
	s["rest_cpu_ms_per_s"] = ms(cpuTime()-cpu0) / time.Since(t0).Seconds()

	// measure reads etcd's counters and the map before a change, and
	// returns a function that, once the change is done and the rink at
	// rest, records the change's cost under the given suffix.
	measure := func(suffix string, revs *[2]int64) (done func(heldAt time.Time) error, err error) {
		before, err := b.readMap()
		if err != nil {
			return nil, err
		}
		c0, err := readEtcd()
		if err != nil {
			return nil, err
		}
		m0 := mallocs()
		return func(heldAt time.Time) error {
			if err := b.restAfter(heldAt); err != nil {
				return err
			}
			c1, err := readEtcd()
			if err != nil {
				return err
			}
			s["allocs_per_member_"+suffix] = float64(mallocs()-m0) / n
			after, err := b.readMap()
			if err != nil {
				return err
			}
			cost := costBetween(c0, c1, kaSize)
			s["etcd_sent_bytes_per_member_"+suffix] = cost.sentBytes / n
			s["etcd_writes_per_"+suffix] = cost.writes
			s["etcd_proposals_per_"+suffix] = cost.proposals
			s["members_changed_"+suffix] = float64(membersChanged(before, after))
			*revs = [2]int64{int64(c0.revision), int64(c1.revision)}
			return nil
		}, nil
	}

	// The writes' arrival times, for listing them (see Writes).
	var seen *writeTimes
	if b.Writes != nil {
		seen = watchWrites(b.clients[0], "rink/"+b.name+"/")
		defer seen.stop()
	}

	// Joins, one at a time, each once the rink is at rest again: the first
	// is the one whose cost in etcd is counted (and profiled); the time
	// and CPU figures are the medians over all of them. (One join's CPU
	// varies by ±20 % or more between runs on the 2-core machine, so that
	// the growth from 1,000 to 10,000 members, a ratio of two single
	// joins, came out anywhere from 0.92 to 1.25 on the same code.)
	joins := max(1, b.cfg.Joins)
	var converge, cpu, aboveRest []float64
	for i := range joins {
		var joined func(time.Time) error
		profile := ""
		if i == 0 {
			if joined, err = measure("join", &b.joinRevs); err != nil {
				return nil, err
			}
			profile = b.Profile
		}
		// A collection first, as before the leave: see there.
		runtime.GC()
		stop, err := startProfile(profile)
		if err != nil {
			return nil, err
		}
		cpu0, t0 := cpuTime(), time.Now()
		name, err := b.join()
		if err != nil {
			stop()
			return nil, err
		}
		at, err := b.settle(time.Minute)
		stop()
		if err != nil {
			return nil, err
		}
		used, window := ms(cpuTime()-cpu0), time.Since(t0).Seconds()
		converge = append(converge, at.Sub(t0).Seconds())
		cpu = append(cpu, used)
		aboveRest = append(aboveRest, used-s["rest_cpu_ms_per_s"]*window)
		if err := until(time.Minute, "the newcomer holds its slots", b.allHeld); err != nil {
			return nil, err
		}
		if i == 0 {
			s["join_held_s"] = b.lastAcquired(name, t0).Sub(t0).Seconds()
			err = joined(time.Now())
		} else {
			err = b.restAfter(time.Now())
		}
		if err != nil {
			return nil, fmt.Errorf("after join %d: %w", i+1, err)
		}
	}
	s["joins"] = float64(joins)
	s["join_converge_s"] = median(converge)
	s["join_cpu_ms"] = median(cpu)
	s["join_cpu_min_ms"], s["join_cpu_max_ms"] = slices.Min(cpu), slices.Max(cpu)
	s["join_cpu_above_rest_ms"] = median(aboveRest)

	// One leave: a member from the middle, neither the leader nor the newest.
	// A collection first, as before the join (measureMemory): the members
	// share one heap here (4.8 GB at 10,000), whose next collection, due
	// whenever the join's and the rest's garbage fill it, would otherwise
	// fall into one window or the other, and cost it seconds of CPU that a
	// member's own process, with its own small heap, spreads over all its
	// work.
	runtime.GC()
	left, err := measure("leave", &b.leaveRevs)
	if err != nil {
		return nil, err
	}
	leaver := b.order[len(b.order)/2]
	leaveProfile := ""
	if b.Profile != "" {
		leaveProfile = b.Profile + ".leave"
	}
	stop, err := startProfile(leaveProfile)
	if err != nil {
		return nil, err
	}
	cpu0, t0 = cpuTime(), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = b.members[leaver].Shutdown(ctx)
	cancel()
	if err != nil {
		stop()
		return nil, err
	}
	delete(b.members, leaver)
	for i, n := range b.order {
		if n == leaver {
			b.order = append(b.order[:i], b.order[i+1:]...)
			break
		}
	}
	at, err := b.settle(time.Minute)
	stop()
	if err != nil {
		return nil, err
	}
	s["leave_converge_s"] = at.Sub(t0).Seconds()
	s["leave_cpu_ms"] = ms(cpuTime() - cpu0)
	if err := until(time.Minute, "the leaver's slots held again", b.allHeld); err != nil {
		return nil, err
	}
	s["leave_held_s"] = b.lastAcquired("", t0).Sub(t0).Seconds()
	if err := left(time.Now()); err != nil {
		return nil, fmt.Errorf("after the leave: %w", err)
	}
	s["overlaps"] = float64(overlaps(b.rec.snapshot()))
	if b.Writes != nil {
		for _, c := range []struct {
			change string
			revs   [2]int64
		}{{"join", b.joinRevs}, {"leave", b.leaveRevs}} {
			lines, err := b.writesIn(c.revs, seen)
			if err != nil {
				return nil, fmt.Errorf("listing the %s's writes: %w", c.change, err)
			}
			fmt.Fprintf(b.Writes, "the %s's writes in a rink of %d (revisions %d to %d):\n%s", c.change, len(b.order), c.revs[0]+1, c.revs[1], strings.Join(lines, ""))
		}
	}
	return s, nil
}

// writeTimes records when a watch of the rink's keys, opened before a
// change, saw each revision.
type writeTimes struct {
	mu     sync.Mutex
	at     map[int64]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

func watchWrites(cli *clientv3.Client, prefix string) *writeTimes {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writeTimes{at: map[int64]time.Time{}, cancel: cancel, done: make(chan struct{})}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix())
	go func() {
		defer close(w.done)
		for resp := range wch {
			now := time.Now()
			w.mu.Lock()
			for _, ev := range resp.Events {
				if _, ok := w.at[ev.Kv.ModRevision]; !ok {
					w.at[ev.Kv.ModRevision] = now
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writeTimes) stop() { w.cancel(); <-w.done }

// when returns when revision rev was seen (ok false: not seen).
func (w *writeTimes) when(rev int64) (time.Time, bool) {
	if w == nil {
		return time.Time{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.at[rev]
	return t, ok
}

// writesIn lists the writes of revisions revs[0]+1 to revs[1], one line
// each, from a watch of the rink's keys from the first of them, with the
// time seen since the first's when seen says.
func (b *Breadth) writesIn(revs [2]int64, seen *writeTimes) ([]string, error) {
	if revs[1] <= revs[0] {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := "rink/" + b.name + "/"
	var lines []string
	var ops []string
	last := int64(0)
	first, firstOK := seen.when(revs[0] + 1)
	flush := func() {
		if len(ops) > 0 {
			at := ""
			if t, ok := seen.when(last); ok && firstOK {
				at = fmt.Sprintf(" +%.1f ms", float64(t.Sub(first))/float64(time.Millisecond))
			}
			lines = append(lines, fmt.Sprintf("  %d%s: %s\n", last, at, strings.Join(ops, ", ")))
		}
		ops = nil
	}
	for resp := range b.clients[0].Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(revs[0]+1)) {
		if err := resp.Err(); err != nil {
			return nil, err
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > revs[1] {
				flush()
				return lines, nil
			}
			if ev.Kv.ModRevision != last {
				flush()
				last = ev.Kv.ModRevision
			}
			op := "put "
			if ev.Type == clientv3.EventTypeDelete {
				op = "del "
			}
			k := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			if k == "floor" && ev.Type == clientv3.EventTypePut {
				k += " " + string(ev.Kv.Value) // (what each floor said)
			}
			ops = append(ops, op+k)
		}
		if resp.Header.Revision >= revs[1] && last >= revs[1] {
			flush()
			return lines, nil
		}
	}
	flush()
	if ctx.Err() != nil {
		return lines, fmt.Errorf("the watch saw up to revision %d of %d in 10 s", last, revs[1])
	}
	return lines, nil
}

// restQuiet is how long etcd's revision must stay put, once every member
// says the rink is at rest, for rest to believe that the change has made
// all its writes.
const restQuiet = 250 * time.Millisecond

// restAfter waits until a load interval (and restQuiet) has passed since
// heldAt, when every slot was held by the member the map gives it to, and
// then for rest: every member whose slots changed has written its load
// summary, at its first load interval since.
func (b *Breadth) restAfter(heldAt time.Time) error {
	time.Sleep(time.Until(heldAt.Add(b.cfg.LoadInterval + restQuiet)))
	return b.rest(time.Minute)
}

// rest waits until every member says that the rink is at rest with the
// map they have all applied (Rank.Settled: every live member has
// acknowledged it and the leader plans no move after it), and then until
// etcd's revision has not moved for restQuiet: a change's cost is counted
// until then, acknowledgements and the floor included.
func (b *Breadth) rest(d time.Duration) error {
	deadline := time.Now().Add(d)
	var rev float64
	var since time.Time
	for {
		if time.Now().After(deadline) {
			settled := 0
			for _, name := range b.order {
				if b.members[name].Rank().Settled {
					settled++
				}
			}
			return fmt.Errorf("not within %v: every member settled and etcd quiet for %v (%d of %d members settled)", d, restQuiet, settled, len(b.order))
		}
		time.Sleep(10 * time.Millisecond)
		if !b.settledAll() {
			since = time.Time{}
			continue
		}
		c, err := readEtcd()
		if err != nil {
			return err
		}
		if since.IsZero() || c.revision != rev {
			rev, since = c.revision, time.Now()
			continue
		}
		if time.Since(since) >= restQuiet {
			return nil
		}
	}
}

// settledAll reports whether every member has applied the same map and
// says the rink is at rest with it.
func (b *Breadth) settledAll() bool {
	v, _, ok := b.log.converged(b.order)
	if !ok {
		return false
	}
	for _, name := range b.order {
		if rk := b.members[name].Rank(); !rk.Settled || rk.Version != v {
			return false
		}
	}
	return true
}

// slotMap is what Run reads of the rink's map (rink/<name>/map, JSON): the
// ranked members and, per slot, the index of its owner among them.
type slotMap struct {
	Version int64    `json:"version"`
	Members []string `json:"members"`
	Table   []int    `json:"table"`
}

func (m slotMap) owner(slot int) string {
	if slot < len(m.Table) && m.Table[slot] >= 0 && m.Table[slot] < len(m.Members) {
		return m.Members[m.Table[slot]]
	}
	return ""
}

// readMap reads the rink's map from etcd.
func (b *Breadth) readMap() (slotMap, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// From protocol 3 the map key holds a change record and the whole map
	// is beside it, at .map.
	key, whole := "rink/"+b.name+"/map", "rink/"+b.name+"/.map"
	resp, err := b.clients[0].Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(whole)).Commit()
	if err != nil {
		return slotMap{}, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return slotMap{}, fmt.Errorf("no map at %s", key)
	}
	value := kvs[0].Value
	if w := resp.Responses[1].GetResponseRange().Kvs; len(w) > 0 && w[0].ModRevision == kvs[0].ModRevision {
		value = w[0].Value
	}
	var m slotMap
	if err := json.Unmarshal(value, &m); err != nil {
		return slotMap{}, fmt.Errorf("the map at %s: %w", key, err)
	}
	return m, nil
}

// unheld says, for a rink whose slots are not all held, which are not,
// what their owners' ranks say, and the floor: what a maintainer needs
// to tell a stuck barrier from a slow one.
func (b *Breadth) unheld() string {
	m, err := b.readMap()
	if err != nil {
		return err.Error()
	}
	held := heldBy(b.rec.snapshot())
	var out []string
	for s := 0; s < b.cfg.Slots && len(out) < 5; s++ {
		if _, ok := held[s]; ok {
			continue
		}
		o := m.owner(s)
		desc := fmt.Sprintf("slot %d owner %q", s, o)
		if r := b.members[o]; r != nil {
			rk := r.Rank()
			desc += fmt.Sprintf(" (rank %d of %d, version %d, settled %v, leader %q)", rk.Index, rk.Size, rk.Version, rk.Settled, rk.Leader)
		}
		out = append(out, desc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := b.clients[0].Get(ctx, "rink/"+b.name+"/floor"); err == nil && len(resp.Kvs) > 0 {
		f := string(resp.Kvs[0].Value)
		if len(f) > 600 {
			f = f[:600] + "..."
		}
		out = append(out, "floor "+f)
	}
	return fmt.Sprintf("%d of %d slots held; map version %d; %s", len(held), b.cfg.Slots, m.Version, strings.Join(out, "; "))
}

// membersChanged counts the members whose slots differ between two maps:
// every member that gained or lost a slot, a newcomer or a leaver
// included.
func membersChanged(before, after slotMap) int {
	changed := map[string]bool{}
	for slot := range max(len(before.Table), len(after.Table)) {
		if was, is := before.owner(slot), after.owner(slot); was != is {
			changed[was], changed[is] = true, true
		}
	}
	delete(changed, "")
	return len(changed)
}

// keepAliveSize is the size of etcd's answer to a renewal of one of the
// members' leases (see keepAliveSize): lease IDs from one etcd member all
// have the same length, and the revision's length does not change over a
// run but at 16,384 and 2,097,152.
func (b *Breadth) keepAliveSize() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.clients[0].Leases(ctx)
	if err != nil {
		return 0, err
	}
	if len(resp.Leases) == 0 {
		return 0, fmt.Errorf("no leases")
	}
	h := resp.ResponseHeader
	return keepAliveSize(h.ClusterId, h.MemberId, h.Revision, h.RaftTerm, int64(resp.Leases[0].ID), int64(b.cfg.TTL/time.Second)), nil
}

// writeHeapProfile writes a heap profile and a goroutine profile of the
// rink as built, to the CPU profile's file name with ".heap" and
// ".goroutines" added, if that is not empty.
func writeHeapProfile(cpuFile string) error {
	if cpuFile == "" {
		return nil
	}
	runtime.GC()
	for _, p := range []struct {
		name, ext string
		debug     int
	}{{"heap", ".heap", 0}, {"goroutine", ".goroutines", 1}} {
		f, err := os.Create(cpuFile + p.ext)
		if err != nil {
			return err
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// HeapProfileOnSignal writes a heap profile to file (numbered: file.1,
// file.2, …) each time the process receives SIGUSR1, until stop is
// called, and then a CPU profile of the next 20 seconds (file.1.cpu, …;
// none while another CPU profile runs): a look inside a scale run that is
// still building its rink.
func HeapProfileOnSignal(file string) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			select {
			case <-ch:
			case <-done:
				return
			}
			f, err := os.Create(fmt.Sprintf("%s.%d", file, n))
			if err != nil {
				continue
			}
			runtime.GC()
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
			if stopCPU, err := startProfile(fmt.Sprintf("%s.%d.cpu", file, n)); err == nil {
				select {
				case <-time.After(20 * time.Second):
				case <-done:
				}
				stopCPU()
			}
		}
	}()
	return func() { signal.Stop(ch); close(done); wg.Wait() }
}

// startProfile starts a CPU profile into file, if it is not empty; stop
// ends it.
func startProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// allHeld reports whether every slot is held by the member the current map
// gives it to.
func (b *Breadth) allHeld() bool {
	held := heldBy(b.rec.snapshot())
	if len(held) != b.cfg.Slots {
		return false
	}
	for _, who := range held {
		if b.members[who] == nil {
			return false
		}
	}
	return true
}

// heldBy replays acquisitions and releases into the holder of each slot.
func heldBy(events []rink.Event) map[int]string {
	held := map[int]string{}
	for _, e := range events {
		switch e.Kind {
		case rink.EventAcquired:
			held[e.Slot] = e.Member
		case rink.EventReleased:
			if held[e.Slot] == e.Member {
				delete(held, e.Slot)
			}
		case rink.EventFenced:
			for s, who := range held {
				if who == e.Member {
					delete(held, s)
				}
			}
		}
	}
	return held
}

// lastAcquired is the time of the last acquisition after since (by member,
// if not empty).
func (b *Breadth) lastAcquired(member string, since time.Time) time.Time {
	last := since
	for _, e := range b.rec.snapshot() {
		if e.Kind == rink.EventAcquired && e.Time.After(last) && (member == "" || e.Member == member) {
			last = e.Time
		}
	}
	return last
}

// Close shuts every member down and closes the clients.
func (b *Breadth) Close() {
	if len(b.members) > closeGracefully {
		// A graceful departure of every member, one after another, costs
		// the rink a map change each: O(members²) work, minutes at 10,000
		// members, measured by nothing. Cut them off instead: each stops
		// when it sees its client closed (ErrClientClosed).
		for _, cli := range b.clients {
			cli.Close()
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, r := range b.members {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = r.Shutdown(ctx)
			cancel()
		}()
	}
	wg.Wait()
	for _, cli := range b.clients {
		cli.Close()
	}
}

// closeGracefully is the largest rink Close shuts down member by member.
const closeGracefully = 1000

// Depth runs two members awaiting the same nroles roles, every role in a
// goroutine of its own as an application would: the first holds them all,
// the second waits (a rebalance delay longer than the run). The holder
// shuts down; it reports the time until the other holds every role, and the
// memory each awaited role costs.
func Depth(env Env, nroles int) (Sample, error) {
	rec := &recorder{}
	name := nextRink("depth")
	opts := []rink.Option{rink.WithRebalanceDelay(time.Hour)}
	a, err := join(env.Endpoints, name, "a", rec, opts...)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	if err := until(10*time.Second, "a ranked", func() bool { return a.r.Rank().Index == 0 }); err != nil {
		return nil, err
	}
	b, err := join(env.Endpoints, name, "b", rec, opts...)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	if err := until(10*time.Second, "b waiting", func() bool { return b.r.Rank().Waiting }); err != nil {
		return nil, err
	}
	rs := roles(nroles)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The holder's loops: hold each role until the context ends.
	var aHeld atomic.Int64
	for _, role := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := a.r.AwaitRoleContext(ctx, role)
			if err != nil {
				return
			}
			aHeld.Add(1)
			select {
			case <-rc.Done():
			case <-ctx.Done():
			}
		}()
	}
	if err := until(30*time.Second, "a holds every role", func() bool { return aHeld.Load() == int64(nroles) }); err != nil {
		return nil, err
	}

	// The waiter's loops, measured for memory.
	mem0 := memInUse()
	var bStarted, bHeld atomic.Int64
	var lastHeld atomic.Int64 // unix nanoseconds
	for _, role := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bStarted.Add(1)
			rc, err := b.r.AwaitRoleContext(ctx, role)
			if err != nil {
				return
			}
			now := time.Now().UnixNano()
			for {
				if old := lastHeld.Load(); old >= now || lastHeld.CompareAndSwap(old, now) {
					break
				}
			}
			bHeld.Add(1)
			select {
			case <-rc.Done():
			case <-ctx.Done():
			}
		}()
	}
	if err := until(30*time.Second, "b's loops started", func() bool { return bStarted.Load() == int64(nroles) }); err != nil {
		return nil, err
	}
	perRole := float64(memInUse()-mem0) / float64(nroles)

	t0 := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = a.r.Shutdown(sctx)
	scancel()
	if err != nil {
		return nil, err
	}
	a.r = nil
	if err := until(30*time.Second, "b holds every role", func() bool { return bHeld.Load() == int64(nroles) }); err != nil {
		return nil, err
	}
	took := time.Unix(0, lastHeld.Load()).Sub(t0)
	return Sample{
		"roles":             float64(nroles),
		"takeover_s":        took.Seconds(),
		"bytes_per_awaited": perRole,
		"overlaps":          float64(overlaps(rec.snapshot())),
	}, nil
}

// ScaleConfig is one size of the scale scenario.
type ScaleConfig struct {
	Members int           // of the breadth part
	Slots   int           // of the breadth part's rink; 0: ScaleSlots(Members)
	TTL     time.Duration // of the breadth part's members; 0: ScaleTTL(Members)
	Roles   int           // awaited by each member of the depth part
	// LoadInterval is the breadth part's members' (0: the default); see
	// BreadthConfig.
	LoadInterval time.Duration
	// Joins is how many joins the breadth part measures (0: 1); see
	// Breadth.Run.
	Joins int
	// Profile, if set, is a file to write a CPU profile of the first join to.
	Profile string
	// Writes, if set, is where the breadth part lists the writes of its
	// join and leave (see Breadth.Writes).
	Writes io.Writer
}

// ScaleRenewalsPerSecond is the most lease renewals per second that
// ScaleTTL lets the breadth part's members make: a member renews every
// third of its TTL, and a renewal (clientv3's KeepAliveOnce, a stream of
// its own) costs, client and etcd together in one process on the 2-core
// machine the benchmarks run on, 0.4 to 1 ms of CPU (the rink at rest,
// figure rest_cpu_ms_per_s: 0.13 to 0.29 s a second at 1,000 members
// renewing 300 times a second, 0.40 to 0.66 s at 10,000 renewing 1,000
// times). So 1,000 a second take a quarter of the machine, which a
// member's own host would not pay.
const ScaleRenewalsPerSecond = 1000

// ScaleTTL is the session TTL the scale scenario gives n members: the
// default (10 s), or longer where n members would renew more than
// ScaleRenewalsPerSecond times a second (30 s for 10,000).
func ScaleTTL(n int) time.Duration {
	secs := (3*n + ScaleRenewalsPerSecond - 1) / ScaleRenewalsPerSecond
	return max(rink.DefaultSessionTTL, time.Duration(secs)*time.Second)
}

// ScaleSlots is the slot count the scale scenario gives a rink of n
// members: the least power of two that gives every member a slot, and the
// default (1,024) at least. A join then moves about one slot per member
// it concerns.
func ScaleSlots(n int) int {
	slots := rink.DefaultSlots
	for slots < n && slots < rink.MaxSlots {
		slots *= 2
	}
	return slots
}

// MembersPerClient is how many of the breadth part's members share one
// etcd client. A client carries its watches on one gRPC stream, and etcd
// queues at most 128 events per stream (mvcc's chanBufLen) before it sets
// the stream's watchers aside and retries them every 10 ms ("victims"): a
// write that every member watches then reaches the 129th member of a
// client late and at a cost that grows with the members per client, which
// no deployment pays (each member has a client of its own). So the
// members per client stay below that bound and the same at every size.
const MembersPerClient = 100

// ScaleClients is the clients the breadth part of n members runs on: one
// per MembersPerClient members, and at least 4.
func ScaleClients(n int) int {
	return max(4, (n+MembersPerClient-1)/MembersPerClient)
}

// Scale runs the breadth part (members in one process on ScaleClients clients: one
// join and one leave) and then the depth part (2 members awaiting roles)
// and reports the figures of both.
func Scale(env Env, cfg ScaleConfig) (Sample, error) {
	if cfg.Slots == 0 {
		cfg.Slots = ScaleSlots(cfg.Members)
	}
	if cfg.TTL == 0 {
		cfg.TTL = ScaleTTL(cfg.Members)
	}
	b, err := NewBreadth(env, cfg.Members, ScaleClients(cfg.Members), BreadthConfig{Slots: cfg.Slots, TTL: cfg.TTL, LoadInterval: cfg.LoadInterval, Joins: cfg.Joins})
	if err != nil {
		return nil, err
	}
	b.Profile, b.Writes = cfg.Profile, cfg.Writes
	s, err := b.Run()
	b.Close()
	if err != nil {
		return nil, err
	}
	d, err := Depth(env, cfg.Roles)
	if err != nil {
		return nil, err
	}
	s["overlaps"] += d["overlaps"]
	delete(d, "overlaps")
	for k, v := range d {
		s["depth_"+k] = v
	}
	return s, nil
}
