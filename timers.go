package rink

import "time"

// now is the core's wall-and-monotonic time: the simulator's virtual time
// when it sets nowFn, time.Now otherwise.
func (r *Rink) now() time.Time {
	if r.nowFn != nil {
		return r.nowFn()
	}
	return time.Now()
}

// clock is the core's fence clock (see fenceClock): the simulator's when it
// sets clockFn.
func (r *Rink) clock() int64 {
	if r.clockFn != nil {
		return r.clockFn()
	}
	return fenceClock()
}
