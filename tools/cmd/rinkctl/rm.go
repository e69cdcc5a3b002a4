package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func rmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Retire a rink that no live member is in: delete its keys",
		Long: `rm retires a rink whose members are all gone: it deletes the rink's own keys
(its map, floor, snapshot and tail, and what is left of its member, election,
acknowledgement and load keys), so that it leaves 'rinkctl list' and no longer
keeps a rink named under it (NAME/x) from starting.

It refuses while any member's lease lives: the lease of a member key, of an
election or acknowledgement key, or one the rink's map records (a member cut
off from etcd may still hold its roles until that lease ends). It deletes
only NAME's own keys, never those of a rink named under it (NAME/x), and
only if none of them changed since it read them: a member that joins
meanwhile makes it fail, and nothing is deleted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			if strings.TrimSpace(name) == "" {
				return usage("an empty rink name")
			}
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			n, err := g.retire(ctx, cli, name)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), struct {
					Rink    string `json:"rink"`
					Deleted int64  `json:"deleted"`
				}{name, n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "rink %s retired: %d keys deleted\n", name, n)
			return err
		},
	}
}

// retire deletes rink name's own keys (see ownRanges) if no lease of its
// members lives, and returns how many it deleted.
func (g *globals) retire(ctx context.Context, cli *clientv3.Client, name string) (int64, error) {
	exists, nested, err := g.lookUp(ctx, cli, name)
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, noSuchRink(name, nested)
	}
	rctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	ranges := ownRanges(name)
	var reads []clientv3.Op
	for _, r := range ranges {
		var opts []clientv3.OpOption
		if r[1] != "" {
			opts = append(opts, clientv3.WithRange(r[1]))
		}
		reads = append(reads, clientv3.OpGet(r[0], opts...))
	}
	resp, err := cli.Txn(rctx).Then(reads...).Commit()
	if err != nil {
		return 0, g.failed(ctx, err)
	}
	rev := resp.Header.Revision
	// Every lease the rink's keys are bound to or its map records, and
	// whom it belongs to, as far as the keys say.
	owners := map[int64][]string{}
	note := func(lease int64, who string) {
		if lease != 0 && !slices.Contains(owners[lease], who) {
			owners[lease] = append(owners[lease], who)
		}
	}
	prefix := "rink/" + name + "/"
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			rest := strings.TrimPrefix(string(kv.Key), prefix)
			who := ""
			if m, ok := strings.CutPrefix(rest, "members/"); ok {
				who = m
			}
			note(kv.Lease, who)
			if rest == "map" || rest == ".map" {
				for lease, m := range mapLeases(kv.Value) {
					note(lease, m)
				}
			}
		}
	}
	leases := make([]int64, 0, len(owners))
	for l := range owners {
		leases = append(leases, l)
	}
	slices.Sort(leases)
	var live []string
	for _, l := range leases {
		lctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
		ttl, err := cli.TimeToLive(lctx, clientv3.LeaseID(l))
		cancel()
		if err != nil {
			return 0, g.failed(ctx, err)
		}
		if ttl.TTL < 0 {
			continue // (etcd answers -1 for a lease it does not have)
		}
		who := strings.Join(slices.DeleteFunc(slices.Clone(owners[l]), func(s string) bool { return s == "" }), ",")
		if who == "" {
			who = "a member"
		}
		live = append(live, fmt.Sprintf("%s (lease %x, %ds left)", who, l, ttl.TTL))
	}
	if len(live) > 0 {
		return 0, fmt.Errorf("rink %q has live members: %s; stop them first (rm retires only a rink that no live member is in)", name, strings.Join(live, "; "))
	}
	n, ok, err := g.deleteOwn(ctx, cli, name, rev)
	if err == nil && !ok {
		err = fmt.Errorf("rink %q changed while rm read it (a member joined, or wrote a key): nothing was deleted; try again", name)
	}
	return n, err
}

// deleteOwn deletes rink name's own keys in one transaction, if none of
// them changed after revision rev (a member joining since adds a key that
// did): ok is false, and nothing is deleted, if one did. Keys that went
// meanwhile (with an ended lease) do not stop it.
func (g *globals) deleteOwn(ctx context.Context, cli *clientv3.Client, name string, rev int64) (n int64, ok bool, err error) {
	var guards []clientv3.Cmp
	var deletes []clientv3.Op
	for _, r := range ownRanges(name) {
		c := clientv3.Compare(clientv3.ModRevision(r[0]), "<", rev+1)
		var opts []clientv3.OpOption
		if r[1] != "" {
			c = c.WithRange(r[1])
			opts = append(opts, clientv3.WithRange(r[1]))
		}
		guards = append(guards, c)
		deletes = append(deletes, clientv3.OpDelete(r[0], opts...))
	}
	dctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	del, err := cli.Txn(dctx).If(guards...).Then(deletes...).Commit()
	if err != nil {
		return 0, false, g.failed(ctx, err)
	}
	if !del.Succeeded {
		return 0, false, nil
	}
	for _, r := range del.Responses {
		n += r.GetResponseDeleteRange().Deleted
	}
	return n, true, nil
}

// mapLeases returns the leases a map key's value records, by lease: a
// whole map's list (aligned with its members), or a change record's
// leases by member name.
func mapLeases(value []byte) map[int64]string {
	var m struct {
		Members json.RawMessage `json:"members"`
		Leases  json.RawMessage `json:"leases"`
	}
	out := map[int64]string{}
	if json.Unmarshal(value, &m) != nil || len(m.Leases) == 0 {
		return out
	}
	var members []string
	_ = json.Unmarshal(m.Members, &members)
	var list []int64
	if json.Unmarshal(m.Leases, &list) == nil {
		for i, l := range list {
			who := ""
			if len(list) == len(members) {
				who = members[i]
			}
			out[l] = who
		}
		return out
	}
	var byName map[string]json.Number
	if json.Unmarshal(m.Leases, &byName) == nil {
		for who, l := range byName {
			if v, err := strconv.ParseInt(string(l), 10, 64); err == nil {
				out[v] = who
			}
		}
	}
	return out
}
