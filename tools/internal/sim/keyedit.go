package sim

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The key-edit fault (drawn only when named in Config.Kinds, so that
// every seed plays as before it): an operator edits one of the rink's keys
// by hand, or a broken script writes it, and what is written is damaged.
// Any key under the rink's prefix may be edited — the map, the whole map
// beside a change record, the floor, an acknowledgement, a member key, an
// election key, a load report — and the edit keeps the key's lease, as
// `etcdctl put --ignore-lease` does, so that the damaged value stays as
// long as its key would have. The members must refuse or ignore what they
// cannot read, stay safe, and heal: the end's checks (every slot held,
// every role assigned) apply as after any fault.

// edits are the damages editKey draws from; each returns the damaged
// value, or nil when it does not apply to v.
var edits = []func(rng *rand.Rand, v []byte) []byte{
	// Cut short, as a paste that lost its end.
	func(rng *rand.Rand, v []byte) []byte {
		if len(v) < 2 {
			return nil
		}
		return slices.Clone(v[:1+rng.IntN(len(v)-1)])
	},
	// Not JSON at all.
	func(rng *rand.Rand, v []byte) []byte {
		return []byte([]string{"}{", "oops", "\x00\xff", " "}[rng.IntN(4)])
	},
	// JSON of another shape.
	func(rng *rand.Rand, v []byte) []byte {
		return []byte([]string{"[]", `"x"`, "null", "{}", "0", "true"}[rng.IntN(6)])
	},
	// One field of an object given a value of another type or out of
	// range.
	func(rng *rand.Rand, v []byte) []byte {
		return editField(rng, v, func(old json.RawMessage) json.RawMessage {
			return json.RawMessage(wrongValues[rng.IntN(len(wrongValues))])
		})
	},
	// One field of an object dropped.
	func(rng *rand.Rand, v []byte) []byte {
		return editField(rng, v, func(json.RawMessage) json.RawMessage { return nil })
	},
	// One element of an array field replaced.
	func(rng *rand.Rand, v []byte) []byte {
		return editField(rng, v, func(old json.RawMessage) json.RawMessage {
			var a []json.RawMessage
			if json.Unmarshal(old, &a) != nil || len(a) == 0 {
				return old
			}
			a[rng.IntN(len(a))] = json.RawMessage(wrongValues[rng.IntN(len(wrongValues))])
			out, _ := json.Marshal(a)
			return out
		})
	},
	// A field this build does not know added (a newer build's, or a typo).
	func(rng *rand.Rand, v []byte) []byte {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil || m == nil {
			return nil
		}
		m["zz"] = json.RawMessage(wrongValues[rng.IntN(len(wrongValues))])
		out, _ := json.Marshal(m)
		return out
	},
}

// wrongValues are values of the wrong type or out of any range.
var wrongValues = []string{`"x"`, `""`, `-1`, `0`, `99999999999999999999`, `1.5`, `1e300`, `[]`, `[-1]`, `{}`, `null`, `true`, `[0,0,0]`}

// editField replaces one field of the JSON object v (drawn among its
// fields in sorted order) with what f returns for it (nil: the field
// dropped); nil when v is no object with a field.
func editField(rng *rand.Rand, v []byte, f func(json.RawMessage) json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || len(m) == 0 {
		return nil
	}
	fields := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	k := fields[rng.IntN(len(fields))]
	if nv := f(m[k]); nv != nil {
		m[k] = nv
	} else {
		delete(m, k)
	}
	out, _ := json.Marshal(m)
	return out
}

// editKey does a key-edit: it reports whether it found a key to edit.
func (h *history) editKey() bool {
	w := h.w
	resp, err := w.Etcd.Range(&etcdserverpb.RangeRequest{Key: []byte("rink/sim/"), RangeEnd: []byte("rink/sim0")})
	if err != nil || len(resp.Kvs) == 0 {
		return false
	}
	kv := resp.Kvs[h.rng.IntN(len(resp.Kvs))]
	var v []byte
	for range 4 {
		if v = edits[h.rng.IntN(len(edits))](h.rng, kv.Value); v != nil && !bytes.Equal(v, kv.Value) {
			break
		}
	}
	if v == nil || bytes.Equal(v, kv.Value) {
		return false
	}
	if k := string(kv.Key); simKeys.IsMap(k) || simKeys.IsSnapshot(k) {
		h.warmUnchecked = true // (see earlyMoves: a hand-edited map may move slots the leader never planned)
	}
	w.Tracef("fault: operator edits %s by hand: %.80q", kv.Key, v)
	h.byHand = true // (the decoders' check is for members' puts: see checkDecoders)
	_, err = w.Etcd.Put(&etcdserverpb.PutRequest{Key: kv.Key, Value: v, IgnoreLease: kv.Lease != 0})
	h.byHand = false
	if err == nil {
		w.pump()
	}
	return true
}
