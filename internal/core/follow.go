package core

import "time"

// Follower decides how a member follows a range of etcd's keys (its view,
// its own key, the leader's whole rink, the heirs' readiness): the
// production watcher and the simulator's both carry out what it says.
//
// One attempt opens the watch first, from the revision etcd is at then,
// waits for etcd to say it is open, then lists the range. The listing is
// handed on, then every event of the watch newer than the listing. The
// watch is opened before the listing rather than from the listing's
// revision: etcd serves a watch that starts in the past from a loop that
// runs every 100 ms until it catches up, and a write landing between a
// listing and such a watch would delay every event by up to that long.
// When the opening, the listing or the watch fails, the attempt ends and
// another starts after a backoff; when the member asks for a new listing,
// at once.
//
// Invariant: listed is the revision of the listing handed on in the
// current attempt (0 before it); every event at or below it is in that
// listing, so none is handed on twice, and every event above it is handed
// on, so none is missed.
type Follower struct {
	b      *Backoff
	began  int64 // the clock reading the current attempt began at
	listed int64
}

// followHealthy is how long an attempt must have lasted for the waits
// after its end to start again from the shortest.
const followHealthy = int64(time.Minute)

// NewFollower returns a follower whose waits b draws.
func NewFollower(b *Backoff) *Follower { return &Follower{b: b} }

// Begin starts an attempt at clock reading now: open the watch.
func (f *Follower) Begin(now int64) {
	f.began, f.listed = now, 0
}

// Opened handles etcd's answer to the watch's opening: nil, list the
// range; else the attempt failed (see Failed).
func (f *Follower) Opened(err error) (list bool) { return err == nil }

// Listed records the revision of the listing, which the driver hands on.
func (f *Follower) Listed(rev int64) { f.listed = rev }

// Fresh returns how many of a watch response's events, given by their mod
// revisions in order, are to be handed on: those newer than the listing,
// at the end (the older ones were read with it).
func (f *Follower) Fresh(modRevs []int64) int {
	skip := 0
	for skip < len(modRevs) && modRevs[skip] <= f.listed {
		skip++
	}
	return len(modRevs) - skip
}

// Response handles each watch response before its events are handed on
// (see Fresh): broken (cancelled by etcd, compacted, the stream lost, or
// any error) ends the attempt, and again is then true, with the wait
// before the next (see Failed).
func (f *Follower) Response(broken bool, now int64) (again bool, wait time.Duration) {
	if !broken {
		return false, 0
	}
	return true, f.Failed(now)
}

// Failed ends the attempt at now, after a failure: the wait before the
// next. An attempt that had lasted a minute was healthy, and the waits
// start again from the shortest.
func (f *Follower) Failed(now int64) time.Duration {
	if now-f.began > followHealthy {
		f.b.Reset()
	}
	return f.b.Next()
}
