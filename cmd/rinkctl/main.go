// Command rinkctl inspects rinks from a terminal: who is ranked, who waits,
// who leads, who owns a role, and what changes. It only reads; it never
// joins a rink. Flags follow etcdctl: --endpoints (or ETCDCTL_ENDPOINTS),
// --cacert/--cert/--key, --user, --dial-timeout, -w table|json.
//
//	rinkctl list
//	rinkctl status orders
//	rinkctl owner orders BTC/ETH partition:42
//	rinkctl watch orders
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the etcdctl-style flags every command takes.
type globals struct {
	endpoints   []string
	cacert      string
	cert, key   string
	user        string
	dialTimeout time.Duration
	output      string
}

// errUsage marks errors in how rinkctl was called (exit code 2).
var errUsage = errors.New("usage")

// run executes rinkctl with args and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	g := &globals{}
	root := &cobra.Command{
		Use:           "rinkctl",
		Short:         "Inspect rinks (sticky ranked rings) stored in etcd",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetContext(ctx)
	defaultEndpoints := []string{"127.0.0.1:2379"}
	if env := os.Getenv("ETCDCTL_ENDPOINTS"); env != "" {
		defaultEndpoints = strings.Split(env, ",")
	}
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", defaultEndpoints, "etcd endpoints (default from ETCDCTL_ENDPOINTS)")
	pf.StringVar(&g.cacert, "cacert", "", "verify the server's certificate with this CA bundle")
	pf.StringVar(&g.cert, "cert", "", "client certificate for TLS")
	pf.StringVar(&g.key, "key", "", "client key for TLS")
	pf.StringVar(&g.user, "user", "", "username[:password] for authentication")
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for etcd to answer")
	pf.StringVarP(&g.output, "write-out", "w", "table", "output format: table or json")

	root.AddCommand(listCmd(g), statusCmd(g), ownerCmd(g), watchCmd(g))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		if errors.Is(err, errUsage) || strings.Contains(err.Error(), "unknown command") ||
			strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "arg(s)") {
			return 2
		}
		return 1
	}
	return 0
}

// client connects to etcd as the global flags say.
func (g *globals) client() (*clientv3.Client, error) {
	if g.output != "table" && g.output != "json" {
		return nil, fmt.Errorf("%w: -w %q: want table or json", errUsage, g.output)
	}
	cfg := clientv3.Config{
		Endpoints:   g.endpoints,
		DialTimeout: g.dialTimeout,
		Logger:      zap.NewNop(),
	}
	if g.cacert != "" || g.cert != "" || g.key != "" {
		if (g.cert == "") != (g.key == "") {
			return nil, fmt.Errorf("%w: --cert and --key go together", errUsage)
		}
		info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
		var tc *tls.Config
		var err error
		if tc, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("reading TLS files: %w", err)
		}
		cfg.TLS = tc
	}
	if g.user != "" {
		name, pass, _ := strings.Cut(g.user, ":")
		cfg.Username, cfg.Password = name, pass
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", strings.Join(g.endpoints, ","), err)
	}
	return cli, nil
}

// observe connects and follows one rink; it fails for a rink with no keys
// unless allowEmpty.
func (g *globals) observe(name string, allowEmpty bool) (*rink.Observer, func(), error) {
	cli, err := g.client()
	if err != nil {
		return nil, nil, err
	}
	ob, err := rink.NewObserver(cli, name, rink.WithJoinTimeout(g.dialTimeout))
	if err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("etcd at %s did not answer within %v (--dial-timeout)", strings.Join(g.endpoints, ","), g.dialTimeout)
		}
		return nil, nil, err
	}
	closeAll := func() { ob.Close(); cli.Close() }
	if s := ob.State(); !allowEmpty && s.Version == 0 && len(s.Members) == 0 && len(s.Joining) == 0 && s.Leader == "" {
		closeAll()
		return nil, nil, fmt.Errorf("no rink named %q (see rinkctl list)", name)
	}
	return ob, closeAll, nil
}

func (g *globals) json(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func listCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the rinks in etcd, with their members and map versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cli, err := g.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.dialTimeout)
			defer cancel()
			resp, err := cli.Get(ctx, "rink/", clientv3.WithPrefix())
			if err != nil {
				return fmt.Errorf("listing rinks at %s: %w", strings.Join(g.endpoints, ","), err)
			}
			type entry struct {
				Name    string `json:"name"`
				Members int    `json:"members"`
				Version int64  `json:"version"`
				Leader  string `json:"leader"`
			}
			found := map[string]*entry{}
			for _, kv := range resp.Kvs {
				name, rest, ok := splitRinkKey(string(kv.Key))
				if !ok {
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
				case rest == "map":
					var m struct {
						Version int64  `json:"version"`
						Leader  string `json:"leader"`
					}
					_ = json.Unmarshal(kv.Value, &m)
					e.Version, e.Leader = m.Version, m.Leader
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
			fmt.Fprintln(tw, "RINK\tMEMBERS\tVERSION")
			for _, e := range list {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", e.Name, e.Members, e.Version)
			}
			return tw.Flush()
		},
	}
}

// splitRinkKey splits "rink/<name>/<rest>" where rest starts with one of
// the rink's own key kinds; rink names may contain '/'.
func splitRinkKey(key string) (name, rest string, ok bool) {
	key, found := strings.CutPrefix(key, "rink/")
	if !found {
		return "", "", false
	}
	for _, kind := range []string{"/members/", "/election/", "/map"} {
		if i := strings.LastIndex(key, kind); i > 0 && (kind != "/map" || i+len(kind) == len(key)) {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}

// statusJSON is the JSON form of a rink's state.
type statusJSON struct {
	Rink     string        `json:"rink"`
	Version  int64         `json:"version"`
	Lineage  int64         `json:"lineage"`
	Revision int64         `json:"revision"`
	Leader   string        `json:"leader"`
	Slots    int           `json:"slots"`
	Members  []memberJSON  `json:"members"`
	Waiting  []waitingJSON `json:"waiting"`
	Joining  []string      `json:"joining"`
}

type memberJSON struct {
	Name  string  `json:"name"`
	Index int     `json:"index"`
	Slots int     `json:"slots"`
	Share float64 `json:"share"`
	Ack   int64   `json:"ack"`
	Live  bool    `json:"live"`
}

type waitingJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

func toJSON(s rink.State) statusJSON {
	j := statusJSON{Rink: s.Rink, Version: s.Version, Lineage: s.Lineage, Revision: s.Revision, Leader: s.Leader, Slots: s.Slots,
		Members: []memberJSON{}, Waiting: []waitingJSON{}, Joining: append([]string{}, s.Joining...)}
	for _, m := range s.Members {
		j.Members = append(j.Members, memberJSON{m.Name, m.Index, m.Slots, float64(m.Slots) / float64(max(s.Slots, 1)), m.Ack, m.Live})
	}
	for _, w := range s.Waiting {
		j.Waiting = append(j.Waiting, waitingJSON(w))
	}
	return j
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show a rink's members, indexes, waiting members, leader, version and slot shares",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeAll, err := g.observe(args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), toJSON(s))
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "rink %s: version %d, leader %s, %d ranked, %d waiting, %d slots\n",
				s.Rink, s.Version, orNone(s.Leader), len(s.Members), len(s.Waiting)+len(s.Joining), s.Slots)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INDEX\tMEMBER\tSLOTS\tSHARE\tACK\tSTATE")
			for _, m := range s.Members {
				state := "live"
				switch {
				case !m.Live:
					state = "gone (being replaced)"
				case m.Ack != s.Version:
					state = fmt.Sprintf("live, applying (ack %d)", m.Ack)
				}
				if m.Name == s.Leader {
					state += ", leader"
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%.1f%%\t%d\t%s\n", m.Index, m.Name, m.Slots, 100*float64(m.Slots)/float64(max(s.Slots, 1)), m.Ack, state)
			}
			for _, wt := range s.Waiting {
				fmt.Fprintf(tw, "-\t%s\t0\t0.0%%\t-\twaiting since %s\n", wt.Name, wt.Since.UTC().Format(time.RFC3339))
			}
			for _, name := range s.Joining {
				fmt.Fprintf(tw, "-\t%s\t0\t0.0%%\t-\tjoining\n", name)
			}
			return tw.Flush()
		},
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func ownerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "owner NAME ROLE...",
		Short: "Show which member owns each role",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, role := range args[1:] {
				if role == "" {
					return fmt.Errorf("%w: an empty role name", errUsage)
				}
			}
			ob, closeAll, err := g.observe(args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			type owned struct {
				Role  string `json:"role"`
				Owner string `json:"owner"`
			}
			var list []owned
			for _, role := range args[1:] {
				o, _ := s.Owner(role)
				list = append(list, owned{role, o})
			}
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROLE\tOWNER")
			for _, o := range list {
				fmt.Fprintf(tw, "%s\t%s\n", o.Role, orNone(o.Owner))
			}
			return tw.Flush()
		},
	}
}

func watchCmd(g *globals) *cobra.Command {
	var maxChanges int
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Print a line for every change of a rink: joins, promotions, leaves, leader, slots moved",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeAll, err := g.observe(args[0], true)
			if err != nil {
				return err
			}
			defer closeAll()
			w := cmd.OutOrStdout()
			prev := ob.State()
			print := func(s rink.State, what []string) error {
				if g.output == "json" {
					return json.NewEncoder(w).Encode(struct {
						Time    time.Time `json:"time"`
						Version int64     `json:"version"`
						Changes []string  `json:"changes"`
					}{time.Now().UTC(), s.Version, what})
				}
				_, err := fmt.Fprintf(w, "%s v%d %s\n", time.Now().UTC().Format("15:04:05.000"), s.Version, strings.Join(what, "; "))
				return err
			}
			if err := print(prev, []string{fmt.Sprintf("watching: %d ranked, %d waiting, leader %s", len(prev.Members), len(prev.Waiting)+len(prev.Joining), orNone(prev.Leader))}); err != nil {
				return err
			}
			for n := 0; maxChanges <= 0 || n < maxChanges; {
				select {
				case <-prev.Changed():
				case <-cmd.Context().Done():
					return nil
				}
				next := ob.State()
				if what := rink.Diff(prev, next); len(what) > 0 {
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
