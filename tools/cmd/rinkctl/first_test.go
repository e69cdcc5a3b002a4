package main

// Tests of issue 44 ("a newcomer's first hour"): rinkctl etcd, rm, the
// status fixes, etcdctl's environment, crashes in watch, and connection
// errors that come back at once.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/internal/testutil"
)

func startEtcd(t *testing.T) string {
	t.Helper()
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.Endpoint()
}

func client(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestEtcdCommand starts 'rinkctl etcd' on a free port, uses it, refuses a
// second one on the same data directory, stops it as SIGINT would, and
// finds the data again at the next start.
func TestEtcdCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	start := func() (string, func() (int, string)) {
		var out testutil.Buffer
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan int)
		go func() { done <- run(ctx, []string{"etcd", "--data-dir", dir, "--listen", "127.0.0.1:0"}, &out, &out) }()
		var ep string
		testutil.Eventually(t, 30*time.Second, "etcd serving", func() bool {
			m := regexp.MustCompile(`(?m)^endpoint: (\S+)$`).FindStringSubmatch(out.String())
			if m != nil {
				ep = m[1]
			}
			return m != nil
		})
		if !strings.Contains(out.String(), "export ETCDCTL_ENDPOINTS="+ep+"\n") || !strings.Contains(out.String(), "data in "+dir) {
			t.Errorf("etcd printed\n%s", out.String())
		}
		return ep, func() (int, string) { stop(); return <-done, out.String() }
	}
	ep, stop := start()
	cli := client(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "rink/kept/map", `{"version":1}`); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := rinkctl(t, "list", "--endpoints", ep); code != 0 || !strings.Contains(out, "kept") {
		t.Fatalf("list against rinkctl etcd: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := rinkctl(t, "etcd", "--data-dir", dir, "--listen", "127.0.0.1:0"); code != exitError || !strings.Contains(errOut, "in use by another rinkctl etcd") {
		t.Fatalf("a second etcd on the same directory: exit %d, %q", code, errOut)
	}
	if code, out := stop(); code != 0 || !strings.Contains(out, "etcd stopped; its data stays in "+dir) {
		t.Fatalf("stopping: exit %d\n%s", code, out)
	}
	ep, stop = start()
	defer stop()
	if code, out, errOut := rinkctl(t, "list", "--endpoints", ep); code != 0 || !strings.Contains(out, "kept") {
		t.Fatalf("list after a restart: %d %q %q", code, out, errOut)
	}
}

// TestRefusedAtOnce: with nothing listening at the endpoint, every command
// says so, naming the endpoint and the cause, well before the dial timeout.
func TestRefusedAtOnce(t *testing.T) {
	dead, err := embedetcd.FreeURL()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"status", "x"}, {"owner", "x", "r"}, {"watch", "x"}, {"rm", "x"}} {
		began := time.Now()
		code, _, errOut := rinkctl(t, append(args, "--endpoints", dead.Host, "--dial-timeout", "5s")...)
		took := time.Since(began)
		if code != exitBadConnection || !strings.Contains(errOut, "cannot reach etcd at "+dead.Host) || !strings.Contains(errOut, "connection refused") || took > time.Second {
			t.Errorf("%v: exit %d after %v, %q; want exit 2 at once, naming %s and the refusal", args, code, took, errOut, dead.Host)
		}
	}
}

// TestEnvironment: etcdctl's variables stand in for the flags, and a flag
// wins over its variable.
func TestEnvironment(t *testing.T) {
	srv, p := tlsEtcd(t)
	dead, _ := embedetcd.FreeURL()
	t.Setenv("ETCDCTL_ENDPOINTS", "https://"+srv.Endpoint())
	t.Setenv("ETCDCTL_CACERT", p("ca.pem"))
	t.Setenv("ETCDCTL_CERT", p("client.pem"))
	t.Setenv("ETCDCTL_KEY", p("client-key.pem"))
	if code, out, errOut := rinkctl(t, "list"); code != 0 || !strings.Contains(out, "RINK") {
		t.Fatalf("list from the environment: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := rinkctl(t, "list", "--endpoints", dead.Host); code != exitBadConnection || !strings.Contains(errOut, dead.Host) {
		t.Fatalf("--endpoints over ETCDCTL_ENDPOINTS: %d %q", code, errOut)
	}
	// Without the CA the server's certificate is unknown, unless told to
	// skip the check.
	t.Setenv("ETCDCTL_CACERT", "")
	if code, _, errOut := rinkctl(t, "list"); code != exitBadConnection || !strings.Contains(errOut, "certificate") {
		t.Fatalf("list without the CA: %d %q", code, errOut)
	}
	if code, _, errOut := rinkctl(t, "list", "--insecure-skip-tls-verify"); code != 0 {
		t.Fatalf("list --insecure-skip-tls-verify: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "true")
	if code, _, errOut := rinkctl(t, "list"); code != 0 {
		t.Fatalf("list with ETCDCTL_INSECURE_SKIP_TLS_VERIFY: %d %q", code, errOut)
	}
	if code, _, errOut := rinkctl(t, "list", "--insecure-skip-tls-verify=false"); code != exitBadConnection {
		t.Fatalf("--insecure-skip-tls-verify=false over the variable: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "maybe")
	if code, _, errOut := rinkctl(t, "list"); code != exitBadArgs || !strings.Contains(errOut, "ETCDCTL_INSECURE_SKIP_TLS_VERIFY") {
		t.Fatalf("a bad ETCDCTL_INSECURE_SKIP_TLS_VERIFY: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "")
	t.Setenv("ETCDCTL_DIAL_TIMEOUT", "0s")
	if code, _, errOut := rinkctl(t, "list"); code != exitBadArgs || !strings.Contains(errOut, "--dial-timeout 0s") {
		t.Fatalf("ETCDCTL_DIAL_TIMEOUT=0s: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_CACERT", p("ca.pem"))
	if code, _, errOut := rinkctl(t, "list", "--dial-timeout", "3s"); code != 0 {
		t.Fatalf("--dial-timeout over ETCDCTL_DIAL_TIMEOUT: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_DIAL_TIMEOUT", "soon")
	if code, _, errOut := rinkctl(t, "list"); code != exitBadArgs || !strings.Contains(errOut, "ETCDCTL_DIAL_TIMEOUT") {
		t.Fatalf("ETCDCTL_DIAL_TIMEOUT=soon: %d %q", code, errOut)
	}
}

// TestAuth: --user name:password, --user name --password p, and their
// variables; a wrong password is etcd's refusal, exit 2.
func TestAuth(t *testing.T) {
	ep := startEtcd(t)
	cli := client(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "sesame"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"--user", "root:sesame"}, {"--user", "root", "--password", "sesame"}} {
		if code, _, errOut := rinkctl(t, append([]string{"list", "--endpoints", ep}, args...)...); code != 0 {
			t.Errorf("list %v: %d %q", args, code, errOut)
		}
	}
	if code, _, errOut := rinkctl(t, "list", "--endpoints", ep, "--user", "root:open"); code != exitBadConnection || !strings.Contains(errOut, "authentication failed") || !strings.Contains(errOut, ep) {
		t.Errorf("a wrong password: %d %q", code, errOut)
	}
	if code, _, errOut := rinkctl(t, "list", "--endpoints", ep, "--user", "root"); code != exitBadArgs {
		t.Errorf("--user without a password: %d %q", code, errOut)
	}
	t.Setenv("ETCDCTL_USER", "root")
	t.Setenv("ETCDCTL_PASSWORD", "sesame")
	if code, _, errOut := rinkctl(t, "list", "--endpoints", ep); code != 0 {
		t.Errorf("list with ETCDCTL_USER and ETCDCTL_PASSWORD: %d %q", code, errOut)
	}
	if code, _, errOut := rinkctl(t, "list", "--endpoints", ep, "--password", "open"); code != exitBadConnection {
		t.Errorf("--password over ETCDCTL_PASSWORD: %d %q", code, errOut)
	}
}

// TestNoSuchRink: status and owner of a name under which only a nested
// rink has keys say there is no such rink, and name the nested one.
func TestNoSuchRink(t *testing.T) {
	ep := startEtcd(t)
	r := member(t, ep, "a/b", "m0")
	testutil.Eventually(t, 10*time.Second, "m0 ranked", func() bool { return r.Rank().Index == 0 })
	for _, args := range [][]string{{"status", "a"}, {"owner", "a", "r"}, {"rm", "a"}} {
		code, out, errOut := rinkctl(t, append(args, "--endpoints", ep)...)
		if code != exitError || !strings.Contains(errOut, `no rink named "a"; rinks under that name: a/b`) || out != "" {
			t.Errorf("%v: exit %d, %q, %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := rinkctl(t, "status", "a/b", "--endpoints", ep); code != 0 {
		t.Errorf("status a/b: %d %q", code, errOut)
	}
}

// TestRm: rm refuses a rink with a live member, or with a live lease its
// map records; retires a dead one, which then leaves list and lets a rink
// nested under its name start; and never deletes another rink's keys.
func TestRm(t *testing.T) {
	ep := startEtcd(t)
	cli := client(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := member(t, ep, "dead", "m0")
	testutil.Eventually(t, 10*time.Second, "m0 ranked", func() bool { return m.Rank().Index == 0 })
	other := member(t, ep, "deadx", "x0")
	testutil.Eventually(t, 10*time.Second, "x0 ranked", func() bool { return other.Rank().Index == 0 })
	// A key of another rink under dead's prefix (rinks of such names
	// cannot both start, but etcd holds what it is given).
	if _, err := cli.Put(ctx, "rink/dead/inner/map", "{}"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := rinkctl(t, "rm", "dead", "--endpoints", ep); code != exitError || !strings.Contains(errOut, "live members: m0 (lease") {
		t.Fatalf("rm with a live member: %d %q", code, errOut)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, _ := rinkctl(t, "list", "--endpoints", ep)
	if code != 0 || !regexp.MustCompile(`(?m)^dead +0 +\d+ +\(no live member\)$`).MatchString(out) {
		t.Fatalf("list shows the dead rink as\n%s", out)
	}
	if _, err := rink.New(cli, "dead/x"); err == nil {
		t.Fatal("New(dead/x) beside a dead rink dead: want the nesting error")
	}
	code, out, errOut := rinkctl(t, "rm", "dead", "--endpoints", ep)
	if code != 0 || !regexp.MustCompile(`^rink dead retired: \d+ keys deleted\n$`).MatchString(out) {
		t.Fatalf("rm dead: %d %q %q", code, out, errOut)
	}
	left, err := cli.Get(ctx, "rink/dead", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range left.Kvs {
		if !strings.HasPrefix(string(kv.Key), "rink/deadx/") {
			keys = append(keys, string(kv.Key))
		}
	}
	if fmt.Sprint(keys) != "[rink/dead/inner/map]" || len(left.Kvs) < 3 {
		t.Fatalf("after rm dead: %v left beside deadx's keys, %d in all; want only rink/dead/inner/map and deadx's", keys, len(left.Kvs))
	}
	if code, out, _ := rinkctl(t, "list", "--endpoints", ep); code != 0 || regexp.MustCompile(`(?m)^dead `).MatchString(out) {
		t.Fatalf("list after rm:\n%s", out)
	}
	if _, err := cli.Delete(ctx, "rink/dead/inner/map"); err != nil {
		t.Fatal(err)
	}
	n, err := rink.New(cli, "dead/x", rink.WithSessionTTL(2*time.Second))
	if err != nil {
		t.Fatalf("New(dead/x) after rm dead: %v", err)
	}
	n.Shutdown(ctx)
	if code, _, errOut := rinkctl(t, "rm", "nope", "--endpoints", ep); code != exitError || !strings.Contains(errOut, `no rink named "nope"`) {
		t.Fatalf("rm nope: %d %q", code, errOut)
	}

	// A live lease the map records, with no member key: a member cut off
	// from etcd may still hold roles until it ends.
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "rink/ghost/map", fmt.Sprintf(`{"schema":4,"version":3,"slots":1,"members":["g0"],"table":[0],"leases":[%d]}`, lease.ID)); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := rinkctl(t, "rm", "ghost", "--endpoints", ep); code != exitError || !strings.Contains(errOut, fmt.Sprintf("g0 (lease %x", int64(lease.ID))) {
		t.Fatalf("rm with a live recorded lease: %d %q", code, errOut)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := rinkctl(t, "rm", "ghost", "--endpoints", ep, "-w", "json"); code != 0 || !strings.Contains(out, `"deleted": 1`) {
		t.Fatalf("rm ghost once its lease ended: %d %q %q", code, out, errOut)
	}
}

// TestRmGuard: a member key written after rm read the rink makes the
// deletion fail, and nothing is deleted.
func TestRmGuard(t *testing.T) {
	ep := startEtcd(t)
	cli := client(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "rink/late/map", "{}")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(context.Background(), lease.ID)
	if _, err := cli.Put(ctx, "rink/late/members/newcomer", "{}", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	g := &globals{endpoints: []string{ep}, dialTimeout: 5 * time.Second}
	if n, ok, err := g.deleteOwn(ctx, cli, "late", put.Header.Revision); err != nil || ok || n != 0 {
		t.Fatalf("deleteOwn at the revision before the join: %d, %v, %v; want no deletion", n, ok, err)
	}
	resp, err := cli.Get(ctx, "rink/late/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 2 {
		t.Fatalf("after the failed deletion: %v keys, %v; want both", resp.Count, err)
	}
}

// TestWatchTellsCrashFromLeave: a member that shuts down "left"; one whose
// etcd client is closed under it (a crash: its lease expires) "lease
// ended".
func TestWatchTellsCrashFromLeave(t *testing.T) {
	ep := startEtcd(t)
	var ms []*rink.Rink
	var clis []*clientv3.Client
	for i := range 3 {
		cli := client(t, ep)
		r, err := rink.New(cli, "w", rink.WithMemberName(fmt.Sprint("w", i)), rink.WithSessionTTL(2*time.Second), rink.WithRebalanceDelay(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Shutdown(context.Background()) })
		ms, clis = append(ms, r), append(clis, cli)
		testutil.Eventually(t, 10*time.Second, "ranked", func() bool { return r.Rank().Index >= 0 })
	}
	var wout testutil.Buffer
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- run(wctx, []string{"watch", "w", "--endpoints", ep}, &wout, &wout) }()
	defer func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("watch: exit %d\n%s", code, wout.String())
		}
	}()
	testutil.Eventually(t, 10*time.Second, "watch started", func() bool { return strings.Contains(wout.String(), "watching: 3 ranked") })
	if err := ms[2].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "w2 left", func() bool { return strings.Contains(wout.String(), "w2 left") })
	clis[1].Close() // w1 crashes: nothing renews its lease
	testutil.Eventually(t, 15*time.Second, "w1's lease ended", func() bool {
		return strings.Contains(wout.String(), "w1's lease ended (crashed or cut off)")
	})
	if strings.Contains(wout.String(), "w1 left") || strings.Contains(wout.String(), "w2's lease ended") {
		t.Errorf("watch:\n%s", wout.String())
	}
	t.Logf("watch:\n%s", wout.String())
}

// TestSettledLine: what status's second line says of a rink at rest above
// its load tolerance, within it, and of a rink with no members.
func TestSettledLine(t *testing.T) {
	live := []rink.MemberState{{Name: "a", Live: true, Ack: 4}, {Name: "b", Live: true, Ack: 4}}
	tests := []struct {
		name string
		s    rink.State
		want string
	}{
		{"at rest above the tolerance", rink.State{Rink: "r", Version: 4, Members: live, Settled: true, ByLoad: true, Imbalance: 1.5, Tolerance: 0.1},
			"settled: yes, nothing moves until members, awaited roles or load change; load imbalance 1.50, above the tolerance 1.10, but no slot's move would lower the most loaded member's load (or a member has not reported its load yet), so load rounds move nothing"},
		{"at rest within the tolerance", rink.State{Rink: "r", Version: 4, Members: live, Settled: true, ByLoad: true, Imbalance: 1.04, Tolerance: 0.1},
			"settled: yes, nothing moves until members, awaited roles or load change; load imbalance 1.04, within the tolerance 1.10"},
		{"a load round to come", rink.State{Rink: "r", Version: 4, Members: live, LoadRound: true, ByLoad: true, Imbalance: 1.5, Tolerance: 0.1},
			"settled: no (a load round will move slots); load imbalance 1.50, above the tolerance 1.10"},
		{"no members", rink.State{Rink: "r", Version: 4}, "settled: no members (nobody is ranked, waiting or joining: nothing holds a role)"},
		{"every member gone", rink.State{Rink: "r", Version: 4, Members: []rink.MemberState{{Name: "a"}}, Waiting: []rink.WaitingState{{Name: "b"}}},
			"settled: no live member (2 listed by the map, none with a member key: nothing holds a role; rinkctl rm r retires the rink once their leases have ended)"},
		{"by count", rink.State{Rink: "r", Version: 4, Members: live, Settled: true}, "settled: yes, nothing moves until members, awaited roles or load change"},
	}
	for _, tt := range tests {
		if got := settledLine(tt.s); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestDialUnix: dialOne takes etcd's unix endpoints in both forms clientv3
// takes ("unix:path" and "unix://path").
func TestDialUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, ep := range []string{"unix:" + path, "unix://" + path} {
		if err := dialOne(context.Background(), ep, nil, time.Second, false); err != nil {
			t.Errorf("%s: %v", ep, err)
		}
	}
	if err := dialOne(context.Background(), "unix:"+path+".none", nil, time.Second, false); err == nil {
		t.Error("a unix socket that does not exist answered")
	}
}
