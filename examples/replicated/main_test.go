package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/internal/testutil"
)

// TestReplicated runs the story on an embedded etcd — 6 members in 3
// zones, 2 replicas per slot, 16 tenants under writes, a crash and then a
// zone loss — and checks what it returns, apart from run's own checks:
// every tenant lost with its primary was taken over by a member that held
// it as a secondary before the loss, outside the lost zone, with every
// acknowledged update already in its copy; and no tenant had two
// primaries at once.
func TestReplicated(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{endpoints: srv.Endpoint(), members: 6, zones: 3, replicas: 2, tenants: 16, rate: 200, ttl: 2 * time.Second}
	res, err := run(ctx, &out, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	}()

	if len(res.crash) == 0 || len(res.zoneLoss) == 0 {
		t.Fatalf("%d tenants lost in the crash, %d in the zone loss: want some in each", len(res.crash), len(res.zoneLoss))
	}
	check := func(phase string, fs []failover) {
		for _, f := range fs {
			to := f.to
			switch {
			case f.acked == 0:
				t.Errorf("%s: %s: no write acknowledged before the loss", phase, f.tenant)
			case !to.Promoted:
				t.Errorf("%s: %s taken over cold by %s; its secondaries before the loss: %v", phase, f.tenant, to.member.name, f.secondaries)
			case !slices.Contains(f.secondaries, to.member.name):
				t.Errorf("%s: %s taken over by %s, a secondary chosen after the loss began, not by one of its secondaries before it, %v", phase, f.tenant, to.member.name, f.secondaries)
			case to.Warm < f.acked:
				t.Errorf("%s: %s taken over by %s with %d updates in its copy; %d were acknowledged before the loss", phase, f.tenant, to.member.name, to.Warm, f.acked)
			}
		}
	}
	check("crash", res.crash)
	check("zone loss", res.zoneLoss)
	for _, f := range res.zoneLoss {
		if f.from.zone != res.lostZone || f.to.member.zone == res.lostZone {
			t.Errorf("zone loss of %s: %s moved from %s (%s) to %s (%s)", res.lostZone, f.tenant, f.from.name, f.from.zone, f.to.member.name, f.to.member.zone)
		}
	}

	// Never two primaries: no holding began while another member served
	// the tenant, the holdings' tokens rose, and along each tenant's
	// history of acknowledged writes the tokens rose and each token was
	// one member's.
	last := map[string]int64{}
	for _, tk := range res.takeovers {
		if len(tk.others) > 0 {
			t.Errorf("%s: %s began serving while %v served", tk.Role, tk.member.name, tk.others)
		}
		if tk.Token <= last[tk.Role] {
			t.Errorf("%s: %s began with token %d after token %d", tk.Role, tk.member.name, tk.Token, last[tk.Role])
		}
		last[tk.Role] = tk.Token
	}
	for tenant, as := range res.acks {
		as = slices.Clone(as)
		slices.SortFunc(as, func(a, b ack) int { return int(a.seq - b.seq) })
		writer := map[int64]string{}
		for i, a := range as {
			if i > 0 && (a.seq == as[i-1].seq || a.token < as[i-1].token) {
				t.Errorf("%s: update %d (token %d) after update %d (token %d)", tenant, a.seq, a.token, as[i-1].seq, as[i-1].token)
			}
			if w, ok := writer[a.token]; ok && w != a.member {
				t.Errorf("%s: token %d wrote for %s and %s", tenant, a.token, w, a.member)
			}
			writer[a.token] = a.member
		}
	}

	got := out.String()
	for _, want := range []string{"replicas in distinct zones for 16 of 16 tenants", " crashes ", " is lost: ", "promoted from secondary", "checked: "} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "taken over cold") {
		t.Error("a tenant was taken over cold")
	}
}

func TestBadConfig(t *testing.T) {
	good := config{members: 6, zones: 3, replicas: 2, tenants: 16, rate: 200, ttl: 2 * time.Second}
	for _, change := range []func(*config){
		func(c *config) { c.zones = 1 },
		func(c *config) { c.members = 5 },
		func(c *config) { c.replicas = 1 },
		func(c *config) { c.replicas = 4 },
		func(c *config) { c.tenants = 0 },
		func(c *config) { c.rate = 1 },
		func(c *config) { c.ttl = time.Second },
	} {
		cfg := good
		change(&cfg)
		if _, err := run(context.Background(), &testutil.Buffer{}, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
