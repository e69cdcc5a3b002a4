package core

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestFollowerFresh(t *testing.T) {
	f := NewFollower(NewBackoff(rand.New(rand.NewPCG(1, 2))))
	f.Begin(0)
	f.Listed(10)
	for _, c := range []struct {
		revs []int64
		want int
	}{
		{nil, 0},
		{[]int64{9, 10}, 0},      // both in the listing
		{[]int64{10, 11, 12}, 2}, // the first was listed
		{[]int64{11}, 1},         // the first write after the listing
		{[]int64{12, 13}, 2},
	} {
		if got := f.Fresh(c.revs); got != c.want {
			t.Errorf("Fresh(%v) = %d, want %d", c.revs, got, c.want)
		}
	}
	f.Begin(5)
	f.Listed(20)
	if got := f.Fresh([]int64{15, 21}); got != 1 {
		t.Errorf("after a new listing at 20: Fresh = %d, want 1", got)
	}
}

func TestFollowerResponse(t *testing.T) {
	f := NewFollower(NewBackoff(rand.New(rand.NewPCG(1, 2))))
	f.Begin(0)
	f.Listed(3)
	if again, _ := f.Response(false, 1); again {
		t.Fatal("a healthy response ended the attempt")
	}
	again, wait := f.Response(true, 2)
	if !again || wait < 25*time.Millisecond || wait > 50*time.Millisecond {
		t.Fatalf("a broken watch: again %v after %v, want true after 25 to 50 ms", again, wait)
	}
	// Failures in a row wait longer and longer...
	f.Begin(3)
	if w := f.Failed(4); w < 50*time.Millisecond || w > 100*time.Millisecond {
		t.Fatalf("second failure waits %v, want 50 to 100 ms", w)
	}
	// ...until an attempt lasts a healthy minute.
	f.Begin(10)
	if w := f.Failed(10 + int64(2*time.Minute)); w > 50*time.Millisecond {
		t.Fatalf("a failure after a healthy minute waits %v, want at most 50 ms", w)
	}
	if !f.Opened(nil) || f.Opened(errTest) {
		t.Fatal("Opened: list only when the watch opened")
	}
}

var errTest = testError("test")

type testError string

func (e testError) Error() string { return string(e) }
