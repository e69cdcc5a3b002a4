package worker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/internal/extest"
)

// faultKV passes every request to etcd but those its hooks fail.
type faultKV struct {
	clientv3.KV
	get func(key string) error        // fails a Get when it returns an error
	txn func(cs []clientv3.Cmp) error // fails a Txn's Commit when it returns an error
}

func (f *faultKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if f.get != nil {
		if err := f.get(key); err != nil {
			return nil, err
		}
	}
	return f.KV.Get(ctx, key, opts...)
}

func (f *faultKV) Txn(ctx context.Context) clientv3.Txn { return &faultTxn{Txn: f.KV.Txn(ctx), f: f} }

type faultTxn struct {
	clientv3.Txn
	f  *faultKV
	cs []clientv3.Cmp
}

func (t *faultTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cs = append(t.cs, cs...)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *faultTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *faultTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *faultTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.f.txn != nil {
		if err := t.f.txn(t.cs); err != nil {
			return nil, err
		}
	}
	return t.Txn.Commit()
}

// isClaim reports whether a transaction's comparisons are a claim's.
func isClaim(cs []clientv3.Cmp) bool {
	return len(cs) == 1 && bytes.HasPrefix(cs[0].KeyBytes(), []byte(FencePrefix)) && cs[0].GetCompare().GetResult() == pb.Compare_GREATER
}

// endingWatcher ends the first watch of the task keys at once, as etcd does
// when it cancels a watch; other watches run as usual.
type endingWatcher struct {
	clientv3.Watcher
	taskWatches atomic.Int32
}

func (w *endingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if key == TasksPrefix && w.taskWatches.Add(1) == 1 {
		ch := make(chan clientv3.WatchResponse, 1)
		ch <- clientv3.WatchResponse{Canceled: true, CancelReason: "test: watch cancelled"}
		close(ch)
		return ch
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

type fixture struct {
	t         *testing.T
	cli       *clientv3.Client
	w         *Worker
	processed chan string
}

// start runs one worker on a fresh etcd, with the client's KV and watcher
// wrapped by kv and wt (when not nil), and one partition.
func start(t *testing.T, cli *clientv3.Client, kv *faultKV, wt *endingWatcher) *fixture {
	t.Helper()
	if kv != nil {
		kv.KV = cli.KV
		cli.KV = kv
	}
	if wt != nil {
		wt.Watcher = cli.Watcher
		cli.Watcher = wt
	}
	f := &fixture{t: t, cli: cli, processed: make(chan string, 100)}
	w, err := Start(cli, Config{Rink: "q", Partitions: 1, Processed: func(key string) { f.processed <- key }},
		rink.WithMemberName("w"), rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	return f
}

func (f *fixture) put(id int) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := TaskKey(0, id)
	if _, err := f.cli.Put(ctx, key, "payload"); err != nil {
		f.t.Fatal(err)
	}
	return key
}

// expect waits for the worker to process key.
func (f *fixture) expect(key string, d time.Duration, why string) {
	f.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case got := <-f.processed:
			if got == key {
				return
			}
		case <-deadline:
			f.t.Fatalf("%s not processed within %v: %s", key, d, why)
		}
	}
}

// TestClaimTimeout fails the worker's first claims of its partition as a
// timeout does: the worker must retry and process the partition's tasks,
// not wait for the role to move. (The old worker waited for the role to
// move after any claim error; with one worker, it never moves.)
func TestClaimTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	var claims atomic.Int32
	kv := &faultKV{txn: func(cs []clientv3.Cmp) error {
		if isClaim(cs) && claims.Add(1) <= 2 {
			return context.DeadlineExceeded
		}
		return nil
	}}
	f := start(t, cli, kv, nil)
	defer f.w.Stop(context.Background())
	key := f.put(1)
	f.expect(key, 15*time.Second, "the claim's timeouts parked the partition")
	if n := claims.Load(); n < 3 {
		t.Errorf("%d claims, want at least 3 (two failed, then one succeeded)", n)
	}
}

// TestGetErrorBacksOff fails every listing of the partition's tasks for
// half a second: the worker must retry at a bounded rate, not in a hot
// loop, and process the task once listings work again. (The old worker
// listed again at once after an error.)
func TestGetErrorBacksOff(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	var failing atomic.Bool
	failing.Store(true)
	var failed atomic.Int32
	firstFailure := make(chan struct{})
	kv := &faultKV{get: func(key string) error {
		if strings.HasPrefix(key, TasksPrefix) && failing.Load() {
			if failed.Add(1) == 1 {
				close(firstFailure)
			}
			return errors.New("test: etcd unavailable")
		}
		return nil
	}}
	f := start(t, cli, kv, nil)
	defer f.w.Stop(context.Background())
	key := f.put(1)
	select {
	case <-firstFailure:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker did not list its partition within 15s")
	}
	time.Sleep(500 * time.Millisecond)
	n := failed.Load()
	failing.Store(false)
	if n > 12 {
		t.Errorf("%d listings failed in 0.5s: retries must back off", n)
	}
	f.expect(key, 15*time.Second, "listings work again")
}

// TestWatchReopened ends the worker's watch of the task keys at once: the
// worker must open it again and process tasks put afterwards into a
// partition it has drained. (The old worker's watch loop returned, and the
// partition's loop waited forever for a wake-up.)
func TestWatchReopened(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	wt := &endingWatcher{}
	f := start(t, cli, nil, wt)
	defer f.w.Stop(context.Background())
	f.expect(f.put(1), 15*time.Second, "the first task")
	time.Sleep(200 * time.Millisecond) // the partition is drained and waits
	f.expect(f.put(2), 15*time.Second, "a task put after the watch ended")
	if n := wt.taskWatches.Load(); n < 2 {
		t.Errorf("the task watch was opened %d times, want it opened again", n)
	}
}

// TestProcessFenced: a holder whose partition was claimed by a newer
// holder cannot process its tasks.
func TestProcessFenced(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := extest.Etcd(t)
	defer srv.Close()
	cli := extest.Client(t, srv)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := TaskKey(3, 7)
	if _, err := cli.Put(ctx, key, "payload"); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, 3, 10); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, 3, 20); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, 3, 10); !errors.Is(err, ErrStale) {
		t.Fatalf("claim with an older token: %v, want %v", err, ErrStale)
	}
	if ok, err := Process(ctx, cli, 3, key, 10, "old"); ok || !errors.Is(err, ErrStale) {
		t.Fatalf("process with an older token: %v, %v; want false, %v", ok, err, ErrStale)
	}
	if ok, err := Process(ctx, cli, 3, key, 20, "new"); !ok || err != nil {
		t.Fatalf("process with the newest token: %v, %v", ok, err)
	}
	if ok, err := Process(ctx, cli, 3, key, 20, "new"); ok || err != nil {
		t.Fatalf("process of a task already processed: %v, %v; want false, nil", ok, err)
	}
}
