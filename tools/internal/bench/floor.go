package bench

import (
	"context"
	"fmt"
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
	var out []time.Duration
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		began := time.Now()
		resp, err := p.writer.Put(ctx, p.key, fmt.Sprint(i))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("floor: put: %w", err)
		}
		rev := resp.Header.Revision
	wait:
		for {
			select {
			case wr, ok := <-p.wch:
				if !ok || wr.Err() != nil {
					cancel()
					return nil, fmt.Errorf("floor: watch ended: %v", wr.Err())
				}
				for _, ev := range wr.Events {
					if ev.Kv.ModRevision == rev {
						out = append(out, time.Since(began))
						break wait
					}
				}
			case <-ctx.Done():
				cancel()
				return nil, fmt.Errorf("floor: put at revision %d not seen by the watch within 10 s", rev)
			}
		}
		cancel()
	}
	return out, nil
}

func (p *floorProbe) close() {
	p.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = p.writer.Delete(ctx, p.key)
	cancel()
	p.writer.Close()
	p.watcher.Close()
}

// floorFigures are the floor's figures for a set of samples.
func floorFigures(s Sample, floor []time.Duration) {
	s["write_watch_p50_ms"] = ms(percentile(floor, 0.5))
	s["write_watch_p99_ms"] = ms(percentile(floor, 0.99))
}

// Floor measures n puts on one client, each seen by a watch on another
// client: the least one etcd write (fsynced, unless etcd runs without) can
// cost on the path of a handover.
func Floor(env Env, n int) (Sample, error) {
	p, err := newFloorProbe(env)
	if err != nil {
		return nil, err
	}
	defer p.close()
	floor, err := p.measure(n)
	if err != nil {
		return nil, err
	}
	s := Sample{}
	floorFigures(s, floor)
	return s, nil
}
