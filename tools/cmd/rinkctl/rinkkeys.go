package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// A rink's own keys, relative to its prefix rink/<name>/ (see keys.go in
// package rink): single keys, and ranges under a segment. Rink names may
// hold '/', so rink a/b keeps its keys under rink a's prefix; but no name
// holds a reserved segment (members, election, map, acks, floor, .load,
// .map, .tail), so a key under rink/a/members/ is rink a's and never
// rink a/members's, and these lists pick out rink a's keys alone.
var (
	ownSingles  = []string{"map", "floor", ".map", ".tail"}
	ownSegments = []string{"members/", "election/", "acks/", ".load/"}
)

// ownRanges returns the key ranges (key, end) of rink name's own keys; an
// empty end is a single key.
func ownRanges(name string) [][2]string {
	prefix := "rink/" + name + "/"
	var out [][2]string
	for _, k := range ownSingles {
		out = append(out, [2]string{prefix + k, ""})
	}
	for _, s := range ownSegments {
		out = append(out, [2]string{prefix + s, clientv3.GetPrefixRangeEnd(prefix + s)})
	}
	return out
}

// lookUp reports whether rink name has keys of its own, and if not, the
// rinks whose names begin with name + "/" (rink a/b, when asked for a).
func (g *globals) lookUp(ctx context.Context, cli *clientv3.Client, name string) (exists bool, nested []string, err error) {
	if err := rink.ValidRinkName(name); err != nil {
		return false, nil, usage("%v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	var ops []clientv3.Op
	for _, r := range ownRanges(name) {
		opts := []clientv3.OpOption{clientv3.WithCountOnly()}
		if r[1] != "" {
			opts = append(opts, clientv3.WithRange(r[1]))
		}
		ops = append(ops, clientv3.OpGet(r[0], opts...))
	}
	resp, err := cli.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return false, nil, g.failed(ctx, err)
	}
	for _, r := range resp.Responses {
		if r.GetResponseRange().Count > 0 {
			return true, nil, nil
		}
	}
	under, err := cli.Get(rctx, "rink/"+name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1000))
	if err != nil {
		return false, nil, g.failed(ctx, err)
	}
	seen := map[string]bool{}
	for _, kv := range under.Kvs {
		if n, _, ok := splitRinkKey(string(kv.Key)); ok && strings.HasPrefix(n, name+"/") && !seen[n] {
			seen[n] = true
			nested = append(nested, n)
		}
	}
	sort.Strings(nested)
	return false, nested, nil
}

// noSuchRink says that rink name does not exist, naming the rinks nested
// under its name, if any.
func noSuchRink(name string, nested []string) error {
	if len(nested) == 0 {
		return fmt.Errorf("no rink named %q (see rinkctl list)", name)
	}
	if len(nested) > 5 {
		nested = append(nested[:5:5], "…")
	}
	return fmt.Errorf("no rink named %q; rinks under that name: %s (see rinkctl list)", name, strings.Join(nested, ", "))
}
