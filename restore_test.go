package rink

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcdAt runs a single etcd node with its data in dir, on the given
// client and peer URLs (so that a restored node can take the place of the
// one it replaces).
func startEtcdAt(t *testing.T, dir string, client, peer url.URL) *embed.Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("etcd not ready after 30 s")
	}
	return e
}

// etcd restored from a snapshot taken before later map versions and
// membership changes (issue 10, path 6): the members notice that etcd went
// back, start over, and the rink serves every role again by itself, with no
// role held twice and tokens still rising (the restore bumps revisions, as
// docs/operations.md says it must).
func TestRestoreFromSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	client, peer := freeURL(), freeURL()
	e := startEtcdAt(t, filepath.Join(dir, "data"), client, peer)
	defer func() { e.Close() }()
	endpoint := client.Host

	h := &history{}
	name := rinkName(t)
	opts := []Option{h.hook(), WithSlots(64)}
	var ms []*Rink
	for i := 0; i < 3; i++ {
		ms = append(ms, join(t, newClient(t, endpoint), name, append(opts, WithMemberName(fmt.Sprint("m", i)))...))
	}
	eventually(t, 10*time.Second, "all ranked", func() bool {
		for _, m := range ms {
			if m.Rank().Index < 0 || m.Rank().Size != 3 {
				return false
			}
		}
		return true
	})
	settle(t, h, ms...)

	// Save a snapshot, then move on: a member joins, another leaves.
	snap := saveSnapshot(t, endpoint, dir)
	ms = append(ms, join(t, newClient(t, endpoint), name, append(opts, WithMemberName("m3"))...))
	if err := ms[1].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	live := []*Rink{ms[0], ms[2], ms[3]}
	eventually(t, 10*time.Second, "m3 ranked", func() bool { return ms[3].Rank().Index >= 0 && ms[0].Rank().Size == 3 })
	settle(t, h, live...)

	// Restore it in place of the running node, with revisions bumped.
	e.Close()
	t0 := time.Now()
	e = restoreAt(t, snap, dir, client, peer)

	eventually(t, 30*time.Second, "the live members ranked and holding every slot again", func() bool {
		m := ms[0].ownersNow()
		if m == nil || len(m.Members) != 3 {
			return false
		}
		for _, r := range live {
			if r.Rank().Index < 0 || r.Rank().Version != m.Version {
				return false
			}
		}
		return h.heldAsMapped(m)
	})
	t.Logf("serving again %v after the restored etcd started", time.Since(t0).Round(time.Millisecond))
	h.check(t)
}

// saveSnapshot saves a snapshot of the etcd at endpoint into dir.
func saveSnapshot(t *testing.T, endpoint, dir string) string {
	t.Helper()
	rc, err := newClient(t, endpoint).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	snap := filepath.Join(dir, "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	return snap
}

// restoreAt restores snap as docs/operations.md says (revisions bumped,
// marked compacted) and starts the restored node on client and peer, in
// place of a node the caller has stopped.
func restoreAt(t *testing.T, snap, dir string, client, peer url.URL) *embed.Etcd {
	t.Helper()
	restored, err := os.MkdirTemp(dir, "restored")
	if err != nil {
		t.Fatal(err)
	}
	restored = filepath.Join(restored, "data")
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snap,
		Name:                "default",
		OutputDataDir:       restored,
		PeerURLs:            []string{peer.String()},
		InitialCluster:      "default=" + peer.String(),
		InitialClusterToken: "etcd-cluster",
		RevisionBump:        1_000_000,
		MarkCompacted:       true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return startEtcdAt(t, restored, client, peer)
}

// proxyTo puts an etcd proxy in front of the etcd at endpoint, listening
// on from (a free port when from is empty).
func proxyTo(t testing.TB, endpoint, from string) proxy.Server {
	t.Helper()
	f := url.URL{Scheme: "tcp", Host: from}
	if from == "" {
		f = freeURL()
		f.Scheme = "tcp"
	}
	p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: f, To: url.URL{Scheme: "tcp", Host: endpoint}})
	select {
	case <-p.Ready():
	case err := <-p.Error():
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A restore while members are away (issue 10, path 6, as the storm found
// it). Member a is cut off etcd: it fences, and once its lease expires its
// slots go to b. The snapshot was saved while a's key was still
// there, so the restore brings a's key and lease back, with a's slots in
// the map; b, meanwhile, is cut off too and still acts on the slots it took
// from a, for up to 7/8 of a TTL after its last renewal, and cannot notice
// the restore before it comes back. a comes back first, finds its key
// (resumes) and the map giving it its slots; before the fix it started
// them at once. Now a member that rejoins after a fence starts and
// acknowledges nothing for one TTL (it cannot tell whether etcd was
// restored meanwhile), and a fenced member never revokes its old lease (a
// restored one is live again, and its key is what keeps a's old slots from
// others).
func TestRestoreWhileMembersAway(t *testing.T) {
	t.Parallel()
	// Long enough that b still acts when a comes back.
	const ttl = 6 * time.Second
	dir := t.TempDir()
	client, peer := freeURL(), freeURL()
	e := startEtcdAt(t, filepath.Join(dir, "data"), client, peer)
	defer func() { e.Close() }()
	endpoint := client.Host

	h := &history{}
	name := rinkName(t)
	opts := []Option{h.hook(), WithSlots(32), WithSessionTTL(ttl), WithRebalanceDelay(time.Second)}
	// A member is cut off by closing its proxy (its connections end, as a
	// partition's would time out; the etcd server does not wait for them
	// when it stops) and let back by a proxy on the same port.
	pa, pb := proxyTo(t, endpoint, ""), proxyTo(t, endpoint, "")
	fromA, fromB := strings.TrimPrefix(pa.From(), "tcp://"), strings.TrimPrefix(pb.From(), "tcp://")
	a := join(t, proxyClient(t, pa), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	b := join(t, proxyClient(t, pb), name, append(opts, WithMemberName("b"))...)
	eventually(t, 10*time.Second, "both ranked", func() bool { return b.Rank().Index >= 0 && b.Rank().Size == 2 })
	settle(t, h, a, b)
	ofA := ownedBy(a.ownersNow(), "a")

	// Cut a off; save the snapshot while its key is still there.
	pa.Close()
	snap := saveSnapshot(t, endpoint, dir)
	eventually(t, 4*ttl, "b holds a's slots", func() bool {
		m := b.ownersNow()
		if m == nil || m.Index("a") >= 0 {
			return false
		}
		held := h.holders()
		for s := range ofA {
			if got := held[s]; len(got) != 1 || got[0] == "a" {
				return false
			}
		}
		return true
	})
	// Cut b off too, and restore at once: b acts on a's old slots until it
	// fences.
	tb := time.Now()
	pb.Close()
	e.Close()
	e = restoreAt(t, snap, dir, client, peer)
	t0 := time.Now()
	t.Logf("restored %v after b was cut off", t0.Sub(tb).Round(time.Millisecond))
	proxyTo(t, endpoint, fromA)
	eventually(t, 4*ttl, "a back", func() bool { return rejoinedSince(h, "a", t0) })
	eventually(t, 4*ttl, "b fenced", func() bool { return fencedSince(h, "b", tb) })
	h.check(t)
	proxyTo(t, endpoint, fromB)
	eventually(t, 30*time.Second, "every slot held once again", func() bool { return h.heldAsMapped(b.ownersNow()) })
	h.check(t)
}
