package rink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// strayKeys are keys that no member writes, as an operator's etcdctl put
// might leave them under a rink's prefix: member keys whose names no member
// can have, election keys no campaign made (no lease, odd values), and keys
// that mean nothing to rink.
func strayKeys(name string) map[string]string {
	p := newKeys(name).Prefix
	return map[string]string{
		p + "members/":          "{}",
		p + "members/a/b":       "{}",
		p + "members/bad name":  "{}",
		p + "members/map":       "{}",
		p + "members/x\x01":     "{}",
		p + "election/zzz":      "",
		p + "election/1":        "\xff\x00",
		p + "election/":         "m0",
		p + "acks/":             "not json",
		p + "acks/bad name":     `{"ack":99,"lineage":1}`,
		p + "garbage":           "x",
		p + "floor/x":           "{}",
		p + "mapx":              "{}",
		p + "members/m9/extra":  "{}",
		p + "election/zzz/deep": "m1",
	}
}

func putStrays(t *testing.T, name string) {
	t.Helper()
	admin := newClient(t)
	for k, v := range strayKeys(name) {
		if _, err := admin.Put(ctxTimeout(t, 5*time.Second), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// fences counts the fence events in a history.
func fences(h *history) []string {
	var out []string
	for _, e := range h.snapshot() {
		if e.Kind == EventFenced {
			out = append(out, fmt.Sprintf("%s: %v", e.Member, e.Cause))
		}
	}
	return out
}

// TestStrayKeys writes stray keys, with no lease, into a rink's prefix,
// before any member starts and under a running rink: they must be ignored.
// Every slot stays held by exactly one member, ranks do not change, nobody
// fences, and elections still work.
func TestStrayKeys(t *testing.T) {
	t.Parallel()
	t.Run("running", func(t *testing.T) {
		h := &history{}
		name, ms, _ := cluster(t, h, 3)
		settle(t, h, ms...)
		before := map[string]Rank{}
		for _, m := range ms {
			before[m.Member()] = m.Rank()
		}
		held := h.holders()
		putStrays(t, name)
		// Watch for longer than a TTL: a map ranking a stray name would be
		// refused by every member within milliseconds.
		admin := newClient(t)
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			if f := fences(h); len(f) > 0 {
				t.Fatalf("fenced after stray keys were written: %v", f)
			}
			for _, m := range ms {
				if got, want := m.Rank(), before[m.Member()]; got.Index != want.Index || got.Size != want.Size || got.Version != want.Version {
					t.Fatalf("%s's rank went from %+v to %+v", m.Member(), want, got)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if now := h.holders(); fmt.Sprint(now) != fmt.Sprint(held) {
			t.Fatalf("holders changed after stray keys were written")
		}
		// Stray election keys are removed: left, one older than every
		// candidate would block elections for good.
		eventually(t, 10*time.Second, "stray election keys removed", func() bool {
			resp, err := admin.Get(ctxTimeout(t, 5*time.Second), newKeys(name).Election(), clientv3.WithPrefix())
			if err != nil {
				return false
			}
			for _, kv := range resp.Kvs {
				if kv.Lease == 0 {
					return false
				}
			}
			return true
		})
		ob, err := NewObserver(newClient(t), name)
		if err != nil {
			t.Fatal(err)
		}
		defer ob.Close()
		if s := ob.State(); len(s.Members) != 3 || len(s.Joining) != 0 || len(s.Waiting) != 0 || s.Leader != "m0" {
			t.Fatalf("observer: members %+v, joining %q, waiting %+v, leader %q", s.Members, s.Joining, s.Waiting, s.Leader)
		}

		// The leader plans with the stray keys in its view: a newcomer is
		// ranked, and after the leader leaves, another is elected and
		// proclaims.
		m3 := join(t, newClient(t), name, WithMemberName("m3"), h.hook())
		eventually(t, 10*time.Second, "m3 ranked", func() bool { return m3.Rank().Index == 3 && m3.Rank().Size == 4 })
		if err := ms[0].Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		rest := []*Rink{ms[1], ms[2], m3}
		eventually(t, 10*time.Second, "new leader, 3 ranked", func() bool {
			for _, m := range rest {
				if rk := m.Rank(); rk.Size != 3 || rk.Index < 0 || rk.Leader == "" || rk.Leader == "m0" {
					return false
				}
			}
			return true
		})
		settle(t, h, rest...)
		for _, n := range rest[0].ownersNow().Members {
			if validName(n, false) != "" {
				t.Fatalf("map ranks %q", n)
			}
		}
		// Deleting the stray keys changes nothing either.
		for k := range strayKeys(name) {
			if _, err := admin.Delete(ctxTimeout(t, 5*time.Second), k); err != nil {
				t.Fatal(err)
			}
		}
		if f := fences(h); len(f) > 0 {
			t.Fatalf("fenced: %v", f)
		}
		h.check(t)
	})

	t.Run("before start", func(t *testing.T) {
		h := &history{}
		name := rinkName(t)
		putStrays(t, name)
		var ms []*Rink
		for i := 0; i < 3; i++ {
			ms = append(ms, join(t, newClient(t), name, WithMemberName(fmt.Sprintf("m%d", i)), h.hook()))
		}
		eventually(t, 15*time.Second, "all ranked under a leader", func() bool {
			for _, m := range ms {
				if rk := m.Rank(); rk.Index < 0 || rk.Size != 3 || !strings.HasPrefix(rk.Leader, "m") {
					return false
				}
			}
			return true
		})
		settle(t, h, ms...)
		if f := fences(h); len(f) > 0 {
			t.Fatalf("fenced: %v", f)
		}
		h.check(t)
	})
}

// A leader never proclaims a map that its members would refuse: whatever
// puts a name no member can have into its view (stray member keys are
// ignored before they get there), it logs an error, once, and writes
// nothing.
func TestLeaderRefusesOwnBadMap(t *testing.T) {
	b := newBare(t, "a", 2, 5)
	core, logs := observer.New(zap.ErrorLevel)
	b.r.log = zap.New(core)
	// A real client, so that a proclamation, if one starts, fails its
	// guard (the election key below does not exist) rather than crash.
	b.r.cli = newClient(t)
	b.put(memberKV("a", 5, 5, 0, 0), mapKV(twoSlots(1, []string{"a"}, 0, 0), 7, 7))
	st := &b.r.st
	st.lead = &leadership{inc: st.inc, key: newKeys("bare").Election() + "none", rev: 1,
		since: map[string]time.Time{}, retry: newBackoff(), stopAgg: func() {}}
	for i := 0; i < 2; i++ {
		st.members[""] = memberInfo{createRev: 9, lease: 9, protocols: wire.OwnProtocols}
		st.dirty = true
		b.r.plan()
		if st.lead.busy {
			t.Fatal("the leader proclaims a map naming an empty member")
		}
	}
	if n := logs.FilterMessageSnippet("refusing to proclaim").Len(); n != 1 {
		t.Fatalf("%d error lines, want 1: %v", n, logs.All())
	}
	if st.cur.Version != 1 {
		t.Fatalf("map version %d", st.cur.Version)
	}
}

// Nested rinks (issue 11): rink a/x keeps its keys under rink a's prefix,
// which rink a follows, so every member of a would receive every event of
// a/x. New refuses the pair whichever starts first; stray keys under the
// prefix do not count.
func TestNestedRinksRefused(t *testing.T) {
	cli := newClient(t)
	outer := rinkName(t)
	if _, err := cli.Put(ctxTimeout(t, 5*time.Second), "rink/"+outer+"/garbage/x", "stray"); err != nil {
		t.Fatal(err)
	}
	a := join(t, cli, outer)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	for _, inner := range []string{outer + "/eu", outer + "/eu/west"} {
		if _, err := New(cli, inner); !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), "nest") {
			t.Fatalf("New(%q) beside rink %q: %v, want ErrInvalidName (nesting)", inner, outer, err)
		}
	}
	if err := a.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Its map outlives its last member; deleting the prefix retires it.
	if _, err := New(cli, outer+"/eu"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("New inside a rink whose members all left: %v, want ErrInvalidName", err)
	}
	if _, err := cli.Delete(ctxTimeout(t, 5*time.Second), "rink/"+outer+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	inner := join(t, cli, outer+"/eu")
	if err := inner.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	other := rinkName(t) + "-2"
	in := join(t, cli, other+"/eu/west")
	defer func() { _ = in.Shutdown(ctxTimeout(t, 10*time.Second)) }()
	for _, o := range []string{other, other + "/eu"} {
		_, err := New(cli, o)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), other+"/eu/west") {
			t.Fatalf("New(%q) around rink %q: %v, want ErrInvalidName naming it", o, other+"/eu/west", err)
		}
	}
	// Nested names that sort before and after the outer rink's own keys.
	for _, sub := range []string{"a", "zz"} {
		third := rinkName(t) + "-3"
		in := join(t, cli, third+"/"+sub)
		if _, err := New(cli, third); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("New(%q) around rink %q: %v, want ErrInvalidName", third, third+"/"+sub, err)
		}
		_ = in.Shutdown(ctxTimeout(t, 10*time.Second))
	}
	// Unrelated names that share a prefix without a '/' boundary are fine.
	sib := join(t, cli, other+"/eu-2")
	_ = sib.Shutdown(ctxTimeout(t, 10*time.Second))
}

// proclaimFx records what a member proclaims; the bare harness's effects
// do the rest.
type proclaimFx struct {
	netEffects
	base, next []wire.Map
}

func (fx *proclaimFx) proclaim(_ *leadership, base, next wire.Map, _ int64, _ wire.Transition) {
	fx.base, fx.next = append(fx.base, base), append(fx.next, next)
}

// An operator puts back an older change record; members that do not lead
// apply records laxly (only the leader checks a record against every
// member: see applyAs), and this one named a member at an index while
// the member kept its own: a map that ranks a twice. Member a, elected
// next, planned from it a map it refused to proclaim, for good; members
// that listed the rink could not read the record (no whole map was
// written with it) and held up every move (found by the simulator: seed
// 73024334 at 5 members). A leader plans from a map whose repeated names
// are vacated, and writes it whole.
func TestLeaderRewritesAMapThatRanksANameTwice(t *testing.T) {
	b := newBare(t, "a", 2, 5)
	fx := &proclaimFx{netEffects: netEffects{b.r}}
	b.r.simFx = fx
	b.put(memberKV("a", 5, 5, 0, 0), memberKV("x", 6, 6, 0, 0), mapKV(twoSlots(1, []string{"a", "x"}, 0, 1), 7, 7))
	st := &b.r.st
	st.cur = twoSlots(2, []string{"a", "x", "a"}, 0, 2) // (as a lax apply of an older record made it)
	st.lead = &leadership{inc: st.inc, key: newKeys("bare").Election() + "none", rev: 1,
		since: map[string]time.Time{}, retry: newBackoff(), stopAgg: func() {}}
	st.dirty = true
	b.r.plan()
	if len(fx.next) != 1 {
		t.Fatalf("%d maps proclaimed, want 1", len(fx.next))
	}
	if err := fx.next[0].Validate(); err != nil {
		t.Fatalf("proclaimed %v: %v", fx.next[0], err)
	}
	if len(fx.base[0].Members) != 0 {
		t.Fatalf("proclaimed as a record over %v, want a whole map", fx.base[0].Members)
	}
}
