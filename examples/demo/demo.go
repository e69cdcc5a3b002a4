package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/demo/holder"
	"github.com/rink-go/rink/internal/embedetcd"
)

const rinkName = "demo"

// demo holds the members of the story and what they report.
type demo struct {
	cfg  config
	out  io.Writer
	etcd *embedetcd.Server

	mu       sync.Mutex
	members  []*member
	title    string
	events   []string // newest last
	holder   map[string]string
	released map[string]time.Time // role -> when its last holder let go
	gaps     []time.Duration
	moves    int

	stopView chan struct{}
	viewDone chan struct{}
}

type member struct {
	name   string
	cli    *clientv3.Client
	h      *holder.Member
	r      *rink.Rink
	joined time.Time
	state  string // "", "left", "crashed"
	held   map[string]bool
}

func newDemo(out io.Writer, cfg config) (*demo, error) {
	srv, err := embedetcd.Start(embedetcd.Options{})
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	d := &demo{
		cfg: cfg, out: out, etcd: srv,
		holder: map[string]string{}, released: map[string]time.Time{},
		stopView: make(chan struct{}), viewDone: make(chan struct{}),
	}
	fmt.Fprintf(out, "embedded etcd at %s\ninspect it with: go run ./tools/cmd/rinkctl status %s --endpoints %s\n", srv.Endpoint(), rinkName, srv.Endpoint())
	if cfg.plain {
		close(d.viewDone)
	} else {
		go d.view()
	}
	return d, nil
}

// join starts the next member: a holder.Member, the code each replica of
// a service would run, with the demo's short TTL and rebalance delay.
func (d *demo) join(ctx context.Context) error {
	d.mu.Lock()
	name := fmt.Sprintf("m%d", len(d.members))
	d.mu.Unlock()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.etcd.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	m := &member{name: name, cli: cli, joined: time.Now(), held: map[string]bool{}}
	roles := make([]string, d.cfg.roles)
	for i := range roles {
		roles[i] = fmt.Sprint("partition:", i)
	}
	h, err := holder.Start(cli, holder.Config{
		Rink:     rinkName,
		Roles:    roles,
		Acquired: func(role string, token int64) { d.acquired(m, role, token) },
		Released: func(role string, _ error) { d.releasedBy(m, role) },
	},
		rink.WithMemberName(name),
		rink.WithSessionTTL(d.cfg.ttl),
		rink.WithRebalanceDelay(d.cfg.delay),
	)
	if err != nil {
		cli.Close()
		return err
	}
	m.h, m.r = h, h.Rink()
	d.mu.Lock()
	d.members = append(d.members, m)
	d.mu.Unlock()
	d.logf("%s joined", name)
	return ctx.Err()
}

func (d *demo) acquired(m *member, role string, token int64) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	m.held[role] = true
	if rel, ok := d.released[role]; ok && d.holder[role] != "" && d.holder[role] != m.name {
		gap := now.Sub(rel)
		d.gaps = append(d.gaps, gap)
		d.moves++
		d.addEvent(fmt.Sprintf("%-14s %s -> %s  gap %-9v token %d", role, d.holder[role], m.name, gap.Round(10*time.Microsecond), token))
	}
	d.holder[role] = m.name
}

func (d *demo) releasedBy(m *member, role string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(m.held, role)
	d.released[role] = time.Now()
}

// leave shuts a member down gracefully.
func (d *demo) leave(name string) {
	m := d.find(name)
	d.logf("%s leaves (Shutdown)", name)
	_ = m.h.Shutdown(context.Background())
	m.cli.Close()
	d.mu.Lock()
	m.state = "left"
	d.mu.Unlock()
}

// crash closes a member's etcd connection without revoking its lease.
func (d *demo) crash(name string) {
	m := d.find(name)
	d.logf("%s crashes (connection dropped, lease left to expire)", name)
	m.cli.Close()
	m.h.Wait()
	d.mu.Lock()
	m.state = "crashed"
	d.mu.Unlock()
}

func (d *demo) find(name string) *member {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.members {
		if m.name == name {
			return m
		}
	}
	panic("no member " + name)
}

// settled reports whether n members are ranked and every role is held by
// exactly one live member.
func (d *demo) settled(n int) func() bool {
	return func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		ranked := 0
		count := map[string]int{}
		for _, m := range d.members {
			if m.state != "" {
				continue
			}
			if m.r.Rank().Index >= 0 {
				ranked++
			}
			for role := range m.held {
				count[role]++
			}
		}
		if ranked != n || len(count) != d.cfg.roles {
			return false
		}
		for _, c := range count {
			if c != 1 {
				return false
			}
		}
		return true
	}
}

// until polls cond until it holds, for at most a minute.
func (d *demo) until(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(time.Minute + 2*d.cfg.delay)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up waiting for: %s", what)
		}
		if err := d.pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) pause(ctx context.Context, t time.Duration) error {
	select {
	case <-time.After(t):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *demo) step(title string) {
	d.mu.Lock()
	d.title = title
	d.mu.Unlock()
	if d.cfg.plain {
		fmt.Fprintf(d.out, "\n== %s\n", title)
		d.table(d.out)
	}
}

func (d *demo) logf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addEvent(fmt.Sprintf(format, args...))
}

// addEvent records an event; d.mu is held.
func (d *demo) addEvent(s string) {
	line := time.Now().Format("15:04:05.000") + "  " + s
	d.events = append(d.events, line)
	if d.cfg.plain {
		fmt.Fprintln(d.out, line)
	}
}

// view redraws the screen until the story ends.
func (d *demo) view() {
	defer close(d.viewDone)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		var b strings.Builder
		b.WriteString("\033[H\033[2J")
		d.mu.Lock()
		fmt.Fprintf(&b, "rink demo on embedded etcd %s  (TTL %v, rebalance delay %v, %d roles)\n\n", d.etcd.Endpoint(), d.cfg.ttl, d.cfg.delay, d.cfg.roles)
		fmt.Fprintf(&b, "%s\n\n", d.title)
		d.mu.Unlock()
		d.table(&b)
		d.mu.Lock()
		b.WriteString("\nrecent events:\n")
		for _, e := range d.events[max(0, len(d.events)-12):] {
			b.WriteString("  " + e + "\n")
		}
		d.mu.Unlock()
		fmt.Fprint(d.out, b.String())
		select {
		case <-t.C:
		case <-d.stopView:
			return
		}
	}
}

// table writes the members' table.
func (d *demo) table(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	leader, version := "", int64(0)
	for _, m := range d.members {
		if m.state == "" {
			rk := m.r.Rank()
			leader, version = rk.Leader, max(version, rk.Version)
		}
	}
	fmt.Fprintf(w, "  map version %d, leader %s\n", version, leader)
	fmt.Fprintf(w, "  %-6s %-6s %-16s %s\n", "MEMBER", "INDEX", "STATE", "ROLES")
	for _, m := range d.members {
		rk := m.r.Rank()
		index, state := fmt.Sprint(rk.Index), "ranked"
		switch {
		case m.state != "":
			index, state = "-", m.state
		case rk.Index < 0:
			index, state = "-", fmt.Sprintf("waiting %.1fs", time.Since(m.joined).Seconds())
		}
		if m.state == "" && m.name == leader {
			state += " (leader)"
		}
		var roles []string
		for role := range m.held {
			roles = append(roles, strings.TrimPrefix(role, "partition:"))
		}
		sort.Slice(roles, func(i, j int) bool {
			return len(roles[i]) < len(roles[j]) || len(roles[i]) == len(roles[j]) && roles[i] < roles[j]
		})
		fmt.Fprintf(w, "  %-6s %-6s %-16s %2d %s\n", m.name, index, state, len(roles), strings.Join(roles, " "))
	}
}

func (d *demo) shutdownAll() {
	d.mu.Lock()
	live := slices.Clone(d.members)
	d.mu.Unlock()
	for _, m := range live {
		if m.state == "" {
			d.leave(m.name)
		}
	}
}

func (d *demo) summary() {
	d.mu.Lock()
	defer d.mu.Unlock()
	gaps := slices.Clone(d.gaps)
	slices.Sort(gaps)
	fmt.Fprintf(d.out, "\nsummary: %d role moves", d.moves)
	if len(gaps) > 0 {
		fmt.Fprintf(d.out, "; gap between holders: min %v, median %v, max %v (the max includes the crash, which waits for the lease)",
			gaps[0].Round(10*time.Microsecond), gaps[len(gaps)/2].Round(10*time.Microsecond), gaps[len(gaps)-1].Round(time.Millisecond))
	}
	fmt.Fprintln(d.out)
}

// close stops the view, every member still running, and etcd.
func (d *demo) close() {
	select {
	case <-d.stopView:
	default:
		close(d.stopView)
	}
	<-d.viewDone
	d.mu.Lock()
	live := slices.Clone(d.members)
	d.mu.Unlock()
	for _, m := range live {
		if m.state == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.h.Shutdown(ctx)
			cancel()
			m.cli.Close()
			m.state = "left"
		}
	}
	d.etcd.Close()
}
