package rink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// assignments records a member's Assigned and Revoked calls.
type assignments struct {
	mu       sync.Mutex
	now      map[string]context.Context // assigned and not revoked
	revoked  map[string]time.Time       // when Revoked last returned, by role
	assigned int
	linger   time.Duration // how long Revoked works
	errs     []string
}

func newAssignments(linger time.Duration) *assignments {
	return &assignments{now: map[string]context.Context{}, revoked: map[string]time.Time{}, linger: linger}
}

func (a *assignments) handler() Handler {
	return Handler{
		Assigned: func(ctx context.Context, role string) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if _, ok := a.now[role]; ok {
				a.errs = append(a.errs, "assigned twice: "+role)
			}
			a.now[role] = ctx
			a.assigned++
		},
		Revoked: func(role string) {
			a.mu.Lock()
			_, ok := a.now[role]
			delete(a.now, role)
			a.mu.Unlock()
			if !ok {
				a.mu.Lock()
				a.errs = append(a.errs, "revoked unassigned: "+role)
				a.mu.Unlock()
				return
			}
			if a.linger > 0 {
				t := time.NewTimer(a.linger)
				<-t.C
			}
			a.mu.Lock()
			a.revoked[role] = time.Now()
			a.mu.Unlock()
		},
	}
}

func (a *assignments) roles() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var rs []string
	for role := range a.now {
		rs = append(rs, role)
	}
	slices.Sort(rs)
	return rs
}

// Watch assigns each role to exactly one member, follows the moves of a
// join and a leave, and Held agrees with the handler.
func TestWatch(t *testing.T) {
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(64), h.hook()}
	var roles []string
	for i := 0; i < 200; i++ {
		roles = append(roles, fmt.Sprint("tenant-", i))
	}
	ms := []*Rink{join(t, newClient(t), name, append(opts, WithMemberName("a"))...)}
	eventually(t, 10*time.Second, "a ranked", func() bool { return ms[0].Rank().Index == 0 })
	ms = append(ms, join(t, newClient(t), name, append(opts, WithMemberName("b"))...))
	var as []*assignments
	var sets []*RoleSet
	for _, m := range ms {
		a := newAssignments(0)
		set, err := m.Watch(a.handler(), roles...)
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		as, sets = append(as, a), append(sets, set)
	}
	split := func() bool {
		var all []string
		for i, a := range as {
			got := a.roles()
			if !slices.Equal(got, sets[i].Held()) {
				return false
			}
			all = append(all, got...)
		}
		slices.Sort(all)
		want := slices.Clone(roles)
		slices.Sort(want)
		return slices.Equal(all, want) && len(as[0].roles()) > 0 && len(as[1].roles()) > 0
	}
	eventually(t, 10*time.Second, "every role assigned to one member, as Held says", split)
	// Remove and Add: revoked, then assigned again.
	held := as[0].roles()[0]
	sets[0].Remove(held)
	eventually(t, 10*time.Second, "a removed role revoked", func() bool { return !slices.Contains(as[0].roles(), held) })
	if err := sets[0].Add(held); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "an added role assigned", func() bool { return slices.Contains(as[0].roles(), held) })
	// b leaves: a is assigned everything.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ms[1].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a assigned every role", func() bool { return len(as[0].roles()) == len(roles) })
	if len(as[1].roles()) != 0 {
		t.Errorf("b still has %d roles after its shutdown", len(as[1].roles()))
	}
	for _, a := range as {
		if len(a.errs) > 0 {
			t.Error(a.errs)
		}
	}
	h.check(t)
}

// With a drain timeout the heir starts a moved role once Revoked has
// returned on the previous holder.
func TestWatchDrains(t *testing.T) {
	t.Parallel()
	h := &history{}
	name := rinkName(t)
	opts := []Option{WithSlots(16), WithDrainTimeout(5 * time.Second), h.hook()}
	a := join(t, newClient(t), name, append(opts, WithMemberName("a"))...)
	eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
	var roles []string
	for i := 0; i < 16; i++ {
		roles = append(roles, fmt.Sprint("pair-", i))
	}
	rec := newAssignments(200 * time.Millisecond)
	set, err := a.Watch(rec.handler(), roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	eventually(t, 10*time.Second, "a assigned every role", func() bool { return len(rec.roles()) == len(roles) })
	b := join(t, newClient(t), name, append(opts, WithMemberName("b"))...)
	var moved []string
	eventually(t, 10*time.Second, "b holds its share", func() bool {
		moved = moved[:0]
		for _, role := range roles {
			if o, _ := b.Owner(role); o == "b" {
				if _, ok := b.Get(role); !ok {
					return false
				}
				moved = append(moved, role)
			}
		}
		return len(moved) > 0
	})
	acquired := map[int]time.Time{}
	for _, e := range h.snapshot() {
		if e.Kind == EventAcquired && e.Member == "b" {
			acquired[e.Slot] = e.Time
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, role := range moved {
		done, ok := rec.revoked[role]
		if at := acquired[wire.SlotOf(role, 16)]; !ok || at.Before(done) {
			t.Errorf("%s: b started it at %v, a's Revoked returned at %v (%v)", role, at.Format(time.StampMicro), done.Format(time.StampMicro), ok)
		}
	}
	h.check(t)
}

// Watch refuses what it cannot watch; a closed set takes no roles.
func TestWatchInvalid(t *testing.T) {
	r := join(t, newClient(t), rinkName(t))
	if _, err := r.Watch(Handler{}, "x"); !errors.Is(err, ErrNilFunc) {
		t.Errorf("no Assigned: %v", err)
	}
	h := Handler{Assigned: func(context.Context, string) {}}
	if _, err := r.Watch(h, "x", ""); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("empty role: %v", err)
	}
	set, err := r.Watch(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Add(""); !errors.Is(err, ErrInvalidRole) {
		t.Errorf("Add(\"\"): %v", err)
	}
	set.Close()
	if err := set.Add("x"); !errors.Is(err, ErrShutdown) {
		t.Errorf("Add after Close: %v", err)
	}
}
