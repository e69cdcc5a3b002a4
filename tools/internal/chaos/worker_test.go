package chaos_test

import (
	"context"
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
