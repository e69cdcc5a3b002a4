// Command peerindex answers "which of the n replicas am I?" with Rank, and
// shows how to split work without the unsafe `id % replicas == index` test.
//
// Each member follows its rank with Rank().Changed() — no polling, no
// interval, no clock — while the rink grows from 3 to 4 members and then
// loses one. For the work itself it uses roles: job id belongs to the role
// "shard:<id mod 64>", which exactly one member holds at a time, so during a
// change no job is done twice or dropped. Each member runs package peer,
// the code to copy into a service (see README.md).
//
//	go run ./examples/peerindex
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/examples/peerindex/peer"
	"github.com/rink-go/rink/internal/embedetcd"
)

type config struct {
	endpoints string
	members   int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "", "etcd endpoints, comma-separated (default: start an embedded etcd)")
	flag.IntVar(&cfg.members, "members", 3, "members at the start (at least 2)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "peerindex:", err)
		os.Exit(1)
	}
}

type member struct {
	p   *peer.Peer
	r   *rink.Rink
	cli *clientv3.Client
}

// printer serialises output lines and falls silent when the story ends.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	ended bool
	seen  map[string]int64 // member -> map version of the last rank it followed
}

// followed reports whether member's follower has handled the rank rk.
func (p *printer) followed(rk rink.Rank) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[rk.Member] == rk.Version
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		fmt.Fprintf(p.out, format, args...)
	}
}

// follower returns the function each member calls with its rank: it
// prints the member's index and size every time they change.
func follower(p *printer) func(rink.Rank) {
	var last rink.Rank
	return func(rk rink.Rank) {
		if rk.Index != last.Index || rk.Size != last.Size || rk.Waiting != last.Waiting {
			if rk.Index >= 0 {
				p.printf("  %s: I am %d of %d (map v%d)\n", rk.Member, rk.Index, rk.Size, rk.Version)
			} else if rk.Waiting {
				p.printf("  %s: waiting to be ranked (map v%d)\n", rk.Member, rk.Version)
			}
			last = rk
		}
		p.mu.Lock()
		p.seen[rk.Member] = rk.Version
		p.mu.Unlock()
	}
}

func run(ctx context.Context, out io.Writer, cfg config) error {
	if cfg.members < 2 {
		return fmt.Errorf("-members %d: want at least 2", cfg.members)
	}
	admin, closeAll, err := embedetcd.Connect(cfg.endpoints, out)
	if err != nil {
		return err
	}
	defer closeAll()
	p := &printer{out: out, seen: map[string]int64{}}
	var members []*member
	defer func() {
		p.mu.Lock()
		p.ended = true
		p.mu.Unlock()
		for _, m := range members {
			_ = m.p.Shutdown(context.Background())
			m.cli.Close()
		}
	}()
	add := func(name string) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: admin.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		// No rebalance delay, so that the story runs in seconds; see
		// README.md for settings fit for production.
		pr, err := peer.Join(cli, "peerindex", follower(p), rink.WithMemberName(name), rink.WithRebalanceDelay(0))
		if err != nil {
			cli.Close()
			return err
		}
		members = append(members, &member{p: pr, r: pr.Rink(), cli: cli})
		return nil
	}
	settled := func(n int) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok := true
			for _, m := range members {
				rk := m.r.Rank()
				ok = ok && rk.Index >= 0 && rk.Size == n && p.followed(rk)
			}
			if ok {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("ranks did not settle")
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	step := func(title string) { p.printf("\n%s\n", title) }

	step(fmt.Sprintf("%d members join", cfg.members))
	for i := 0; i < cfg.members; i++ {
		if err := add(fmt.Sprintf("m%d", i)); err != nil {
			return err
		}
		if err := settled(i + 1); err != nil {
			return err
		}
	}
	if err := jobs(ctx, p, members); err != nil {
		return err
	}

	step("a member joins: the rink rebalances, and only the shards the newcomer takes move")
	if err := add(fmt.Sprintf("m%d", cfg.members)); err != nil {
		return err
	}
	if err := settled(cfg.members + 1); err != nil {
		return err
	}
	if err := jobs(ctx, p, members); err != nil {
		return err
	}

	step("m1 leaves: the highest index moves into its place; only m1's shards move")
	gone := members[1]
	members = append(members[:1], members[2:]...)
	if err := gone.p.Shutdown(ctx); err != nil {
		return err
	}
	gone.cli.Close()
	if err := settled(cfg.members); err != nil {
		return err
	}
	return jobs(ctx, p, members)
}

// jobs shows who does jobs 0..15: the member holding the job's shard.
func jobs(ctx context.Context, p *printer, members []*member) error {
	by := map[string][]string{}
	for id := 0; id < 16; id++ {
		holder := ""
		deadline := time.Now().Add(10 * time.Second)
		for holder == "" {
			for _, m := range members {
				if m.p.Do(id, func(context.Context) {}) {
					holder = m.r.Member()
				}
			}
			if holder == "" {
				if time.Now().After(deadline) {
					return fmt.Errorf("nobody holds %s", peer.ShardOf(id))
				}
				select {
				case <-time.After(5 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		by[holder] = append(by[holder], fmt.Sprint(id))
	}
	var names []string
	for name := range by {
		names = append(names, name)
	}
	sort.Strings(names)
	line := "  jobs 0-15 by the holder of their shard:"
	for _, name := range names {
		line += fmt.Sprintf("  %s[%s]", name, strings.Join(by[name], " "))
	}
	p.printf("%s\n", line)
	return nil
}
