package bench

import (
	"encoding/binary"

	"github.com/prometheus/client_golang/prometheus"
)

// etcdCounters is one reading of the embedded etcd's own metrics, which it
// registers in this process (prometheus.DefaultRegisterer): what it has
// sent to its clients, and what it has written, since it started.
type etcdCounters struct {
	// sentBytes is etcd_network_client_grpc_sent_bytes_total: the bytes of
	// every gRPC message etcd sent to a client, as marshalled (etcd's codec
	// counts them; HTTP/2 framing and TLS are not counted). Every response,
	// every watch event and every lease renewal's answer.
	sentBytes float64
	// keepAlives is grpc_server_msg_sent_total for LeaseKeepAlive: the
	// answers to lease renewals among the messages sent.
	keepAlives float64
	// revision is etcd_debugging_mvcc_current_revision, the store's
	// revision. It grows by one with every write that commits a change:
	// a put, a delete that deleted something, a transaction that did
	// either (however many keys it wrote), a lease revoked or expired
	// with keys attached. Reads, transactions that wrote nothing (a
	// failed compare with no else branch), lease grants and renewals do
	// not move it.
	revision float64
	// proposals is etcd_server_proposals_committed_total: raft proposals
	// committed, each a write to etcd's log. Beside the writes that move
	// the revision, it counts transactions that wrote nothing, lease
	// grants and revocations, and etcd's own entries.
	proposals float64
}

// readEtcd reads the embedded etcd's counters.
func readEtcd() (etcdCounters, error) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return etcdCounters{}, err
	}
	var c etcdCounters
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "etcd_network_client_grpc_sent_bytes_total":
				c.sentBytes += m.GetCounter().GetValue()
			case "etcd_debugging_mvcc_current_revision":
				c.revision += m.GetGauge().GetValue()
			case "etcd_server_proposals_committed_total":
				c.proposals += m.GetGauge().GetValue()
			case "grpc_server_msg_sent_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "grpc_method" && l.GetValue() == "LeaseKeepAlive" {
						c.keepAlives += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return c, nil
}

// etcdCost is what etcd spent between two readings.
type etcdCost struct {
	// sentBytes is the bytes etcd sent to clients, less the answers to
	// lease renewals (each keepAliveSize bytes): what the members would
	// not have received had nothing happened.
	sentBytes float64
	writes    float64 // committed writes (revisions)
	proposals float64 // raft proposals committed
	renewals  float64 // lease renewals answered
}

func costBetween(before, after etcdCounters, keepAliveSize int) etcdCost {
	renewals := after.keepAlives - before.keepAlives
	return etcdCost{
		sentBytes: after.sentBytes - before.sentBytes - renewals*float64(keepAliveSize),
		writes:    after.revision - before.revision,
		proposals: after.proposals - before.proposals,
		renewals:  renewals,
	}
}

// keepAliveSize is the size of etcd's answer to a lease renewal
// (etcdserverpb.LeaseKeepAliveResponse, as protobuf encodes it) with the
// given header fields, lease ID and TTL in seconds: a header message
// (cluster_id, member_id, revision, raft_term) and two varints. Zero
// fields are left out, as proto3 does.
func keepAliveSize(clusterID, memberID uint64, revision int64, raftTerm uint64, lease, ttl int64) int {
	header := varintField(clusterID) + varintField(memberID) + varintField(uint64(revision)) + varintField(raftTerm)
	size := varintField(uint64(lease)) + varintField(uint64(ttl))
	if header > 0 {
		size += 1 + varintLen(uint64(header)) + header
	}
	return size
}

// varintField is the size of a varint field numbered below 16 (a one-byte
// tag), or 0 for a zero value.
func varintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + varintLen(v)
}

func varintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}
