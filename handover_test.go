package rink

import (
	"fmt"
	"testing"
	"time"
)

// In a graceful handover the roles in use move first: the leaver releases
// the slots whose contexts it handed out last, and the heir starts the
// slots somebody awaits before the others. With 512 slots moving, a role
// in use would otherwise wait for hundreds of others on both sides.
func TestHandoverStartsRolesInUseFirst(t *testing.T) {
	for _, leaverLeads := range []bool{true, false} {
		t.Run(fmt.Sprintf("leader=%v", leaverLeads), func(t *testing.T) {
			h := &history{}
			name := rinkName(t)
			a := join(t, newClient(t), name, WithMemberName("a"), h.hook())
			eventually(t, 10*time.Second, "a ranked", func() bool { return a.Rank().Index == 0 })
			b := join(t, newClient(t), name, WithMemberName("b"), h.hook())
			settle(t, h, a, b)
			leaver, heir := b, a
			if leaverLeads {
				leaver, heir = a, b
			}
			role := ""
			for i := 0; role == ""; i++ {
				if o, _ := leaver.Owner(fmt.Sprint("role-", i)); o == leaver.Member() {
					role = fmt.Sprint("role-", i)
				}
			}
			slot := slotOf(role, DefaultSlots)
			if _, ok := leaver.Get(role); !ok {
				t.Fatalf("%s does not hold %s", leaver.Member(), role)
			}
			awaited := make(chan error, 1)
			go func() {
				_, err := heir.AwaitRoleContext(ctxTimeout(t, 10*time.Second), role)
				awaited <- err
			}()
			eventually(t, 10*time.Second, "the heir awaits the role", func() bool { return heir.slots[slot].Load() != nil })
			t0 := time.Now()
			if err := leaver.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := <-awaited; err != nil {
				t.Fatal(err)
			}
			var released, acquired []int
			for _, e := range h.snapshot() {
				switch {
				case !e.Time.After(t0):
				case e.Kind == EventReleased && e.Member == leaver.Member():
					released = append(released, e.Slot)
				case e.Kind == EventAcquired && e.Member == heir.Member():
					acquired = append(acquired, e.Slot)
				}
			}
			if len(released) < 2 || released[len(released)-1] != slot {
				t.Errorf("the leaver released %d slots, the one in use (%d) not last: last %v", len(released), slot, released[max(0, len(released)-3):])
			}
			if len(acquired) < 2 || acquired[0] != slot {
				t.Errorf("the heir started %d slots, the awaited one (%d) not first: first %v", len(acquired), slot, acquired[:min(3, len(acquired))])
			}
			h.check(t)
		})
	}
}
