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
	"github.com/rink-go/rink/examples/partitions/worker"
	"github.com/rink-go/rink/internal/embedetcd"
)

const rinkName = "partitions"

// node is one worker process of the story: a worker.Worker, the code to
// copy, and its etcd client.
type node struct {
	name string
	cli  *clientv3.Client
	w    *worker.Worker
}

// queue runs producers and workers and counts what happens.
type queue struct {
	cfg      config
	out      io.Writer
	endpoint []string

	mu    sync.Mutex
	times map[string]int // task key -> times processed
	stale int
}

func (q *queue) processed(key string) {
	q.mu.Lock()
	q.times[key]++
	q.mu.Unlock()
}

func (q *queue) startWorker(name string) (*node, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: q.endpoint, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	// The TTL is short and the rebalance delay 1 s so that the story runs
	// in seconds; see README.md for settings fit for production.
	w, err := worker.Start(cli, worker.Config{Rink: rinkName, Partitions: q.cfg.partitions, Processed: q.processed},
		rink.WithMemberName(name), rink.WithSessionTTL(q.cfg.ttl), rink.WithRebalanceDelay(time.Second))
	if err != nil {
		cli.Close()
		return nil, err
	}
	fmt.Fprintf(q.out, "%s started\n", name)
	return &node{name: name, cli: cli, w: w}, nil
}

// stop shuts a worker down gracefully; crash drops its connection instead,
// leaving its lease to expire.
func (n *node) stop() {
	_ = n.w.Stop(context.Background())
	n.cli.Close()
}

func (n *node) crash() {
	n.cli.Close()
	n.w.Wait()
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
	if _, err := admin.Delete(ctx, "queue/", clientv3.WithPrefix()); err != nil { // the queue's keys, from an earlier run
		return err
	}

	var live []*node
	defer func() {
		for _, w := range live {
			w.stop()
		}
	}()
	for i := 0; i < cfg.workers; i++ {
		w, err := q.startWorker(fmt.Sprintf("worker-%d", i))
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
			if _, err := admin.Put(ctx, worker.TaskKey(id%cfg.partitions, id), "payload"); err != nil {
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
			if w.w.Rink().Rank().Index < 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("workers not ranked: %w", err)
	}
	old := live[0]
	nw, err := q.startWorker(fmt.Sprintf("worker-%d", cfg.workers))
	if err != nil {
		return err
	}
	live = append(live, nw)
	// Like a readiness probe: the old worker may go once the newcomer is
	// listed as waiting, so that it inherits the old worker's partitions.
	if err := until(ctx, 30*time.Second, func() bool { return nw.w.Rink().Ready() }); err != nil {
		return fmt.Errorf("newcomer not listed: %w", err)
	}
	// Remember one partition the old worker holds, and its token.
	staleP, staleToken := -1, int64(0)
	for p := 0; p < cfg.partitions && staleP < 0; p++ {
		if c, ok := old.w.Rink().Get(worker.Role(p)); ok {
			staleP = p
			staleToken, _ = rink.Token(c)
		}
	}
	fmt.Fprintf(out, "%s leaves (rolling replacement by %s)\n", old.name, nw.name)
	old.stop()
	live = live[1:]

	// A late attempt by the departed worker, with its old token, once
	// another worker holds that partition and has fenced it with its own
	// token (it claims the partition right after it starts it): refused by
	// the fence.
	if staleP >= 0 {
		role := worker.Role(staleP)
		if err := until(ctx, 30*time.Second, func() bool {
			held := false
			for _, w := range live {
				if _, ok := w.w.Rink().Get(role); ok {
					held = true
				}
			}
			resp, err := admin.Get(ctx, worker.FenceKey(staleP))
			if !held || err != nil || len(resp.Kvs) == 0 {
				return false
			}
			fence, _ := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			return fence > staleToken
		}); err != nil {
			return fmt.Errorf("nobody took %s over: %w", role, err)
		}
		key := worker.TaskKey(staleP, cfg.tasks+1)
		if _, err := admin.Put(ctx, key, "probe"); err != nil {
			return err
		}
		ok, err := worker.Process(ctx, admin, staleP, key, staleToken, old.name)
		if err != nil && !errors.Is(err, worker.ErrStale) {
			return err
		}
		fmt.Fprintf(out, "%s's late attempt on %s with token %d: processed=%v (%v)\n", old.name, role, staleToken, ok, err)
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
		resp, err := admin.Get(ctx, worker.TasksPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
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
	resp, err := admin.Get(ctx, worker.DonePrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	written := map[string]int64{}
	for _, kv := range resp.Kvs {
		written[strings.TrimPrefix(string(kv.Key), worker.DonePrefix)] = kv.Version
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
