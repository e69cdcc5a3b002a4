package sim

import (
	"context"
	"fmt"

	"github.com/rink-go/rink/internal/wire"
)

// Role sets. Every member watches one role of each slot with a role set
// (rink.Watch), as a service does, and the simulator checks what the
// set's handler is told, which is what a service acts on:
//
//   - Assigned(ctx, role) while another member's context for the role is
//     live: two members act on one role;
//   - Assigned for a role the member was assigned and not revoked since,
//     or Revoked for one it was not assigned: the handler's calls do not
//     pair;
//   - Assigned while the member's Secondary context for the role is live,
//     or Secondary while its Assigned context is: a role served as its
//     primary and as a secondary at once;
//   - at the end: every slot a member holds has its role assigned to it,
//     with a live context.
//
// A context is live while its Err is nil: a holding that ends, a crash
// (every context of the process ends with it) and a lease's deadline
// passed (a role's context says so) end it. The handler's calls run on
// the simulator's goroutine, in the rounds of the set (see the root
// package's RoleSet.signal), and draw nothing: a history plays as it
// did before members watched roles, but for the rounds' own events.

// slotRoles returns a role of each slot: the first of r0, r1... that
// hashes to it.
func slotRoles(slots int) []string {
	roles := make([]string, slots)
	found := 0
	for i := 0; found < slots; i++ {
		role := fmt.Sprintf("r%d", i)
		if s := wire.SlotOf(role, slots); roles[s] == "" {
			roles[s] = role
			found++
		}
	}
	return roles
}

// roleBook is what the members' handlers were told, by role.
type roleBook struct {
	roles []string                                  // by slot
	prim  map[string]map[*simMember]context.Context // Assigned and not Revoked
	sec   map[string]map[*simMember]context.Context // Secondary calls, by their contexts
}

func newRoleBook(slots int) *roleBook {
	return &roleBook{roles: slotRoles(slots), prim: map[string]map[*simMember]context.Context{}, sec: map[string]map[*simMember]context.Context{}}
}

// assigned is m's Handler.Assigned.
func (h *history) assigned(m *simMember, ctx context.Context, role string) {
	b := h.roleBook
	if _, ok := b.prim[role][m]; ok {
		h.violate(fmt.Sprintf("role %s: assigned to %s again, not revoked since", role, m.name))
	}
	for o, octx := range b.prim[role] {
		if o != m && octx.Err() == nil {
			h.violate(fmt.Sprintf("role %s: assigned to %s while %s's assignment is live", role, m.name, o.name))
		}
	}
	if sctx, ok := b.sec[role][m]; ok && sctx.Err() == nil {
		h.violate(fmt.Sprintf("role %s: assigned to %s while its Secondary call for it is live", role, m.name))
	}
	if b.prim[role] == nil {
		b.prim[role] = map[*simMember]context.Context{}
	}
	b.prim[role][m] = ctx
}

// revoked is m's Handler.Revoked.
func (h *history) revoked(m *simMember, role string) {
	b := h.roleBook
	if _, ok := b.prim[role][m]; !ok {
		h.violate(fmt.Sprintf("role %s: revoked from %s, which was not assigned it", role, m.name))
	}
	delete(b.prim[role], m)
}

// secondary is m's Handler.Secondary (it returns at once: ctx says when
// the secondary holding ends).
func (h *history) secondary(m *simMember, ctx context.Context, role string) {
	b := h.roleBook
	if pctx, ok := b.prim[role][m]; ok && pctx.Err() == nil {
		h.violate(fmt.Sprintf("role %s: Secondary called on %s while its assignment is live", role, m.name))
	}
	if b.sec[role] == nil {
		b.sec[role] = map[*simMember]context.Context{}
	}
	b.sec[role][m] = ctx
}

// liveRoles checks, at the end, that every slot a live member holds has
// its role assigned to that member with a live context; it returns the
// first that is not ("": none).
func (h *history) liveRoles() string {
	b := h.roleBook
	for _, m := range h.members {
		if !m.alive {
			continue
		}
		for s, role := range b.roles {
			if !m.m.Holds(s) {
				continue
			}
			if ctx, ok := b.prim[role][m]; !ok || ctx.Err() != nil {
				return fmt.Sprintf("%s holds slot %d, but its role %s is not assigned to it", m.name, s, role)
			}
		}
	}
	return ""
}
