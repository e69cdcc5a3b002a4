package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// FloorPutsPerHandover is how many floor samples the handover scenarios
// take right before each handover, and the floor scenario per -handovers.
const FloorPutsPerHandover = 4

// floorProbe measures the floor under every handover: one etcd put, made on
// one client and seen by a watch on another client (each with a connection
// of its own, as the members have).
type floorProbe struct {
	writer, watcher *clientv3.Client
	key             string
	lease           clientv3.LeaseID // for measureDepart's member key
	wch             clientv3.WatchChan
	cancel          context.CancelFunc
}

func newFloorProbe(env Env) (*floorProbe, error) {
	newClient := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	p := &floorProbe{key: "rinkbench/" + nextRink("floor")}
	var err error
	if p.writer, err = newClient(); err != nil {
		return nil, err
	}
	if p.watcher, err = newClient(); err != nil {
		p.writer.Close()
		return nil, err
	}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	grant, err := p.writer.Grant(ctx, 60)
	if err != nil {
		p.cancel()
		p.writer.Close()
		p.watcher.Close()
		return nil, fmt.Errorf("floor: granting a lease: %w", err)
	}
	p.lease = grant.ID
	p.wch = p.watcher.Watch(ctx, p.key, clientv3.WithCreatedNotify())
	if created, ok := <-p.wch; !ok || created.Err() != nil {
		p.close()
		return nil, fmt.Errorf("floor: opening the watch: %v", created.Err())
	}
	return p, nil
}

// measure makes n puts one after the other and returns, for each, the time
// from the start of the put to the other client's watch delivering it.
func (p *floorProbe) measure(n int) ([]time.Duration, error) {
	return p.samples(n, func(ctx context.Context, i int) (time.Duration, error) {
		began := time.Now()
		resp, err := p.writer.Put(ctx, p.key, fmt.Sprint(i))
		if err != nil {
			return 0, fmt.Errorf("floor: put: %w", err)
		}
		return p.seen(ctx, resp.Header.Revision, began)
	})
}

// samples takes n samples of one, each bounded by 10 s.
func (p *floorProbe) samples(n int, one func(ctx context.Context, i int) (time.Duration, error)) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := one(ctx, i)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// departValue is as large as the map a member writes when it leaves a rink
// of two with 1,024 slots.
var departValue = `{"schema":2,"version":9,"slots":1024,"leader":"m0","members":["m0"],"table":[` + strings.Repeat("0,", 1023) + `0]}`

// measureDepart measures n transactions shaped as a member's departure
// (see rink's depart): guarded by the map's mod revision, the create
// revisions of every key under a members prefix, and the leaving member
// key's create revision and lease; writing the map and deleting the key.
// Each time is from the start of the transaction to the other client's
// watch delivering it. The rink's own figures do not depend on it: it
// shows what the departure's transaction alone costs beside a put.
func (p *floorProbe) measureDepart(n int) ([]time.Duration, error) {
	members := p.key + "/members/"
	member := members + "m1"
	return p.samples(n, func(ctx context.Context, i int) (time.Duration, error) {
		created, err := p.writer.Put(ctx, member, "{}", clientv3.WithLease(p.lease))
		if err != nil {
			return 0, fmt.Errorf("floor: put: %w", err)
		}
		cur, err := p.writer.Put(ctx, p.key, fmt.Sprint(i))
		if err != nil {
			return 0, fmt.Errorf("floor: put: %w", err)
		}
		if _, err := p.seen(ctx, cur.Header.Revision, time.Now()); err != nil {
			return 0, err
		}
		began := time.Now()
		resp, err := p.writer.Txn(ctx).
			If(
				clientv3.Compare(clientv3.ModRevision(p.key), "=", cur.Header.Revision),
				clientv3.Compare(clientv3.CreateRevision(members), "<", cur.Header.Revision+1).WithPrefix(),
				clientv3.Compare(clientv3.CreateRevision(member), "=", created.Header.Revision),
				clientv3.Compare(clientv3.LeaseValue(member), "=", p.lease),
			).
			Then(clientv3.OpPut(p.key, departValue), clientv3.OpDelete(member)).
			Commit()
		if err == nil && !resp.Succeeded {
			err = fmt.Errorf("a guard failed")
		}
		if err != nil {
			return 0, fmt.Errorf("floor: departure transaction: %w", err)
		}
		return p.seen(ctx, resp.Header.Revision, began)
	})
}

// seen waits until the watch delivers revision rev and returns the time
// since began.
func (p *floorProbe) seen(ctx context.Context, rev int64, began time.Time) (time.Duration, error) {
	for {
		select {
		case wr, ok := <-p.wch:
			if !ok || wr.Err() != nil {
				return 0, fmt.Errorf("floor: watch ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision == rev {
					return time.Since(began), nil
				}
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("floor: write at revision %d not seen by the watch within 10 s", rev)
		}
	}
}

func (p *floorProbe) close() {
	p.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = p.writer.Delete(ctx, p.key)
	_, _ = p.writer.Revoke(ctx, p.lease)
	cancel()
	p.writer.Close()
	p.watcher.Close()
}

// floorFigures are the floor's figures for a set of samples, and those of
// the departure transactions measured beside them.
func floorFigures(s Sample, floor, depart []time.Duration) {
	s["write_watch_p50_ms"] = ms(percentile(floor, 0.5))
	s["write_watch_p99_ms"] = ms(percentile(floor, 0.99))
	s["depart_txn_p50_ms"] = ms(percentile(depart, 0.5))
	s["depart_txn_to_floor"] = s["depart_txn_p50_ms"] / s["write_watch_p50_ms"]
}

// DepartTxnsPerHandover is how many departure transactions (see
// measureDepart) the handover scenarios measure right before each handover.
const DepartTxnsPerHandover = 2

// Floor measures n puts on one client, each seen by a watch on another
// client: the least one etcd write (fsynced, unless etcd runs without) can
// cost on the path of a handover. Beside them it measures n/2 transactions
// shaped as a departure (see measureDepart).
func Floor(env Env, n int) (Sample, error) {
	p, err := newFloorProbe(env)
	if err != nil {
		return nil, err
	}
	defer p.close()
	var floor, depart []time.Duration
	for len(floor) < n {
		f, err := p.measure(FloorPutsPerHandover)
		if err != nil {
			return nil, err
		}
		d, err := p.measureDepart(DepartTxnsPerHandover)
		if err != nil {
			return nil, err
		}
		floor, depart = append(floor, f...), append(depart, d...)
		time.Sleep(5 * time.Millisecond) // as long as the handover scenarios' settling, about
	}
	s := Sample{}
	floorFigures(s, floor, depart)
	return s, nil
}
