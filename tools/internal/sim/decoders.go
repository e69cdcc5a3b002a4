package sim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rink-go/rink/internal/wire"
)

// The fast decoders. Members read the floor and the map's change records
// with hand-written decoders (wire.ParseFloor, wire.ParseRecord) that skip
// encoding/json's reflection; a value they decode must decode to the same
// under encoding/json, which is what the values are written with. The
// simulator checks every floor and map value put in a history, the
// members' and the operator's, as it is put: a fast decoder that drops or
// misreads a field is found on the first value that has it, whether or
// not a member's decision then turns on that field.
//
// (The same property is fuzzed in the root package, FuzzParseFloor and
// FuzzParseRecord; this check runs it on the values real histories write,
// under the mutants rink-mutate plants.)

// And a member's load summary (its load key) must decode (wire.DecodeLoad),
// whatever work its application recorded: a rate that overflowed would
// write a summary no leader can read (see load-absurd).

// simKeys are the keys of the simulated rink, "sim".
var simKeys = wire.NewKeys("sim")

// checkDecoders is the model's OnPut: it checks a put of the floor or the
// map key.
func (h *history) checkDecoders(kv *mvccpb.KeyValue) {
	if h.res.Violation != "" {
		return
	}
	switch k := string(kv.Key); {
	case simKeys.IsFloor(k):
		if got, ok := wire.ParseFloor(kv.Value); ok {
			var want wire.AckFloor
			if err := json.Unmarshal(kv.Value, &want); err != nil || !reflect.DeepEqual(got, want) {
				h.violate(fmt.Sprintf("decoders: the fast floor decoder reads %s at revision %d as %+v; encoding/json: %+v (%v)", kv.Value, kv.ModRevision, got, want, err))
			}
		}
	case strings.HasPrefix(k, simKeys.Prefix+".load/"):
		if _, ok := wire.DecodeLoad(kv.Value, h.cfg.Slots); !ok && kv.Lease != 0 && !h.byHand {
			h.violate(fmt.Sprintf("decoders: the load summary %s put at revision %d does not decode: %s", k, kv.ModRevision, kv.Value))
		}
	case simKeys.IsMap(k):
		if got, ok := wire.ParseRecord(kv.Value); ok {
			var want wire.Record
			if err := json.Unmarshal(kv.Value, &want); err != nil || !reflect.DeepEqual(got, want) {
				h.violate(fmt.Sprintf("decoders: the fast record decoder reads %s at revision %d as %+v; encoding/json: %+v (%v)", kv.Value, kv.ModRevision, got, want, err))
			}
		}
	}
}
