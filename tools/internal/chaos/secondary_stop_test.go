package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/embedetcd"
)

// TestSecondaryContextAfterStop: a member process stopped (SIGSTOP) for
// three TTLs, so that its lease's fence deadline passes while it is
// stopped, acts on nothing it held once it resumes, as a secondary either.
// (A Handler.Secondary context derived from the holding's with
// context.WithCancel said it was alive until the member's keeper got to
// fence it: the worker recorded secondary actions stamped after the
// resume, for holdings acquired before the stop. The library's
// TestSecondaryContextChecksTheDeadline covers the fix in a millisecond;
// this one takes 45 s of real processes, so it runs only with
// RINK_CHAOS_REPRO_SECONDARY=1.)
func TestSecondaryContextAfterStop(t *testing.T) {
	if os.Getenv("RINK_CHAOS_REPRO_SECONDARY") == "" {
		t.Skip("45 s of real processes; RINK_CHAOS_REPRO_SECONDARY=1 runs it (the library's TestSecondaryContextChecksTheDeadline covers the same)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	const ttl = 2 * time.Second
	start := func(name string) *exec.Cmd {
		cfg := WorkerConfig{Endpoints: srv.Endpoint(), Rink: "chaos-stop", Name: name, Roles: 64, TTL: ttl, Delay: 0,
			Every: 5 * time.Millisecond, Log: filepath.Join(dir, name+".log"), RetryJoin: true, Replicas: 2}
		data, _ := json.Marshal(cfg)
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"=worker:"+string(data))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		})
		return cmd
	}
	read := func(name string) []Record {
		f, err := os.Open(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil
		}
		defer f.Close()
		recs, _ := Parse(f)
		return recs
	}
	start("a")
	b := start("b")
	// waitHolding waits for b to act as a secondary on a holding acquired
	// after since.
	waitHolding := func(since int64) {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range read("b") {
				if r.Kind == ActSecondary && r.Mono > since {
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal("b holds no secondary")
	}
	staleSec, stalePrim := 0, 0
	for round := 0; round < 5 && staleSec == 0; round++ {
		waitHolding(Now())
		time.Sleep(500 * time.Millisecond)
		stopped := Now()
		_ = b.Process.Signal(syscall.SIGSTOP)
		time.Sleep(3 * ttl)
		resumed := Now()
		_ = b.Process.Signal(syscall.SIGCONT)
		time.Sleep(time.Second)
		// The holdings acquired before the stop, and their actions
		// stamped after the resume.
		held := map[string]bool{}
		for _, r := range read("b") {
			key := fmt.Sprint(r.Kind == AcquireSecondary || r.Kind == ActSecondary, r.Role, r.Token)
			switch {
			case (r.Kind == Acquire || r.Kind == AcquireSecondary) && r.Mono < stopped:
				held[key] = true
			case r.Kind == ActSecondary && r.Mono > resumed && held[key]:
				staleSec++
				if staleSec <= 3 {
					t.Logf("round %d: b acted on %s as a secondary (holding #%d) at %s, %v after its resume, %v after it was stopped for %v",
						round, r.Role, r.Token, secs(stopped, r.Mono), time.Duration(r.Mono-resumed), time.Duration(r.Mono-stopped), 3*ttl)
				}
			case r.Kind == Act && r.Mono > resumed && held[key]:
				stalePrim++
			}
		}
		t.Logf("round %d: after the resume, %d secondary actions and %d primary actions on holdings acquired before the stop", round, staleSec, stalePrim)
	}
	if staleSec > 0 {
		t.Errorf("a member stopped past its lease acted %d times as a secondary after it resumed (%d times as a primary)", staleSec, stalePrim)
	}
}
