package chaos_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/internal/testutil"
	"github.com/rink-go/rink/tools/internal/chaos"
)

// TestWorkers runs two workers through a graceful handover and checks
// their merged logs.
func TestWorkers(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	cfg := func(name string) chaos.WorkerConfig {
		return chaos.WorkerConfig{Endpoints: srv.Endpoint(), Rink: "chaos-test", Name: name, Roles: 16, TTL: 2 * time.Second,
			Delay: 0, Every: 10 * time.Millisecond, Log: filepath.Join(dir, name+".log")}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- chaos.RunWorker(ctxA, cfg("a")) }()
	go func() { errB <- chaos.RunWorker(ctxB, cfg("b")) }()
	acted := func(name string) bool {
		f, err := os.Open(filepath.Join(dir, name+".log"))
		if err != nil {
			return false
		}
		defer f.Close()
		recs, _ := chaos.Parse(f)
		for _, r := range recs {
			if r.Kind == chaos.Act {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, 20*time.Second, "both workers act", func() bool { return acted("a") && acted("b") })
	stopA()
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let b act on a's former roles for a while (not synchronisation)
	stopB()
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	var all []chaos.Record
	for _, name := range []string{"a", "b"} {
		f, err := os.Open(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := chaos.Parse(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	joined := 0
	for _, r := range all {
		if r.Kind == chaos.Joined {
			joined++
		}
	}
	if joined != 2 {
		t.Errorf("%d joined records, want one per worker", joined)
	}
	rep := chaos.Check(all)
	if len(rep.Violations) > 0 || rep.Acquisitions < 17 || rep.Actions == 0 {
		t.Fatalf("report: %d acquisitions, %d actions, violations %v", rep.Acquisitions, rep.Actions, rep.Violations)
	}
}

func TestUnwritableLog(t *testing.T) {
	err := chaos.RunWorker(context.Background(), chaos.WorkerConfig{Name: "a", Roles: 1, Every: time.Millisecond, Log: filepath.Join(t.TempDir(), "no", "such", "dir", "a.log")})
	if err == nil {
		t.Fatal("a worker started without a writable log")
	}
}

// TestWorkersReplicas runs three workers of two replicas in three zones
// through a graceful departure: each records its secondary holdings, and
// their merged logs pass the primaries' and the holders' checks.
func TestWorkersReplicas(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	type worker struct {
		stop context.CancelFunc
		err  chan error
	}
	ws := map[string]worker{}
	for i, name := range names {
		ctx, stop := context.WithCancel(context.Background())
		w := worker{stop, make(chan error, 1)}
		ws[name] = w
		cfg := chaos.WorkerConfig{Endpoints: srv.Endpoint(), Rink: "chaos-replicas", Name: name, Roles: 16, TTL: 2 * time.Second,
			Every: 10 * time.Millisecond, Log: filepath.Join(dir, name+".log"), Replicas: 2, Zone: fmt.Sprint("z", i)}
		go func() { w.err <- chaos.RunWorker(ctx, cfg) }()
	}
	read := func() []chaos.Record {
		var all []chaos.Record
		for _, name := range names {
			f, err := os.Open(filepath.Join(dir, name+".log"))
			if err != nil {
				continue
			}
			recs, _ := chaos.Parse(f)
			f.Close()
			all = append(all, recs...)
		}
		return all
	}
	// Every role has its primary and its secondary, by the logs.
	roles := []string{"leader"}
	for i := range 16 {
		roles = append(roles, fmt.Sprint("partition:", i))
	}
	settled := func() bool {
		recs := read()
		now := chaos.Now()
		alive := func(string, int64) bool { return true }
		return len(chaos.Liveness(0, recs, roles, alive, now, now).Violations) == 0 &&
			len(chaos.SecondaryLiveness(0, recs, roles, alive, now, now, 1).Violations) == 0
	}
	testutil.Eventually(t, 30*time.Second, "every role has a primary and a secondary", settled)
	time.Sleep(100 * time.Millisecond) // let the secondaries act (not synchronisation)
	ws["a"].stop()
	if err := <-ws["a"].err; err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let b and c act on what a held (not synchronisation)
	for _, name := range []string{"b", "c"} {
		ws[name].stop()
		if err := <-ws[name].err; err != nil {
			t.Fatal(err)
		}
	}
	all := read()
	if rep := chaos.Check(all); len(rep.Violations) > 0 || rep.Actions == 0 {
		t.Fatalf("primaries: %d actions, violations %v", rep.Actions, rep.Violations)
	}
	rep := chaos.CheckHolders(0, all, 2)
	if len(rep.Violations) > 0 || rep.SecondaryAcquisitions < len(roles) || rep.SecondaryActions == 0 {
		t.Fatalf("holders: %+v", rep)
	}
	// Every secondary holding logged its release (the workers left
	// gracefully).
	open := map[string]int{}
	for _, r := range all {
		switch r.Kind {
		case chaos.AcquireSecondary:
			open[fmt.Sprint(r.Member, r.Role, r.Token)]++
		case chaos.ReleaseSecondary:
			open[fmt.Sprint(r.Member, r.Role, r.Token)]--
		}
	}
	for k, n := range open {
		if n != 0 {
			t.Errorf("secondary holding %s: %d acquisitions more than releases", k, n)
		}
	}
}
