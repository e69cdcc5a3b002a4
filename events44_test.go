package rink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rink-go/rink/internal/wire"
)

// TestEventString: every kind of Event prints as one line that names the
// member and what happened, with the fields its kind sets.
func TestEventString(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	base := Event{Time: at, Rink: "orders", Member: "api-0", Slot: -1}
	with := func(f func(e *Event)) Event { e := base; f(&e); return e }
	for _, tc := range []struct {
		e    Event
		want string
	}{
		{with(func(e *Event) {
			e.Kind, e.Slot, e.Token, e.From, e.Wait, e.Roles = EventAcquired, 602, 1234, "api-1", 20*time.Millisecond, 2
		}), "orders/api-0: acquired slot 602 from api-1 (token 1234, waited 20ms, 2 awaited roles)"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Token = EventAcquired, 7, 99 }),
			"orders/api-0: acquired slot 7 (token 99, waited 0s, no awaited role)"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Cause, e.Roles = EventReleased, 602, ErrRoleMoved, 1 }),
			"orders/api-0: released slot 602 (1 awaited role): rink: role moved to another member"},
		{with(func(e *Event) { e.Kind, e.Cause = EventFenced, ErrFenced }),
			"orders/api-0: fenced: rink: session lost, roles fenced"},
		{with(func(e *Event) { e.Kind = EventRejoined }), "orders/api-0: rejoined"},
		{with(func(e *Event) { e.Kind, e.Version, e.Wait = EventMapApplied, 12, 3*time.Millisecond }),
			"orders/api-0: applied map v12 in 3ms"},
		{with(func(e *Event) {
			e.Kind, e.Rank = EventRankChanged, Rank{Member: "api-0", Index: 1, Size: 3, Version: 12, Leader: "api-2"}
		}), "orders/api-0: rank changed: index 1 of 3, map v12, leader api-2"},
		{with(func(e *Event) {
			e.Kind, e.Rank = EventRankChanged, Rank{Member: "api-0", Index: -1, Size: 3, Version: 12, Waiting: true}
		}), "orders/api-0: rank changed: waiting, 3 ranked, map v12, no leader known"},
		{with(func(e *Event) {
			e.Kind, e.Rank = EventRankChanged, Rank{Member: "api-0", Index: 0, Size: 1, Version: 3, Leader: "api-0", Settled: true}
		}), "orders/api-0: rank changed: index 0 of 1, map v3, leader api-0, settled"},
		{with(func(e *Event) {
			e.Kind, e.Rank = EventRankChanged, Rank{Member: "api-0", Index: -1, Version: 3}
		}), "orders/api-0: rank changed: not ranked, 0 ranked, map v3, no leader known"},
		{with(func(e *Event) { e.Kind, e.Load, e.Roles = EventLoadReported, 12.5, 4 }),
			"orders/api-0: reported load 12.5/s over 4 awaited roles"},
		{with(func(e *Event) { e.Kind, e.Imbalance, e.Moved = EventLoadBalanced, 1.08, 3 }),
			"orders/api-0: balanced by load: imbalance 1.08, 3 slots moved"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Wait = EventDrained, 5, time.Second }),
			"orders/api-0: drained slot 5 in 1s"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Wait = EventDrainTimedOut, 5, time.Second }),
			"orders/api-0: drain of slot 5 timed out after 1s"},
		{with(func(e *Event) { e.Kind, e.Slot, e.From = EventIncoming, 5, "api-1" }),
			"orders/api-0: slot 5 announced to move here from api-1"},
		{with(func(e *Event) { e.Kind, e.Version = EventSettled, 12 }),
			"orders/api-0: the rink is at rest at map v12"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Wait = EventSecondaryAcquired, 5, time.Millisecond }),
			"orders/api-0: acquired slot 5 as a secondary (waited 1ms, no awaited role)"},
		{with(func(e *Event) { e.Kind, e.Slot, e.Cause = EventSecondaryReleased, 5, ErrPromoted }),
			"orders/api-0: released slot 5 as a secondary: rink: secondary promoted to primary"},
		{with(func(e *Event) { e.Kind = EventKind(99) }), "orders/api-0: EventKind(99)"},
		{Event{Kind: EventRejoined, Slot: -1}, "rejoined"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%v.String() =\n\t%q, want\n\t%q", tc.e.Kind, got, tc.want)
		}
		if got := fmt.Sprint(tc.e); got != tc.want {
			t.Errorf("fmt.Sprint of a %v event = %q, want %q", tc.e.Kind, got, tc.want)
		}
	}
}

// TestSlotEventsCountAwaitedRoles: an acquisition or release names how
// many of the roles this member awaits hash to its slot, so that a service
// can tell the few slots its roles are in from the hundreds it holds.
func TestSlotEventsCountAwaitedRoles(t *testing.T) {
	cli := newClient(t)
	name := rinkName(t)
	first := join(t, cli, name, WithMemberName("m0"), WithRebalanceDelay(time.Second))
	eventually(t, 10*time.Second, "m0 ranked", func() bool { return first.Rank().Index == 0 })

	var mu sync.Mutex
	var events []Event
	second := join(t, newClient(t), name, WithMemberName("m1"), WithRebalanceDelay(time.Second),
		WithEvents(func(e Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
	// Awaited before the leader ranks m1 (a second from now): every
	// acquisition finds them counted.
	awaited := map[int]int{}
	var roles []string
	for i := range 64 {
		roles = append(roles, fmt.Sprint("r", i))
		awaited[wire.SlotOf(roles[i], second.opts.slots)]++
	}
	set, err := second.Watch(Handler{Assigned: func(context.Context, string) {}}, roles...)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	eventually(t, 15*time.Second, "m1 ranked and settled", func() bool { rk := second.Rank(); return rk.Index >= 0 && rk.Settled })
	if err := second.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	counted := map[EventKind]int{}
	for _, e := range events {
		if e.Kind != EventAcquired && e.Kind != EventReleased {
			continue
		}
		if e.Roles != awaited[e.Slot] {
			t.Errorf("%v: Roles = %d, want %d", e, e.Roles, awaited[e.Slot])
		}
		if e.Roles > 0 {
			counted[e.Kind]++
		}
	}
	// (The leader may move slots between the two as it balances the roles
	// awaited; the Shutdown releases the rest.)
	if counted[EventAcquired] == 0 || counted[EventAcquired] != counted[EventReleased] {
		t.Errorf("acquisitions with awaited roles: %d, releases: %d; want as many, more than none", counted[EventAcquired], counted[EventReleased])
	}
}
