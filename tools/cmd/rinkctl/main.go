// Command rinkctl inspects rinks from a terminal: who is ranked, who waits,
// who leads, who owns a role (with replicas, who holds it as a secondary,
// and in which zones the members are), and what changes. It only reads; it
// never joins a rink. Flags follow etcdctl: --endpoints (or
// ETCDCTL_ENDPOINTS), --cacert/--cert/--key, --user, --dial-timeout,
// -w table|json.
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
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
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

// Exit codes, as etcdctl's.
const (
	exitError         = 1   // something failed (an unknown rink, an unusable answer)
	exitBadConnection = 2   // etcd could not be reached, or refused us (TLS, auth)
	exitBadArgs       = 128 // rinkctl was called wrongly
)

var (
	// errUsage marks errors in how rinkctl was called.
	errUsage = errors.New("usage")
	// errConnection marks failures to reach etcd.
	errConnection = errors.New("cannot reach etcd")
)

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

	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddCommand(listCmd(g), statusCmd(g), ownerCmd(g), watchCmd(g))
	cmd, err := root.ExecuteC()
	if err != nil {
		fmt.Fprintln(errOut, "Error:", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		switch {
		case errors.Is(err, errConnection):
			return exitBadConnection
		case errors.Is(err, errUsage) || cmd == root || strings.Contains(err.Error(), "arg(s)"):
			// cobra reports unknown commands and wrong argument counts
			// without a way to tell them apart other than by text.
			return exitBadArgs
		}
		return exitError
	}
	return 0
}

// usage wraps a mistake in how rinkctl was called.
func usage(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// client connects to etcd as the global flags say.
func (g *globals) client() (*clientv3.Client, error) {
	if g.output != "table" && g.output != "json" {
		return nil, usage("-w %q: want table or json", g.output)
	}
	if g.dialTimeout <= 0 {
		return nil, usage("--dial-timeout %v: want > 0", g.dialTimeout)
	}
	cfg := clientv3.Config{
		Endpoints:   g.endpoints,
		DialTimeout: g.dialTimeout,
		Logger:      zap.NewNop(),
	}
	if g.cacert != "" || g.cert != "" || g.key != "" {
		if (g.cert == "") != (g.key == "") {
			return nil, usage("--cert and --key go together")
		}
		info := transport.TLSInfo{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
		var tc *tls.Config
		var err error
		if tc, err = info.ClientConfig(); err != nil {
			return nil, usage("reading TLS files: %v", err)
		}
		cfg.TLS = tc
	}
	if g.user != "" {
		name, pass, _ := strings.Cut(g.user, ":")
		cfg.Username, cfg.Password = name, pass
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", errConnection, strings.Join(g.endpoints, ","), err)
	}
	return cli, nil
}

// probe makes one small read so that an unreachable etcd, a TLS mismatch or
// a refused login is reported as itself rather than as a timeout later.
func (g *globals) probe(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("%w at %s: %v", errConnection, strings.Join(g.endpoints, ","), err)
	}
	return resp.Count, nil
}

// observe connects and follows one rink; it fails for a rink with no keys
// unless allowEmpty.
func (g *globals) observe(ctx context.Context, name string, allowEmpty bool) (*rink.Observer, func(), error) {
	if strings.TrimSpace(name) == "" {
		return nil, nil, usage("an empty rink name")
	}
	cli, err := g.client()
	if err != nil {
		return nil, nil, err
	}
	keys, err := g.probe(ctx, cli, "rink/"+name+"/")
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	ob, err := rink.NewObserver(cli, name, rink.WithJoinTimeout(g.dialTimeout))
	if err != nil {
		cli.Close()
		if errors.Is(err, rink.ErrInvalidName) {
			return nil, nil, usage("%v", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("%w at %s: no answer within %v (--dial-timeout)", errConnection, strings.Join(g.endpoints, ","), g.dialTimeout)
		}
		return nil, nil, err
	}
	if keys == 0 && !allowEmpty {
		ob.Close()
		cli.Close()
		return nil, nil, fmt.Errorf("no rink named %q (see rinkctl list)", name)
	}
	return ob, func() { ob.Close(); cli.Close() }, nil
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
			if _, err := g.probe(cmd.Context(), cli, "rink/"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.dialTimeout)
			defer cancel()
			resp, err := cli.Get(ctx, "rink/", clientv3.WithPrefix())
			if err != nil {
				return fmt.Errorf("%w at %s: %v", errConnection, strings.Join(g.endpoints, ","), err)
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
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.Name, e.Members, e.Version, orNone(e.Leader))
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

// statusJSON is the JSON form of a rink's state.
type statusJSON struct {
	Rink     string        `json:"rink"`
	Version  int64         `json:"version"`
	Lineage  int64         `json:"lineage"`
	Revision int64         `json:"revision"`
	Leader   string        `json:"leader"`
	Slots    int           `json:"slots"`
	Replicas int           `json:"replicas,omitempty"` // members holding each slot (rink.WithReplicas), left out when 1
	Protocol int           `json:"protocol"`
	ByLoad   bool          `json:"byLoad"`
	Members  []memberJSON  `json:"members"`
	Waiting  []waitingJSON `json:"waiting"`
	Joining  []string      `json:"joining"`
	MapError string        `json:"mapError,omitempty"`
	// Settled: the rink is at rest (see rink.State.Settled); Announced,
	// LoadRound, Imbalance and Tolerance say what moves are planned.
	Settled   bool    `json:"settled"`
	Announced int     `json:"announced"`
	LoadRound bool    `json:"loadRound"`
	Imbalance float64 `json:"imbalance,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`
}

type memberJSON struct {
	Name  string  `json:"name"`
	Index int     `json:"index"`
	Slots int     `json:"slots"`
	Share float64 `json:"share"`
	Ack   int64   `json:"ack"`
	Live  bool    `json:"live"`
	// Protocols the member speaks (empty when it is gone).
	Protocols []int `json:"protocols"`
	// Capacity is the member's capacity (0 when it is gone).
	Capacity float64 `json:"capacity"`
	// Load is the member's reported load rate (units per second) and
	// Roles the roles it awaits in its slots.
	Load  float64 `json:"load"`
	Roles int     `json:"roles"`
	// Zone is the member's failure domain (rink.WithZone), left out when
	// it names none. Secondaries counts the slots it holds as a secondary
	// (rink.WithReplicas; Slots and Share count those it owns, as
	// primary), left out when there are none.
	Zone        string `json:"zone,omitempty"`
	Secondaries int    `json:"secondaries,omitempty"`
}

type waitingJSON struct {
	Name      string    `json:"name"`
	Since     time.Time `json:"since"`
	Protocols []int     `json:"protocols"`
	Capacity  float64   `json:"capacity"`
	Zone      string    `json:"zone,omitempty"` // (rink.WithZone)
}

func toJSON(s rink.State) statusJSON {
	j := statusJSON{Rink: s.Rink, Version: s.Version, Lineage: s.Lineage, Revision: s.Revision, Leader: s.Leader, Slots: s.Slots, Protocol: s.Protocol, ByLoad: s.ByLoad, MapError: s.MapError,
		Members: []memberJSON{}, Waiting: []waitingJSON{}, Joining: append([]string{}, s.Joining...),
		Settled: s.Settled, Announced: s.Announced, LoadRound: s.LoadRound, Imbalance: s.Imbalance, Tolerance: s.Tolerance}
	if s.Replicas > 1 {
		j.Replicas = s.Replicas
	}
	for _, m := range s.Members {
		j.Members = append(j.Members, memberJSON{Name: m.Name, Index: m.Index, Zone: m.Zone, Slots: m.Slots, Secondaries: m.Secondaries,
			Share: float64(m.Slots) / float64(max(s.Slots, 1)), Ack: m.Ack, Live: m.Live, Protocols: append([]int{}, m.Protocols...),
			Capacity: m.Capacity, Load: m.Load, Roles: m.Roles})
	}
	for _, w := range s.Waiting {
		j.Waiting = append(j.Waiting, waitingJSON{Name: w.Name, Zone: w.Zone, Since: w.Since, Protocols: append([]int{}, w.Protocols...), Capacity: w.Capacity})
	}
	return j
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show a rink's members, indexes, waiting members, leader, version and slot shares",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeAll, err := g.observe(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), toJSON(s))
			}
			return printStatus(cmd.OutOrStdout(), s)
		},
	}
}

// printStatus writes a rink's state as the status command's table. A rink
// of more than one replica per slot says so in its first line, and its
// table has a column of each member's secondaries (SLOTS and SHARE count
// the slots it owns, as primary); a ZONE column appears when the rink has
// replicas or any member names a zone. A rink of one replica with no
// zones prints as it did before replicas, so that scripts reading the
// table are not broken by a release that adds them.
func printStatus(w io.Writer, s rink.State) error {
	balance := "by count"
	if s.ByLoad {
		balance = "by load"
	}
	replicated := s.Replicas > 1
	slots := fmt.Sprintf("%d slots", s.Slots)
	if replicated {
		slots += fmt.Sprintf(" (%d replicas each)", s.Replicas)
	}
	fmt.Fprintf(w, "rink %s: version %d, protocol %d, leader %s, %d ranked, %d waiting, %s balanced %s\n",
		s.Rink, s.Version, s.Protocol, orNone(s.Leader), len(s.Members), len(s.Waiting)+len(s.Joining), slots, balance)
	fmt.Fprintln(w, settledLine(s))
	if s.MapError != "" {
		fmt.Fprintf(w, "THE MAP IN ETCD CANNOT BE USED (%s): members hold no roles; below is the last usable map\n", s.MapError)
	}
	zoned := replicated
	for _, m := range s.Members {
		zoned = zoned || m.Zone != ""
	}
	for _, wt := range s.Waiting {
		zoned = zoned || wt.Zone != ""
	}
	// cells returns a row's cells, the replicas' columns (zone after the
	// member, secondaries after its slots) only when the rink shows them.
	cells := func(index, name, zone, slots, secondaries string, rest ...string) string {
		row := []string{index, name}
		if zoned {
			row = append(row, zone)
		}
		row = append(row, slots)
		if replicated {
			row = append(row, secondaries)
		}
		return strings.Join(append(row, rest...), "\t") + "\n"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, cells("INDEX", "MEMBER", "ZONE", "SLOTS", "SECONDARIES", "SHARE", "CAPACITY", "LOAD/S", "ROLES", "ACK", "PROTOCOLS", "STATE"))
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
		fmt.Fprint(tw, cells(strconv.Itoa(m.Index), m.Name, orDash(m.Zone), strconv.Itoa(m.Slots), strconv.Itoa(m.Secondaries),
			fmt.Sprintf("%.1f%%", 100*float64(m.Slots)/float64(max(s.Slots, 1))), capacity(m.Capacity), strconv.FormatFloat(m.Load, 'g', 4, 64),
			strconv.Itoa(m.Roles), strconv.FormatInt(m.Ack, 10), protocols(m.Protocols), state))
	}
	for _, wt := range s.Waiting {
		fmt.Fprint(tw, cells("-", wt.Name, orDash(wt.Zone), "0", "0", "0.0%", capacity(wt.Capacity), "-", "-", "-", protocols(wt.Protocols),
			"waiting since "+wt.Since.UTC().Format(time.RFC3339)))
	}
	for _, name := range s.Joining {
		fmt.Fprint(tw, cells("-", name, "-", "0", "0", "0.0%", "-", "-", "-", "-", "-", "joining"))
	}
	return tw.Flush()
}

// settledLine says whether the rink is at rest, and if not, what moves
// are planned or pending.
func settledLine(s rink.State) string {
	balance := ""
	if s.Tolerance > 0 || s.Imbalance > 0 {
		balance = fmt.Sprintf("; imbalance %.2f, tolerance %.2f", s.Imbalance, 1+s.Tolerance)
	}
	if s.Settled {
		return "settled: yes, nothing moves until members, awaited roles or load change" + balance
	}
	var why []string
	if n := len(s.Waiting) + len(s.Joining); n > 0 {
		why = append(why, fmt.Sprintf("%d to be ranked", n))
	}
	if s.Announced > 0 {
		why = append(why, fmt.Sprintf("%d slots announced to warming heirs", s.Announced))
	}
	if s.LoadRound {
		why = append(why, "a load round will move slots")
	}
	for _, m := range s.Members {
		if !m.Live {
			why = append(why, "a gone member to replace")
			break
		}
	}
	for _, m := range s.Members {
		if m.Live && m.Ack != s.Version {
			why = append(why, "acknowledgements pending")
			break
		}
	}
	if len(why) == 0 {
		why = append(why, "the leader has not said it is at rest")
	}
	return "settled: no (" + strings.Join(why, ", ") + ")" + balance
}

// capacity prints a member's capacity, "-" when it is gone.
func capacity(c float64) string {
	if c == 0 {
		return "-"
	}
	return strconv.FormatFloat(c, 'g', 4, 64)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// orDash prints s, or "-" when it is empty (a member that names no zone).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ownerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "owner NAME ROLE...",
		Short: "Show which member owns each role, and with replicas which members hold it as secondaries",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, role := range args[1:] {
				if role == "" {
					return usage("an empty role name")
				}
			}
			ob, closeAll, err := g.observe(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			// With replicas, Owners lists every member holding the
			// role, its owner (the primary) first; a rink of one
			// replica prints, and encodes, as it did before them.
			type owned struct {
				Role   string   `json:"role"`
				Owner  string   `json:"owner"`
				Owners []string `json:"owners,omitempty"`
			}
			replicated := s.Replicas > 1
			var list []owned
			for _, role := range args[1:] {
				o, _ := s.Owner(role)
				e := owned{Role: role, Owner: o}
				if replicated {
					e.Owners, _ = s.Owners(role)
				}
				list = append(list, e)
			}
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			if !replicated {
				fmt.Fprintln(tw, "ROLE\tOWNER")
				for _, o := range list {
					fmt.Fprintf(tw, "%s\t%s\n", o.Role, orNone(o.Owner))
				}
				return tw.Flush()
			}
			fmt.Fprintln(tw, "ROLE\tOWNER\tSECONDARIES")
			for _, o := range list {
				secondaries := "-"
				if len(o.Owners) > 1 {
					secondaries = strings.Join(o.Owners[1:], ",") // the one that has held it longest first
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Role, orNone(o.Owner), secondaries)
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
			ob, closeAll, err := g.observe(cmd.Context(), args[0], true)
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
					words[i] = c.String()
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

// protocols renders a member's protocols ("2", "2,3"), or "-".
func protocols(ps []int) string {
	if len(ps) == 0 {
		return "-"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strconv.Itoa(p)
	}
	return strings.Join(out, ",")
}
