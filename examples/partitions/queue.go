package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

const (
	rinkName    = "partitions"
	tasksPrefix = "queue/tasks/" // queue/tasks/<partition>/<task id>
	fencePrefix = "queue/fence/" // queue/fence/<partition>: the newest owner's token
	donePrefix  = "queue/done/"  // queue/done/<task id>: who processed it
)

func taskKey(p, id int) string { return fmt.Sprintf("%s%05d/%09d", tasksPrefix, p, id) }
func fenceKey(p int) string    { return fmt.Sprintf("%s%05d", fencePrefix, p) }
func token20(t int64) string   { return fmt.Sprintf("%020d", t) } // byte order = numeric order

// errStale means a newer owner of the partition has fenced it.
var errStale = errors.New("partition fenced by a newer owner")

// claim fences partition p with this holding's token. It fails if a newer
// holder has already fenced it.
func claim(ctx context.Context, cli *clientv3.Client, p int, token int64) error {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fenceKey(p)), ">", token20(token))).
		Else(clientv3.OpPut(fenceKey(p), token20(token))).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		return errStale
	}
	return nil
}

// process deletes a task and records who processed it, in one transaction
// that holds only while the partition's fence still carries our token and
// the task still exists. It reports whether this call processed the task.
func process(ctx context.Context, cli *clientv3.Client, p int, key string, token int64, worker string) (bool, error) {
	id := key[strings.LastIndexByte(key, '/')+1:]
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fenceKey(p)), "=", token20(token)),
			clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpDelete(key), clientv3.OpPut(donePrefix+id, worker)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// worker is one rink member processing the partitions it holds.
type worker struct {
	name   string
	cli    *clientv3.Client
	r      *rink.Rink
	q      *queue
	wake   []chan struct{} // per partition: new tasks may be there
	loops  sync.WaitGroup
	cancel context.CancelFunc
}

func (w *worker) signal(p int) {
	select {
	case w.wake[p] <- struct{}{}:
	default:
	}
}

// watchTasks wakes the partition loops when tasks arrive.
func (w *worker) watchTasks(ctx context.Context) {
	for resp := range w.cli.Watch(ctx, tasksPrefix, clientv3.WithPrefix(), clientv3.WithFilterDelete()) {
		for _, ev := range resp.Events {
			rest := strings.TrimPrefix(string(ev.Kv.Key), tasksPrefix)
			if p, err := strconv.Atoi(rest[:strings.IndexByte(rest, '/')]); err == nil && p < len(w.wake) {
				w.signal(p)
			}
		}
	}
}

// partition is the loop for partition p: while this worker holds it, fence
// it and drain its tasks, then wait for more.
func (w *worker) partition(ctx context.Context, p int) {
	role := fmt.Sprint("partition:", p)
	for {
		roleCtx, err := w.r.AwaitRoleContext(ctx, role)
		if err != nil {
			return
		}
		token, _ := rink.Token(roleCtx)
		if err := claim(roleCtx, w.cli, p, token); err != nil {
			<-roleCtx.Done() // fenced by a newer owner: we are about to lose the role
			continue
		}
		w.drain(roleCtx, p, token)
	}
}

func (w *worker) drain(ctx context.Context, p int, token int64) {
	for ctx.Err() == nil {
		resp, err := w.cli.Get(ctx, fmt.Sprintf("%s%05d/", tasksPrefix, p), clientv3.WithPrefix(), clientv3.WithLimit(100), clientv3.WithKeysOnly())
		if err != nil {
			continue
		}
		for _, kv := range resp.Kvs {
			ok, err := process(ctx, w.cli, p, string(kv.Key), token, w.name)
			if err != nil || !ok {
				break // lost the partition, or etcd trouble: re-list or stop
			}
			w.q.processed(string(kv.Key), w.name)
		}
		if len(resp.Kvs) == 0 {
			select {
			case <-w.wake[p]:
			case <-ctx.Done():
			}
		}
	}
}

// queue runs producers and workers and counts what happens.
type queue struct {
	cfg      config
	out      io.Writer
	endpoint []string

	mu      sync.Mutex
	times   map[string]int // task key -> times processed
	workers []*worker
	stale   int
}

func (q *queue) processed(key, by string) {
	q.mu.Lock()
	q.times[key]++
	q.mu.Unlock()
}

func (q *queue) startWorker(ctx context.Context, name string) (*worker, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: q.endpoint, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	r, err := rink.New(cli, rinkName, rink.WithMemberName(name), rink.WithSessionTTL(q.cfg.ttl), rink.WithRebalanceDelay(time.Second))
	if err != nil {
		cli.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{name: name, cli: cli, r: r, q: q, cancel: cancel, wake: make([]chan struct{}, q.cfg.partitions)}
	for p := range w.wake {
		w.wake[p] = make(chan struct{}, 1)
	}
	w.loops.Add(1 + q.cfg.partitions)
	go func() {
		defer w.loops.Done()
		w.watchTasks(wctx)
	}()
	for p := 0; p < q.cfg.partitions; p++ {
		go func() {
			defer w.loops.Done()
			w.partition(wctx, p)
		}()
	}
	q.mu.Lock()
	q.workers = append(q.workers, w)
	q.mu.Unlock()
	fmt.Fprintf(q.out, "%s started\n", name)
	return w, nil
}

// stop shuts a worker down gracefully; crash drops its connection instead,
// leaving its lease to expire.
func (w *worker) stop() {
	w.r.Shutdown(context.Background())
	w.cancel()
	w.loops.Wait()
	w.cli.Close()
}

func (w *worker) crash() {
	w.cli.Close()
	<-w.r.Done()
	w.cancel()
	w.loops.Wait()
}

func run(ctx context.Context, out io.Writer, cfg config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	admin, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return err
	}
	defer closeAll()
	q := &queue{cfg: cfg, out: out, endpoint: admin.Endpoints(), times: map[string]int{}}
	if _, err := admin.Delete(ctx, "queue/", clientv3.WithPrefix()); err != nil {
		return err
	}

	var live []*worker
	defer func() {
		for _, w := range live {
			w.stop()
		}
	}()
	for i := 0; i < cfg.workers; i++ {
		w, err := q.startWorker(ctx, fmt.Sprintf("worker-%d", i))
		if err != nil {
			return err
		}
		live = append(live, w)
	}

	// Produce tasks over about two seconds.
	produced := make(chan error, 1)
	go func() {
		tick := time.NewTicker(2 * time.Second / time.Duration(cfg.tasks))
		defer tick.Stop()
		for id := 0; id < cfg.tasks; id++ {
			if _, err := admin.Put(ctx, taskKey(id%cfg.partitions, id), "payload"); err != nil {
				produced <- err
				return
			}
			if id%10 == 9 {
				select {
				case <-tick.C:
				case <-ctx.Done():
				}
			}
		}
		produced <- nil
	}()

	// A rolling replacement: a newcomer joins and waits, then worker-0
	// leaves and the newcomer takes over its partitions at once.
	if err := until(ctx, 30*time.Second, func() bool {
		for _, w := range live {
			if w.r.Rank().Index < 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("workers not ranked: %w", err)
	}
	old := live[0]
	nw, err := q.startWorker(ctx, fmt.Sprintf("worker-%d", cfg.workers))
	if err != nil {
		return err
	}
	live = append(live, nw)
	// Like a readiness probe: the old worker may go once the newcomer is
	// listed as waiting, so that it inherits the old worker's partitions.
	if err := until(ctx, 30*time.Second, func() bool { return nw.r.Rank().Waiting || nw.r.Rank().Index >= 0 }); err != nil {
		return fmt.Errorf("newcomer not listed: %w", err)
	}
	// Remember one partition the old worker holds, and its token.
	staleP, staleToken := -1, int64(0)
	for p := 0; p < cfg.partitions && staleP < 0; p++ {
		if c, ok := old.r.Get(fmt.Sprint("partition:", p)); ok {
			staleP = p
			staleToken, _ = rink.Token(c)
		}
	}
	fmt.Fprintf(out, "%s leaves (rolling replacement by %s)\n", old.name, nw.name)
	old.stop()
	live = live[1:]

	// A late attempt by the departed worker, with its old token, once
	// another worker holds that partition: refused by the fence.
	if staleP >= 0 {
		role := fmt.Sprint("partition:", staleP)
		if err := until(ctx, 30*time.Second, func() bool {
			for _, w := range live {
				if _, ok := w.r.Get(role); ok {
					return true
				}
			}
			return false
		}); err != nil {
			return fmt.Errorf("nobody took %s over: %w", role, err)
		}
		key := taskKey(staleP, cfg.tasks+1)
		if _, err := admin.Put(ctx, key, "probe"); err != nil {
			return err
		}
		ok, err := process(ctx, admin, staleP, key, staleToken, old.name)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s's late attempt on %s with token %d: processed=%v\n", old.name, role, staleToken, ok)
		if !ok {
			q.stale++
		}
	}

	// A crash: worker-1's connection drops; its partitions move when its
	// lease expires.
	crashed := live[0]
	fmt.Fprintf(out, "%s crashes\n", crashed.name)
	crashed.crash()
	live = live[1:]

	if err := <-produced; err != nil {
		return err
	}
	if err := until(ctx, time.Minute, func() bool {
		resp, err := admin.Get(ctx, tasksPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}); err != nil {
		return fmt.Errorf("queue not drained: %w", err)
	}
	return q.report(ctx, admin)
}

// report checks exactly-once processing where it is recorded: every
// produced task has one done record in etcd, written once. (Counting
// successes in memory is not enough: a crashed worker's last transaction may
// commit while its connection is dropping, before it hears so.) It also
// checks that no worker ever saw a second success for one task.
func (q *queue) report(ctx context.Context, admin *clientv3.Client) error {
	resp, err := admin.Get(ctx, donePrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	written := map[string]int64{}
	for _, kv := range resp.Kvs {
		written[strings.TrimPrefix(string(kv.Key), donePrefix)] = kv.Version
	}
	once, rewritten, missing := 0, 0, 0
	for id := 0; id < q.cfg.tasks; id++ {
		switch v := written[fmt.Sprintf("%09d", id)]; {
		case v == 0:
			missing++
		case v == 1:
			once++
		default:
			rewritten++
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	seenTwice := 0
	for _, n := range q.times {
		if n > 1 {
			seenTwice++
		}
	}
	fmt.Fprintf(q.out, "tasks: %d produced, %d processed exactly once, %d more than once, %d missing; %d stale attempts refused\n",
		q.cfg.tasks, once, rewritten+seenTwice, missing, q.stale)
	if once != q.cfg.tasks || rewritten+seenTwice != 0 {
		return fmt.Errorf("exactly-once violated: %d once, %d more than once, %d missing, of %d", once, rewritten+seenTwice, missing, q.cfg.tasks)
	}
	return nil
}

// until polls cond until it holds or d passes.
func until(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
