package chaos

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Zones (Config.Zones): each member name has a zone for good, so that a
// replacement under the same name keeps it; a new name goes to the zone
// with the fewest live members, so that every zone keeps members as the
// storm replaces them. "zone-loss" kills every member of a zone at once;
// the zone comes back later (or at the heal) with as many members.

// zoneName names zone z.
func zoneName(z int) string { return fmt.Sprintf("z%d", z) }

// zoneFor returns the zone of a member called name (-1 without zones),
// giving a new name the zone with the fewest live members (the lowest
// such). The caller holds st.mu.
func (r *run) zoneFor(name string) int {
	if r.cfg.Zones == 0 {
		return -1
	}
	if z, ok := r.st.zoneOf[name]; ok {
		return z
	}
	best := 0
	for z := 1; z < r.cfg.Zones; z++ {
		if r.zoneLive(z) < r.zoneLive(best) {
			best = z
		}
	}
	r.st.zoneOf[name] = best
	return best
}

// zoneLive counts the live members of zone z. The caller holds st.mu.
func (r *run) zoneLive(z int) int {
	n := 0
	for _, p := range r.live() {
		if p.zone == z {
			n++
		}
	}
	return n
}

// zoneLoss ("zone-loss") kills (SIGKILL) every member process of one zone
// at once — live members, and those stopped, cut off, leaving or replaced
// alike — drawn among the zones with a live member whose loss leaves at
// least two live members elsewhere. After a while drawn from TTL/2 to
// 3 TTL (or at the heal) the zone comes back with as many members as it
// lost, each under its old name or a new one (drawn now, half and half).
func (r *run) zoneLoss() (bool, error) {
	const kind = "zone-loss"
	if r.cfg.Zones == 0 {
		return false, nil
	}
	leader, _ := r.mapLeader()
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	live := len(r.live())
	var pool []int
	for z := range r.cfg.Zones {
		if n := r.zoneLive(z); n > 0 && live-n >= 2 {
			pool = append(pool, z)
		}
	}
	if len(pool) == 0 {
		return false, nil
	}
	z := pool[r.rng.IntN(len(pool))]
	var killed, lost []string
	for _, p := range slices.Clone(r.members) {
		if p.zone != z {
			continue
		}
		note := ""
		switch {
		case p.leaving:
			note += " (leaving)"
		case p.replaced:
			note += " (replaced)"
		default:
			lost = append(lost, p.name) // a live member: the zone brings one back
		}
		if p.stopped {
			note += " (stopped)"
		}
		if p.cut > 0 {
			note += " (cut off)"
		}
		if p.name == leader {
			note += " (the leader)"
		}
		if !p.leaving {
			p.leaving = true
		}
		p.signal(syscall.SIGKILL)
		killed = append(killed, p.base+note)
	}
	// Who comes back: drawn now, not when it comes back, so that the
	// storm's seeded order does not depend on the timers.
	var back []string
	for _, name := range lost {
		if r.rng.IntN(2) == 0 {
			back = append(back, name) // kept for the zone: not departed
			continue
		}
		st.departed = append(st.departed, name)
		nn := r.newName()
		st.zoneOf[nn] = z
		back = append(back, nn)
	}
	d := r.randDur(r.cfg.TTL/2, 3*r.cfg.TTL)
	r.op(kind, fmt.Sprintf("zone %s: %s killed; back after %v as %s", zoneName(z), strings.Join(killed, " "), d.Round(time.Millisecond), strings.Join(back, " ")))
	r.later(d, func() { r.zoneBack(z, back) })
	return true, nil
}

// zoneBack starts the members a lost zone comes back with, while the rink
// has room (cfg.Members + 3 live members) and no process runs under the
// name.
func (r *run) zoneBack(z int, names []string) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopping {
		return
	}
	var started, skipped []string
	for _, name := range names {
		if len(r.live()) >= r.cfg.Members+3 || slices.ContainsFunc(r.members, func(p *proc) bool { return p.name == name }) {
			skipped = append(skipped, name)
			continue
		}
		p, err := r.startWorker(name)
		if err != nil {
			st.findings = append(st.findings, fmt.Sprintf("zone %s coming back: starting %s: %v", zoneName(z), name, err))
			continue
		}
		started = append(started, p.base)
	}
	note := strings.Join(started, " ")
	if len(skipped) > 0 {
		note += fmt.Sprintf(" (not started, the rink full or the name in use: %s)", strings.Join(skipped, " "))
	}
	r.op("zone-back", fmt.Sprintf("zone %s: %s", zoneName(z), note))
}
