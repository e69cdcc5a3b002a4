package rink_test

import (
	"fmt"
	"time"

	"github.com/rink-go/rink"
)

func ExampleEvent_String() {
	// What a WithEvents function might log: acquisitions and releases
	// come one per slot, so keep those of the slots where this member
	// awaits roles (Roles > 0), and every event of another kind.
	log := func(e rink.Event) {
		if (e.Kind == rink.EventAcquired || e.Kind == rink.EventReleased) && e.Roles == 0 {
			return
		}
		fmt.Println(e)
	}
	log(rink.Event{Kind: rink.EventAcquired, Rink: "orders", Member: "api-0", Slot: 17, Token: 88})
	log(rink.Event{Kind: rink.EventAcquired, Rink: "orders", Member: "api-0", Slot: 602, Token: 90,
		From: "api-1", Wait: 20 * time.Millisecond, Roles: 1})
	log(rink.Event{Kind: rink.EventFenced, Rink: "orders", Member: "api-0", Slot: -1,
		Cause: rink.ErrFenced})
	// Output:
	// orders/api-0: acquired slot 602 from api-1 (token 90, waited 20ms, 1 awaited role)
	// orders/api-0: fenced: rink: session lost, roles fenced
}
