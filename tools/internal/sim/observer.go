package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/internal/simhook"
	"github.com/rink-go/rink/internal/wire"
)

// An observer in the history (Config.Observer): the production
// Observer's view of the rink (rink's observerView, every decision it
// makes), fed by a watcher of the model that carries out the production
// watcher's decisions (see simhook.NewObserver). Each State it publishes
// is checked against the map key's history: the map it shows (its
// version, its members, each slot's owners) must be one that a put of the
// map key of the lineage it names, at or before the revision it names,
// holds (checkObserved). What a put holds is worked out here from the
// puts alone (mapBook): a whole map, the whole map written beside a
// change record in the same transaction, or the record applied to what
// the put before it in the same lineage holds, the map of the version
// before; else nothing.
//
// The fault observer-cut (played only when named, and only with an
// observer) cuts the observer's connection off for a while and breaks its
// watch, as a connection reset does: it lists the rink again once it is
// back, having missed what happened meanwhile.

// observerStream seeds the observer's source of jitter.
const observerStream = 0x6f6273

// simObserver is the history's observer.
type simObserver struct {
	c     *Client
	o     simhook.Observer
	roles map[int][]string // by slot count, a role in each slot
	book  *mapBook
	seen  int // States checked
}

// startObserver starts the history's observer (with Config.Observer).
func (h *history) startObserver(seed uint64) {
	w := h.w
	env := &memberEnv{w: w, rng: rand.New(rand.NewPCG(seed, observerStream))}
	ob := &simObserver{c: w.NewClient("observer"), roles: map[int][]string{}, book: newMapBook()}
	h.observer = ob
	w.Etcd.OnPut = func(kv *mvccpb.KeyValue) {
		ob.book.note(kv)
		h.checkDecoders(kv)
	}
	ob.o = simhook.NewObserver(simhook.ObserverConfig{Rink: "sim", Etcd: clientEtcd{ob.c, env}, Env: env,
		Published: func(s any) { h.checkObserved(s.(rink.State)) }})
	ob.o.Start()
}

// cutObserver is observer-cut: it reports whether there is an observer.
func (h *history) cutObserver() bool {
	ob := h.observer
	if ob == nil {
		return false
	}
	w := h.w
	d := w.Between(100*time.Millisecond, 3*h.cfg.TTL)
	w.Tracef("fault: the observer's connection is reset, and cut off for %v", d)
	ob.c.Cut(d)
	for _, id := range slices.Sorted(maps.Keys(w.watched)) {
		if wa := w.watched[id]; !wa.ended && wa.c == ob.c {
			wa.Break()
		}
	}
	return true
}

// checkObserved checks a State the observer published.
func (h *history) checkObserved(s rink.State) {
	ob := h.observer
	ob.seen++
	if h.res.Violation != "" || s.MapError != "" || s.Version == 0 {
		return // (it shows no map: Owner answers nothing)
	}
	roles := ob.rolesFor(s.Slots)
	names := make([]string, len(s.Members))
	for i, m := range s.Members {
		names[i] = m.Name
	}
	shows := func(m *wire.Map) bool {
		if m.Version != s.Version || m.Slots != s.Slots || !slices.Equal(m.Members, names) {
			return false
		}
		for slot, role := range roles {
			got, _ := s.Owners(role)
			if !slices.Equal(got, m.ReplicaNames(slot)) {
				return false
			}
		}
		return true
	}
	if ob.book.holds(s.Lineage, s.Revision, shows) {
		return
	}
	owners := make([]string, len(roles))
	for slot, role := range roles {
		got, _ := s.Owners(role)
		owners[slot] = fmt.Sprint(got)
	}
	h.violate(fmt.Sprintf("observer: at revision %d it shows map version %d of lineage %d (members %v, owners by slot %v), which no put of the map key in that lineage up to then holds",
		s.Revision, s.Version, s.Lineage, names, owners))
}

// rolesFor returns a role in each of n slots.
func (ob *simObserver) rolesFor(n int) []string {
	if r, ok := ob.roles[n]; ok {
		return r
	}
	r := make([]string, n)
	for i, left := 0, n; left > 0 && i < 1<<20; i++ {
		role := "role-" + strconv.Itoa(i)
		if s := wire.SlotOf(role, n); r[s] == "" {
			r[s] = role
			left--
		}
	}
	ob.roles[n] = r
	return r
}

// mapBook is the map key's history, as the model's puts wrote it: every
// put of the map key and of the snapshot key, by mod revision (a restore
// brings back keys at the revisions they were put at, and no revision is
// written twice).
type mapBook struct {
	puts  map[int64]mapPut     // the map key's, by mod revision
	snaps map[int64][]byte     // the snapshot key's values, by mod revision
	by    map[[2]int64][]int64 // the mod revisions of the map key's puts, by lineage and version, in order
	memo  map[int64]*wire.Map  // what each put holds (nil: nothing)
}

type mapPut struct {
	lineage, version int64
	value            []byte
}

func newMapBook() *mapBook {
	return &mapBook{puts: map[int64]mapPut{}, snaps: map[int64][]byte{}, by: map[[2]int64][]int64{}, memo: map[int64]*wire.Map{}}
}

// note takes in a put (the model's OnPut).
func (b *mapBook) note(kv *mvccpb.KeyValue) {
	switch k := string(kv.Key); {
	case simKeys.IsMap(k):
		b.puts[kv.ModRevision] = mapPut{lineage: kv.CreateRevision, version: kv.Version, value: slices.Clone(kv.Value)}
		key := [2]int64{kv.CreateRevision, kv.Version}
		b.by[key] = append(b.by[key], kv.ModRevision)
	case simKeys.IsSnapshot(k):
		b.snaps[kv.ModRevision] = slices.Clone(kv.Value)
	}
}

// holds reports whether a put of the map key in lineage, at or before
// revision rev, holds a map that shows accepts.
func (b *mapBook) holds(lineage, rev int64, shows func(*wire.Map) bool) bool {
	for key, revs := range b.by {
		if key[0] != lineage {
			continue
		}
		for _, r := range revs {
			if r > rev {
				continue
			}
			if m := b.held(r); m != nil && shows(m) {
				return true
			}
		}
	}
	return false
}

// held returns the map the put at rev holds (nil: none).
func (b *mapBook) held(rev int64) *wire.Map {
	if m, ok := b.memo[rev]; ok {
		return m
	}
	b.memo[rev] = nil // (no put's map depends on itself)
	p := b.puts[rev]
	var m wire.Map
	var err error
	c, isRecord := wire.DecodeRecord(p.value)
	switch whole, beside := b.snaps[rev]; {
	case !isRecord:
		m, err = wire.DecodeMap(p.value, wire.PeekSlots(p.value))
	case !slices.Contains(wire.Speaks, c.Schema):
		return nil
	case beside:
		m, err = wire.DecodeMap(whole, wire.PeekSlots(whole))
		if err == nil && m.Version != c.Version {
			return nil
		}
	default:
		// The put before it in its lineage: the latest of the version
		// before, before it.
		var prev *wire.Map
		for _, r := range b.by[[2]int64{p.lineage, p.version - 1}] {
			if r < rev {
				prev = b.held(r)
			}
		}
		if prev == nil {
			return nil
		}
		m, err = wire.ApplyAs(prev, &c, false)
	}
	if err != nil {
		return nil
	}
	b.memo[rev] = &m
	return &m
}
