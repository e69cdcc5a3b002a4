// Package core is where rink's decisions are moving (issue 43): the state
// machines that decide what a member does, fed inputs and returning what
// to do, with no etcd client, no clock, no goroutine, and no knowledge of
// the public API or the simulator (internal/layering_test.go keeps it so).
//
// It holds so far the machines that were already pure: the keeper (when
// to renew a lease, and when to stop trusting it), the slot history (who
// owned each slot between two maps), the change log (which members a run
// of maps left untouched), the load meter and the core's timers.
package core
