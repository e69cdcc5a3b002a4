package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/testutil"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/embedetcd"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rinkctl runs the command and returns its exit code, stdout and stderr.
func rinkctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mask replaces what changes from run to run (times, revisions, ports).
func mask(s string) string {
	s = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAllString(s, "TIME")
	s = regexp.MustCompile(`\d\d:\d\d:\d\d\.\d{3}`).ReplaceAllString(s, "TIME")
	s = regexp.MustCompile(`"(revision|lineage)": \d+`).ReplaceAllString(s, `"$1": N`)
	s = regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllString(s, "ADDR")
	return s
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	got = mask(got)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
	}
}

func member(t *testing.T, endpoint, rinkName, name string, opts ...rink.Option) *rink.Rink {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := rink.New(cli, rinkName, append([]rink.Option{rink.WithMemberName(name), rink.WithSessionTTL(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown(context.Background())
		cli.Close()
	})
	return r
}

func TestCommands(t *testing.T) {
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ep := srv.Endpoint()
	a := member(t, ep, "orders", "orders-0", rink.WithRebalanceDelay(time.Hour))
	testutil.Eventually(t, 10*time.Second, "orders-0 ranked", func() bool { return a.Rank().Index == 0 })
	b := member(t, ep, "orders", "orders-1")
	testutil.Eventually(t, 10*time.Second, "orders-1 waiting", func() bool { return b.Rank().Waiting })
	c := member(t, ep, "jobs/eu", "jobs-0")
	testutil.Eventually(t, 10*time.Second, "jobs-0 ranked", func() bool { return c.Rank().Index == 0 })
	// The golden output shows acknowledgements: wait until they have landed.
	ocli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ocli.Close()
	ob, err := rink.NewObserver(ocli, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	testutil.Eventually(t, 10*time.Second, "acknowledgements current", func() bool {
		st := ob.State()
		return len(st.Members) == 1 && st.Members[0].Ack == st.Version && len(st.Waiting) == 1
	})

	// Stray keys, as an operator's etcdctl put might leave them: nothing
	// below shows them.
	for k, v := range map[string]string{
		"rink/orders/members/":           "{}",
		"rink/orders/members/bad name":   "{}",
		"rink/orders/election/zzz":       "odd value",
		"rink/orders/election/1":         "",
		"rink/orders/members/election/x": "{}",
		"rink/strays/members/":           "{}",
	} {
		if _, err := ocli.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := rinkctl(t, "list", "--endpoints", ep)
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	golden(t, "list", out)

	code, out, errOut = rinkctl(t, "status", "orders", "--endpoints", ep)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	golden(t, "status", out)

	code, out, _ = rinkctl(t, "status", "orders", "--endpoints", ep, "-w", "json")
	var st statusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Members) != 1 || st.Members[0].Share != 1 || len(st.Waiting) != 1 ||
		st.Protocol != 3 || !slices.Equal(st.Members[0].Protocols, []int{2, 3}) || !slices.Equal(st.Waiting[0].Protocols, []int{2, 3}) {
		t.Fatalf("status -w json: %d %s", code, out)
	}

	code, out, _ = rinkctl(t, "owner", "orders", "BTC/ETH", "partition:42", "--endpoints", ep)
	if code != 0 {
		t.Fatalf("owner: %d", code)
	}
	golden(t, "owner", out)

	// watch: orders-0 leaves; orders-1 is promoted into its index.
	var wout testutil.Buffer
	done := make(chan int)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- run(ctx, []string{"watch", "orders", "--endpoints", ep, "--max-changes", "1"}, &wout, &bytes.Buffer{})
	}()
	testutil.Eventually(t, 10*time.Second, "watch started", func() bool { return strings.Contains(wout.String(), "watching: 1 ranked, 1 waiting, leader orders-0") })
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.Contains(wout.String(), "orders-1 promoted to index 0; orders-0 left; 1024 slots moved") {
		t.Fatalf("watch: %d\n%s", code, wout.String())
	}
}

func TestErrors(t *testing.T) {
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dead, _ := embedetcd.FreeURL()
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown rink", []string{"status", "nope", "--endpoints", srv.Endpoint()}, 1, `no rink named "nope"`},
		{"unreachable etcd", []string{"status", "x", "--endpoints", dead.Host, "--dial-timeout", "300ms"}, 2, "cannot reach etcd at " + dead.Host},
		{"unreachable etcd, list", []string{"list", "--endpoints", dead.Host, "--dial-timeout", "300ms"}, 2, "cannot reach etcd at " + dead.Host},
		{"bad TLS files", []string{"status", "x", "--endpoints", srv.Endpoint(), "--cacert", filepath.Join(dir, "missing.pem")}, 128, "reading TLS files"},
		{"cert without key", []string{"status", "x", "--endpoints", srv.Endpoint(), "--cert", "c.pem"}, 128, "--cert and --key go together"},
		{"bad output format", []string{"list", "--endpoints", srv.Endpoint(), "-w", "yaml"}, 128, `want table or json`},
		{"bad flag value", []string{"list", "--dial-timeout", "soon"}, 128, `invalid argument "soon"`},
		{"zero dial timeout", []string{"list", "--dial-timeout", "0"}, 128, `--dial-timeout 0s: want > 0`},
		{"invalid rink name", []string{"status", "/orders", "--endpoints", srv.Endpoint()}, 128, "invalid name"},
		{"missing argument", []string{"status"}, 128, "accepts 1 arg(s)"},
		{"unknown command", []string{"frobnicate"}, 128, "unknown command"},
		{"empty role", []string{"owner", "x", "", "--endpoints", srv.Endpoint()}, 128, "empty role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := rinkctl(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}

// TestTLS serves etcd over TLS with client certificates made here.
func TestTLS(t *testing.T) {
	srv, p := tlsEtcd(t)
	tlsArgs := []string{"--endpoints", "https://" + srv.Endpoint(), "--cacert", p("ca.pem"), "--cert", p("client.pem"), "--key", p("client-key.pem")}
	code, out, errOut := rinkctl(t, append([]string{"list"}, tlsArgs...)...)
	if code != 0 || !strings.Contains(out, "RINK") {
		t.Fatalf("list over TLS: %d %q %q", code, out, errOut)
	}
	// Without a client certificate the server refuses.
	code, _, _ = rinkctl(t, "list", "--endpoints", "https://"+srv.Endpoint(), "--cacert", p("ca.pem"), "--dial-timeout", "500ms")
	if code == 0 {
		t.Fatal("list without a client certificate succeeded")
	}
}

// newCert writes name.pem and name-key.pem, signed by parent (self-signed
// CA when parent is nil).
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestSplitRinkKey(t *testing.T) {
	tests := []struct{ key, name, rest string }{
		{"rink/orders/map", "orders", "map"},
		{"rink/orders/members/m1", "orders", "members/m1"},
		{"rink/orders/election/6d3a", "orders", "election/6d3a"},
		{"rink/jobs/eu/members/m1", "jobs/eu", "members/m1"},
		{"rink/a/b/map", "a/b", "map"},
		{"rink/a/mapping/members/x", "a/mapping", "members/x"},
	}
	for _, tt := range tests {
		name, rest, ok := splitRinkKey(tt.key)
		if !ok || name != tt.name || rest != tt.rest {
			t.Errorf("splitRinkKey(%q) = %q, %q, %v; want %q, %q", tt.key, name, rest, ok, tt.name, tt.rest)
		}
	}
	for _, bad := range []string{"other/orders/map", "rink/map", "rink/orders", "rink/orders/x/y"} {
		if _, _, ok := splitRinkKey(bad); ok {
			t.Errorf("splitRinkKey(%q) accepted", bad)
		}
	}
}

// TestReplicas: for a rink of two replicas per slot in three zones,
// status shows the replicas per slot and each member's zone, primaries and
// secondaries, owner shows every member holding a role, its owner (the
// primary) first, as members name them, and watch counts a departure's
// moves by replica.
func TestReplicas(t *testing.T) {
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ep := srv.Endpoint()
	const slots = 64
	// One at a time, each at rest before the next joins: the placement is
	// then the same on every run, and so is the golden output.
	var ms []*rink.Rink
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		ms = append(ms, member(t, ep, "replicated", fmt.Sprint("kv-", i), rink.WithReplicas(2), rink.WithSlots(slots), rink.WithZone(zone), rink.WithRebalanceDelay(0)))
		testutil.Eventually(t, 10*time.Second, "the rink at rest", func() bool {
			for _, r := range ms {
				if rk := r.Rank(); !rk.Settled || rk.Size != len(ms) || rk.Version != ms[0].Rank().Version {
					return false
				}
			}
			return true
		})
	}
	ocli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ocli.Close()
	ob, err := rink.NewObserver(ocli, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var st rink.State
	testutil.Eventually(t, 10*time.Second, "the observer sees the rink at rest", func() bool {
		st = ob.State()
		return st.Settled && len(st.Members) == 3 && st.Version == ms[0].Rank().Version
	})

	code, out, errOut := rinkctl(t, "status", "replicated", "--endpoints", ep)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	// The rink is at rest: the command shows the state the observer has.
	var b strings.Builder
	if err := printStatus(&b, st); err != nil || out != b.String() {
		t.Fatalf("status printed\n%s\nthe observer's state prints as\n%s", out, b.String())
	}
	// The golden output, with the version, which depends on how many maps
	// the joins took, set to 9.
	norm := st
	norm.Members = slices.Clone(st.Members)
	for i := range norm.Members {
		if norm.Members[i].Ack == st.Version {
			norm.Members[i].Ack = 9
		}
	}
	norm.Version = 9
	b.Reset()
	if err := printStatus(&b, norm); err != nil {
		t.Fatal(err)
	}
	golden(t, "status_replicas", b.String())

	code, out, _ = rinkctl(t, "status", "replicated", "--endpoints", ep, "-w", "json")
	var sj statusJSON
	if code != 0 || json.Unmarshal([]byte(out), &sj) != nil || sj.Replicas != 2 || sj.Protocol != 4 || len(sj.Members) != 3 {
		t.Fatalf("status -w json: %d %s", code, out)
	}
	primaries, secondaries := 0, 0
	zones := map[string]string{"kv-0": "zone-a", "kv-1": "zone-b", "kv-2": "zone-c"}
	for _, m := range sj.Members {
		if m.Zone != zones[m.Name] {
			t.Errorf("status -w json: %s in zone %q, want %q", m.Name, m.Zone, zones[m.Name])
		}
		primaries += m.Slots
		secondaries += m.Secondaries
	}
	if primaries != slots || secondaries != slots {
		t.Errorf("status -w json: %d slots owned, %d held as secondaries; want %d and %d", primaries, secondaries, slots, slots)
	}

	roles := []string{"BTC/ETH", "partition:42", "tenant:acme"}
	code, out, errOut = rinkctl(t, append([]string{"owner", "replicated", "--endpoints", ep}, roles...)...)
	if code != 0 {
		t.Fatalf("owner: %d %s", code, errOut)
	}
	golden(t, "owner_replicas", out)
	code, out, _ = rinkctl(t, append([]string{"owner", "replicated", "--endpoints", ep, "-w", "json"}, roles...)...)
	var owned []struct {
		Role   string   `json:"role"`
		Owner  string   `json:"owner"`
		Owners []string `json:"owners"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &owned) != nil || len(owned) != len(roles) {
		t.Fatalf("owner -w json: %d %s", code, out)
	}
	for i, o := range owned {
		want, _ := ms[0].Owners(roles[i])
		if o.Role != roles[i] || !slices.Equal(o.Owners, want) || len(want) != 2 || o.Owner != want[0] {
			t.Errorf("owner -w json: %+v; the members say %v", o, want)
		}
	}

	// watch: kv-2 leaves; its primaries go to their secondaries.
	var wout testutil.Buffer
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- run(wctx, []string{"watch", "replicated", "--endpoints", ep}, &wout, &bytes.Buffer{}) }()
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
	testutil.Eventually(t, 10*time.Second, "watch shows the departure by replica", func() bool {
		w := wout.String()
		return strings.Contains(w, "kv-2 left") && strings.Contains(w, "slots promoted from secondaries") && strings.Contains(w, "secondaries moved")
	})
	t.Logf("watch:\n%s", wout.String())
}

// tlsEtcd starts an etcd that serves clients over TLS with client
// certificates made here; p names the PEM files (ca.pem, client.pem,
// client-key.pem, …). It stops when the test ends.
func tlsEtcd(t *testing.T) (srv *embedetcd.Server, p func(string) string) {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	p = func(n string) string { return filepath.Join(dir, n) }
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true, TLS: &embedetcd.TLSFiles{Cert: p("server.pem"), Key: p("server-key.pem"), CA: p("ca.pem")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, p
}
