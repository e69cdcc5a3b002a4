package rink

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

func probe(r *Rink) int {
	w := httptest.NewRecorder()
	r.ReadyHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return w.Code
}

// Ready flips to true once the leader lists the member and stays true
// through a fence and a rejoin; only Shutdown ends it.
func TestReadyThroughFenceAndRejoin(t *testing.T) {
	// Not listed yet: a member that has seen no map.
	b0 := newBare(t, "b", 1, 5)
	b0.r.publishRank()
	if b0.r.Ready() {
		t.Fatal("ready before any map listed the member")
	}
	b0.put(memberKV("b", 5, 5, 0, 0), mapKV(twoSlots(1, []string{"a"}, 0), 7, 7))
	b0.r.publishRank()
	if b0.r.Ready() {
		t.Fatal("ready although the map neither ranks nor lists it")
	}
	m := twoSlots(2, []string{"a"}, 0)
	m.Waiting = []wire.Waiter{{Name: "b"}}
	b0.put(mapKV(m, 7, 8))
	b0.r.publishRank()
	if !b0.r.Ready() || !b0.r.Rank().Waiting {
		t.Fatal("not ready although listed as waiting")
	}

	// Through a real fence and rejoin.
	p := newProxy(t)
	name := rinkName(t)
	a := join(t, newClient(t), name, WithMemberName("a"))
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	cp := proxyClient(t, p)
	b := join(t, cp, name, WithMemberName("b"))
	eventually(t, 10*time.Second, "b ready", func() bool { return b.Ready() && probe(b) == http.StatusOK })
	p.PauseTx()
	p.PauseRx()
	eventually(t, 10*time.Second, "b fenced and unranked", func() bool { return b.Rank().Index < 0 })
	if !b.Ready() || probe(b) != http.StatusOK {
		t.Fatal("a fence made the member unready")
	}
	p.UnpauseTx()
	p.UnpauseRx()
	eventually(t, 30*time.Second, "b rejoined and ranked", func() bool { return b.Rank().Index >= 0 && a.Rank().Size == 2 })
	if !b.Ready() {
		t.Fatal("not ready after the rejoin")
	}
	if err := b.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if b.Ready() || probe(b) != http.StatusServiceUnavailable {
		t.Fatal("ready after Shutdown")
	}
}
