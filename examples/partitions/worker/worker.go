// Package worker processes a partitioned task queue on etcd, each task
// exactly once, with the partitions spread over the members of a rink. It
// is the part of the partitions example to copy into a service, and imports
// only rink, the etcd client, zap and the standard library.
//
// Exactly once holds because processing a task is one etcd transaction —
// delete the task, record its result — guarded by the partition's fencing
// token: it commits only while the partition's fence holds the token of the
// holding that claimed it, and only if the task is still there. Work done
// outside that transaction (a call to another service, an e-mail) is not
// covered: fence it with the token in that system, or make it idempotent.
package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// The queue's keys.
const (
	TasksPrefix = "queue/tasks/" // queue/tasks/<partition>/<task id>: a task to process
	FencePrefix = "queue/fence/" // queue/fence/<partition>: the token of the partition's newest holder
	DonePrefix  = "queue/done/"  // queue/done/<task id>: who processed it
)

// TaskKey is the key of task id in partition p.
func TaskKey(p, id int) string { return fmt.Sprintf("%s%05d/%09d", TasksPrefix, p, id) }

// FenceKey is partition p's fence.
func FenceKey(p int) string { return fmt.Sprintf("%s%05d", FencePrefix, p) }

// Role is the role whose holder processes partition p.
func Role(p int) string { return fmt.Sprint("partition:", p) }

func partitionPrefix(p int) string { return fmt.Sprintf("%s%05d/", TasksPrefix, p) }

// token20 formats a token so that etcd's byte-wise comparison of values
// orders tokens numerically.
func token20(t int64) string { return fmt.Sprintf("%020d", t) }

// ErrStale means a newer holder of the partition has fenced it.
var ErrStale = errors.New("worker: partition fenced by a newer holder")

// opTimeout bounds each etcd request, so that a hung request becomes an
// error to retry.
const opTimeout = 5 * time.Second

// Claim fences partition p with a holding's token: it sets the fence to
// token unless the fence holds a higher one (ErrStale: a newer holder
// exists). It is idempotent: a claim retried after an error of unknown
// outcome succeeds.
func Claim(ctx context.Context, cli *clientv3.Client, p int, token int64) error {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(FenceKey(p)), ">", token20(token))).
		Else(clientv3.OpPut(FenceKey(p), token20(token))).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		return ErrStale
	}
	return nil
}

// Process processes the task at key in partition p: in one transaction,
// which commits only while the partition's fence still holds token and the
// task still exists, it deletes the task and records who processed it. It
// reports whether this call processed the task (false: it was gone), or
// ErrStale when a newer holder has fenced the partition.
func Process(ctx context.Context, cli *clientv3.Client, p int, key string, token int64, worker string) (bool, error) {
	id := key[strings.LastIndexByte(key, '/')+1:]
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(FenceKey(p)), "=", token20(token)),
			clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpDelete(key), clientv3.OpPut(DonePrefix+id, worker)).
		Else(clientv3.OpGet(FenceKey(p))).
		Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		return true, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || string(kvs[0].Value) != token20(token) {
		return false, ErrStale
	}
	return false, nil
}

// Config says which rink to join and how many partitions there are.
type Config struct {
	// Rink is the name of the rink.
	Rink string
	// Partitions is the number of partitions, fixed for the life of the
	// queue.
	Partitions int
	// Processed, if set, is called with the key of each task this worker
	// processed, after the transaction committed.
	Processed func(key string)
	// Log receives errors and retries (default: none).
	Log *zap.Logger
}

// Worker is one member: it processes the partitions the rink gives it.
type Worker struct {
	cli    *clientv3.Client
	r      *rink.Rink
	cfg    Config
	log    *zap.Logger
	wake   []chan struct{} // per partition: new tasks may be there
	cancel context.CancelFunc
	loops  sync.WaitGroup
}

// Start joins cfg.Rink on cli with opts and processes the tasks of every
// partition it holds, until Stop.
func Start(cli *clientv3.Client, cfg Config, opts ...rink.Option) (*Worker, error) {
	if cfg.Partitions < 1 {
		return nil, fmt.Errorf("worker: %d partitions: want at least 1", cfg.Partitions)
	}
	r, err := rink.New(cli, cfg.Rink, opts...)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{cli: cli, r: r, cfg: cfg, log: log.With(zap.String("member", r.Member())), cancel: cancel,
		wake: make([]chan struct{}, cfg.Partitions)}
	for p := range w.wake {
		w.wake[p] = make(chan struct{}, 1)
	}
	w.loops.Add(1 + cfg.Partitions)
	go func() {
		defer w.loops.Done()
		w.watchTasks(ctx)
	}()
	for p := 0; p < cfg.Partitions; p++ {
		go func() {
			defer w.loops.Done()
			w.partition(ctx, p)
		}()
	}
	return w, nil
}

// Rink returns the worker's rink.
func (w *Worker) Rink() *rink.Rink { return w.r }

// Stop leaves the rink, which hands every partition over at once, and waits
// for the worker's goroutines.
func (w *Worker) Stop(ctx context.Context) error {
	err := w.r.Shutdown(ctx)
	w.cancel()
	w.loops.Wait()
	return err
}

// Wait waits until the rink has stopped by itself (its etcd client was
// closed), then stops the worker's goroutines.
func (w *Worker) Wait() {
	<-w.r.Done()
	w.cancel()
	w.loops.Wait()
}

func (w *Worker) signal(p int) {
	select {
	case w.wake[p] <- struct{}{}:
	default:
	}
}

// watchTasks wakes the partitions' loops when tasks arrive. A watch that
// ends (etcd cancelled it, or lost its leader) is opened again; once it is,
// every partition is woken, for the tasks put while none was open.
func (w *Worker) watchTasks(ctx context.Context) {
	var b backoff
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		var err error
		for resp := range w.cli.Watch(wctx, TasksPrefix, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify()) {
			if err = resp.Err(); err != nil {
				continue // the channel closes next
			}
			if resp.Created {
				b.reset()
				for p := range w.wake {
					w.signal(p)
				}
				continue
			}
			for _, ev := range resp.Events {
				rest := strings.TrimPrefix(string(ev.Kv.Key), TasksPrefix)
				if i := strings.IndexByte(rest, '/'); i > 0 {
					if p, err := strconv.Atoi(rest[:i]); err == nil && p >= 0 && p < len(w.wake) {
						w.signal(p)
					}
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("task watch ended; opening it again", zap.Error(err))
		if !b.wait(ctx) {
			return
		}
	}
}

// partition is the loop for partition p: on each holding, claim the
// partition and drain its tasks until the holding ends.
func (w *Worker) partition(ctx context.Context, p int) {
	for {
		roleCtx, err := w.r.AwaitRoleContext(ctx, Role(p))
		if err != nil {
			return // rink.ErrShutdown, or the worker stopped
		}
		token, _ := rink.Token(roleCtx)
		if err := w.claim(roleCtx, p, token); err != nil {
			// A newer holder fenced the partition (this holding is about to
			// end), or the holding ended.
			<-roleCtx.Done()
			continue
		}
		w.drain(roleCtx, p, token)
	}
}

// claim claims partition p, retrying other errors than ErrStale (a
// timeout, etcd unavailable) with a capped backoff until the holding ends.
func (w *Worker) claim(ctx context.Context, p int, token int64) error {
	var b backoff
	for {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := Claim(cctx, w.cli, p, token)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrStale):
			w.log.Warn("partition fenced by a newer holder", zap.Int("partition", p), zap.Int64("token", token))
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		w.log.Warn("claiming a partition failed; retrying", zap.Int("partition", p), zap.Error(err))
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

// drain processes partition p's tasks while the holding ctx lasts, waiting
// for more when there are none. Errors are retried with a capped backoff.
func (w *Worker) drain(ctx context.Context, p int, token int64) {
	var b backoff
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, opTimeout)
		resp, err := w.cli.Get(gctx, partitionPrefix(p), clientv3.WithPrefix(), clientv3.WithLimit(100), clientv3.WithKeysOnly())
		cancel()
		if err == nil {
			err = w.processAll(ctx, p, token, resp)
		}
		switch {
		case errors.Is(err, ErrStale):
			w.log.Warn("partition fenced by a newer holder", zap.Int("partition", p), zap.Int64("token", token))
			<-ctx.Done() // this holding is about to end
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("processing a partition failed; retrying", zap.Int("partition", p), zap.Error(err))
			if !b.wait(ctx) {
				return
			}
			continue
		}
		b.reset()
		if len(resp.Kvs) == 0 {
			select {
			case <-w.wake[p]:
			case <-ctx.Done():
			}
		}
	}
}

// processAll processes the listed tasks, in order.
func (w *Worker) processAll(ctx context.Context, p int, token int64, list *clientv3.GetResponse) error {
	for _, kv := range list.Kvs {
		if err := ctx.Err(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		ok, err := Process(pctx, w.cli, p, string(kv.Key), token, w.r.Member())
		cancel()
		if err != nil {
			return err
		}
		if ok && w.cfg.Processed != nil {
			w.cfg.Processed(string(kv.Key))
		}
	}
	return nil
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
