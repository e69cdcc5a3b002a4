package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

func listCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the rinks in etcd, with their members and map versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cli, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			if _, err := g.probe(cmd.Context(), cli, "rink/"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.dialTimeout)
			defer cancel()
			resp, err := cli.Get(ctx, "rink/", clientv3.WithPrefix())
			if err != nil {
				return g.failed(cmd.Context(), err)
			}
			type entry struct {
				Name    string `json:"name"`
				Members int    `json:"members"`
				Version int64  `json:"version"`
				Leader  string `json:"leader"`
			}
			found := map[string]*entry{}
			oldest := map[string]int64{} // rink -> create revision of its oldest candidate
			for _, kv := range resp.Kvs {
				name, rest, ok := splitRinkKey(string(kv.Key))
				if !ok || rink.ValidRinkName(name) != nil || stray(rest, kv) {
					continue
				}
				e := found[name]
				if e == nil {
					e = &entry{Name: name}
					found[name] = e
				}
				switch {
				case strings.HasPrefix(rest, "members/"):
					e.Members++
				case strings.HasPrefix(rest, "election/"):
					if o, ok := oldest[name]; !ok || kv.CreateRevision < o {
						oldest[name], e.Leader = kv.CreateRevision, string(kv.Value)
						if rink.ValidMemberName(e.Leader) != nil {
							e.Leader = ""
						}
					}
				case rest == "map":
					var m struct {
						Version int64 `json:"version"`
					}
					_ = json.Unmarshal(kv.Value, &m)
					e.Version = m.Version
				}
			}
			list := make([]*entry, 0, len(found))
			for _, e := range found {
				list = append(list, e)
			}
			sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RINK\tMEMBERS\tVERSION\tLEADER")
			for _, e := range list {
				leader := orNone(e.Leader)
				if e.Members == 0 {
					leader = "(no live member)" // (rinkctl rm retires it)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.Name, e.Members, e.Version, leader)
			}
			return tw.Flush()
		},
	}
}

// stray reports whether a rink-relative key is one that members ignore (an
// operator's stray key): a member key whose name no member can have, or an
// election key that no campaign made (campaigns name it by the lease it is
// bound to).
func stray(rest string, kv *mvccpb.KeyValue) bool {
	if m, ok := strings.CutPrefix(rest, "members/"); ok {
		return rink.ValidMemberName(m) != nil
	}
	if l, ok := strings.CutPrefix(rest, "election/"); ok {
		return kv.Lease == 0 || l != fmt.Sprintf("%x", kv.Lease)
	}
	return false
}

// splitRinkKey splits "rink/<name>/<rest>" into the rink's name and the
// rink-relative key: "map", "members/<member>" or "election/<lease>". It
// reads from the right, since rink names may contain '/' while member names
// and leases do not.
func splitRinkKey(key string) (name, rest string, ok bool) {
	key, found := strings.CutPrefix(key, "rink/")
	if !found {
		return "", "", false
	}
	if n, isMap := strings.CutSuffix(key, "/map"); isMap && n != "" {
		return n, "map", true
	}
	i := strings.LastIndexByte(key, '/')
	if i <= 0 {
		return "", "", false
	}
	j := strings.LastIndexByte(key[:i], '/')
	if j <= 0 {
		return "", "", false
	}
	switch key[j+1 : i] {
	case "members", "election":
		return key[:j], key[j+1:], true
	}
	return "", "", false
}
