package rink

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
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
	cli := newClient(t, endpoint)
	rc, err := cli.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	f.Close()
	ms = append(ms, join(t, newClient(t, endpoint), name, append(opts, WithMemberName("m3"))...))
	if err := ms[1].Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	live := []*Rink{ms[0], ms[2], ms[3]}
	eventually(t, 10*time.Second, "m3 ranked", func() bool { return ms[3].Rank().Index >= 0 && ms[0].Rank().Size == 3 })
	settle(t, h, live...)

	// Restore it in place of the running node, with revisions bumped.
	e.Close()
	restored := filepath.Join(dir, "restored")
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
	t0 := time.Now()
	e = startEtcdAt(t, restored, client, peer)

	eventually(t, 30*time.Second, "the live members ranked and holding every slot again", func() bool {
		m := ms[0].owners.Load()
		if m == nil || len(m.Members) != 3 {
			return false
		}
		for _, r := range live {
			if r.Rank().Index < 0 || r.Rank().Version != m.Version {
				return false
			}
		}
		held := h.holders()
		for s := 0; s < m.Slots; s++ {
			if got := held[s]; len(got) != 1 || got[0] != m.owner(s) {
				return false
			}
		}
		return true
	})
	t.Logf("serving again %v after the restored etcd started", time.Since(t0).Round(time.Millisecond))
	h.check(t)
}
