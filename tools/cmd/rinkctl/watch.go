package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

func watchCmd(g *globals) *cobra.Command {
	var maxChanges int
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Print a line for every change of a rink: joins, promotions, leaves, crashes, leader, slots moved",
		Long: `watch prints a line for every change of a rink. A ranked member that leaves
is reported as "NAME left" when it left by its own departure (its Shutdown
wrote a map without it, deleting its member key in the same transaction),
and as "NAME's lease ended (crashed or cut off)" when its member key went
with its lease (it crashed, was cut off from etcd for a TTL, or could not
hand over) and the leader then dropped it. A waiting member's leave cannot
be told from its crash: both end its lease, and both print "left while
waiting".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, cli, closeAll, err := g.observe(cmd.Context(), args[0], true)
			if err != nil {
				return err
			}
			defer closeAll()
			w := cmd.OutOrStdout()
			prev := ob.State()
			print := func(s rink.State, what []rink.Change) error {
				if g.output == "json" {
					return json.NewEncoder(w).Encode(struct {
						Time    time.Time     `json:"time"`
						Version int64         `json:"version"`
						Changes []rink.Change `json:"changes"`
					}{time.Now().UTC(), s.Version, what})
				}
				words := make([]string, len(what))
				for i, c := range what {
					words[i] = describe(c)
				}
				_, err := fmt.Fprintf(w, "%s v%d %s\n", time.Now().UTC().Format("15:04:05.000"), s.Version, strings.Join(words, "; "))
				return err
			}
			if g.output == "table" {
				fmt.Fprintf(w, "%s v%d watching: %d ranked, %d waiting, leader %s\n", time.Now().UTC().Format("15:04:05.000"),
					prev.Version, len(prev.Members), len(prev.Waiting)+len(prev.Joining), orNone(prev.Leader))
			}
			for n := 0; maxChanges <= 0 || n < maxChanges; {
				select {
				case <-prev.Changed():
				case <-cmd.Context().Done():
					return nil
				case <-ob.Done():
					return nil
				}
				next := ob.State()
				if what := rink.Diff(prev, next); len(what) > 0 {
					for i, c := range what {
						if c.Kind == "left" && leaseEnded(cmd.Context(), cli, g.dialTimeout, args[0], c.Member, prev, next) {
							what[i].Kind = kindLeaseEnded
						}
					}
					if err := print(next, what); err != nil {
						return err
					}
					n++
				}
				prev = next
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&maxChanges, "max-changes", 0, "exit after this many changes (0: until interrupted)")
	return cmd
}

// kindLeaseEnded is the kind of change watch reports, in place of
// rink.Diff's "left", for a ranked member whose lease ended: its member
// key went without a map that drops it.
const kindLeaseEnded = "lease-ended"

// describe says what a change is, in words.
func describe(c rink.Change) string {
	if c.Kind == kindLeaseEnded {
		return c.Member + "'s lease ended (crashed or cut off)"
	}
	return c.String()
}

// leaseEnded reports whether member, ranked in prev and gone from next's
// map, went because its lease ended (it crashed, or was cut off) rather
// than by its own departure. A departure deletes the member key in the
// transaction that writes the map without it (see depart.go in package
// rink): the map key changes at the revision the member key is deleted
// at. When the member key went alone (prev already shows it gone, or the
// map key did not change at that revision) the lease ended, and the
// leader dropped the member later. A member the map dropped while its key
// remained left too (with a warm-up, say). When etcd's history cannot
// tell (compacted, unreachable) it says the member left.
func leaseEnded(ctx context.Context, cli *clientv3.Client, timeout time.Duration, rinkName, member string, prev, next rink.State) bool {
	for _, m := range prev.Members {
		if m.Name == member && !m.Live {
			return true // its key had gone before the map dropped it
		}
	}
	if prev.Revision <= 0 || next.Revision <= prev.Revision {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key, mapKey := "rink/"+rinkName+"/members/"+member, "rink/"+rinkName+"/map"
	present := func(rev int64) (bool, error) {
		resp, err := cli.Get(ctx, key, clientv3.WithRev(rev), clientv3.WithCountOnly())
		if err != nil {
			return false, err
		}
		return resp.Count > 0, nil
	}
	if there, err := present(next.Revision); err != nil || there {
		return false
	}
	// The key was there at prev's revision and not at next's: find the
	// revision it was deleted at.
	lo, hi := prev.Revision, next.Revision
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		there, err := present(mid)
		if err != nil {
			return false
		}
		if there {
			lo = mid
		} else {
			hi = mid
		}
	}
	resp, err := cli.Get(ctx, mapKey, clientv3.WithRev(hi))
	if err != nil {
		return false
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != hi
}
