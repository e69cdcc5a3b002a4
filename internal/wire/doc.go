// Package wire is what rink writes to etcd and reads back: the layout of a
// rink's keys, the requests a member sends, and (as they move here from
// package rink) the encodings of maps, records, floors, acknowledgements,
// load reports and member values.
//
// It knows no planning type and no etcd client: its requests are etcd's
// own protocol buffers (etcdserverpb), which the production driver sends
// through clientv3 and the simulator answers itself. docs/design.md,
// "Packages", draws where it sits; internal/layering_test.go keeps it so.
package wire
