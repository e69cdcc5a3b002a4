package wire_test

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/rink-go/rink/internal/wire"
)

// TestComparesMatchClientv3: each request builder makes the very protocol
// buffer that clientv3's helpers make for the same request, so moving a
// txn's construction off the client changes no byte on the wire.
func TestComparesMatchClientv3(t *testing.T) {
	cmp := func(c clientv3.Cmp) *etcdserverpb.Compare { return c.GetCompare() }
	for _, c := range []struct {
		name      string
		got, want *etcdserverpb.Compare
	}{
		{"VersionEq", wire.VersionEq("k", 0), cmp(clientv3.Compare(clientv3.Version("k"), "=", 0))},
		{"CreateRevisionEq", wire.CreateRevisionEq("k", 7), cmp(clientv3.Compare(clientv3.CreateRevision("k"), "=", 7))},
		{"ModRevisionEq", wire.ModRevisionEq("k", 9), cmp(clientv3.Compare(clientv3.ModRevision("k"), "=", 9))},
		{"ValueEq", wire.ValueEq("k", "v"), cmp(clientv3.Compare(clientv3.Value("k"), "=", "v"))},
		{"LeaseEq", wire.LeaseEq("k", 0x1234), cmp(clientv3.Compare(clientv3.LeaseValue("k"), "=", 0x1234))},
		{"CreatedBelow", wire.CreatedBelow("rink/a/members/", 12), cmp(clientv3.Compare(clientv3.CreateRevision("rink/a/members/"), "<", 12).WithPrefix())},
	} {
		if !proto.Equal(c.got, c.want) {
			t.Errorf("%s: %v, clientv3 makes %v", c.name, c.got, c.want)
		}
	}
	for _, p := range []string{"rink/a/", "a\xff", "\xff\xff", "", "z"} {
		if got, want := wire.PrefixEnd(p), clientv3.GetPrefixRangeEnd(p); got != want {
			t.Errorf("PrefixEnd(%q) = %q, clientv3 says %q", p, got, want)
		}
	}
}
