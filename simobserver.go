package rink

import (
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink/internal/core"
	"github.com/rink-go/rink/internal/simhook"
)

// The simulator's driver of an Observer (see internal/simhook): the
// production observer's view (observerView, every decision it makes),
// fed by a simFollower, the watcher that carries out a core.Follower's
// decisions against the model, as Observer.run's is fed by follow.
// Nothing here runs in production.

func init() { simhook.NewObserver = newSimObserver }

type simObserver struct {
	// m is a bare member, for its watcher alone: its etcd, its env and
	// whether it crashed.
	m    *simMember
	f    *simFollower
	cfg  simhook.ObserverConfig
	view *observerView
}

func newSimObserver(cfg simhook.ObserverConfig) simhook.Observer {
	k := newKeys(cfg.Rink)
	o := &simObserver{m: &simMember{etcd: cfg.Etcd, env: cfg.Env}, cfg: cfg, view: newObserverView(cfg.Rink, k, zap.NewNop())}
	// All of the rink's keys, as NewObserver follows them.
	what := func() (key, end string, extra []string, wide bool) {
		return k.Prefix, clientv3.GetPrefixRangeEnd(k.Prefix), nil, false
	}
	send := func(b watchBatch) {
		s := o.view.batch(b)
		if o.cfg.Published != nil {
			o.cfg.Published(s)
		}
	}
	o.f = &simFollower{m: o.m, f: core.NewFollower(core.NewBackoff(cfg.Env.Rand())), what: what, send: send, ended: func() bool { return false }}
	return o
}

func (o *simObserver) Start() { o.f.start() }

func (o *simObserver) Crash() {
	o.m.dead = true
	o.f.stop()
}
