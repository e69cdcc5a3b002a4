package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rink-go/rink/internal/embedetcd"
	"github.com/rink-go/rink/internal/testutil"
)

// TestREADMEShowsThisProgram: README.md's "Use it in your service" shows
// this file as it is, so that what a newcomer copies compiles.
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Fatal("README.md does not show examples/quickstart/main.go as it is: copy the file into its go block")
	}
}

// TestTwoCopies runs the README's step 2: one copy holds the four jobs;
// a second takes some over; when the second stops, the first holds them
// all again.
func TestTwoCopies(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embedetcd.Start(embedetcd.Options{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	eps := []string{srv.Endpoint()}
	held := func(out *testutil.Buffer) int {
		n := 0
		for _, line := range strings.Split(out.String(), "\n") {
			switch {
			case strings.HasPrefix(line, "acquired "):
				n++
			case strings.HasPrefix(line, "released "):
				n--
			}
		}
		return n
	}
	var outA, outB testutil.Buffer
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopA()
	defer stopB()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- run(ctxA, &outA, eps) }()
	testutil.Eventually(t, 15*time.Second, "the first copy holds the four jobs", func() bool { return held(&outA) == 4 })
	go func() { errB <- run(ctxB, &outB, eps) }()
	testutil.Eventually(t, 20*time.Second, "the second copy takes jobs over", func() bool {
		return held(&outB) > 0 && held(&outA)+held(&outB) == 4
	})
	stopB()
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if held(&outB) != 0 {
		t.Fatalf("the second copy stopped holding jobs:\n%s", outB.String())
	}
	testutil.Eventually(t, 15*time.Second, "the first copy holds the four jobs again", func() bool { return held(&outA) == 4 })
	stopA()
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	t.Logf("first copy:\n%s\nsecond copy:\n%s", outA.String(), outB.String())
}
