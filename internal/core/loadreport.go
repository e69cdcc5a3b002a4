package core

import (
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/rink-go/rink/internal/wire"
)

// LoadReporter decides what a member's load summary says and when it is
// written (see rink's load.go): every load interval it folds the units
// added into rates (LoadMeter), and a summary goes out when it changed
// noticeably since the last one written, or the member joined again since.
// Woken early (a join, a role awaited for the first time), it writes the
// last interval's rates with the roles awaited now, after ReportPause and
// at most once per tenth of an interval. One machine, driven by the
// production reporter goroutine and by the simulator.
//
// Invariants: last is the summary last written for lastInc (or the one its
// join wrote with the member key); rates is the last interval's, measured
// (ticked) once an interval has passed; woke is when the last early write
// went out.
type LoadReporter struct {
	Interval, Window time.Duration

	meter   *LoadMeter
	rates   wire.LoadReport
	ticked  bool
	last    wire.LoadReport
	lastInc *Inc
	woke    time.Time
	force   bool // write at the next decision, changed or not (see Forget)
}

// ReportPause is how long a member waits, after it joins or awaits a new
// role, before it writes its summary: a burst of AwaitRole calls (a member
// awaiting its roles right after New) costs one write.
const ReportPause = 50 * time.Millisecond

// NewLoadReporter returns a reporter for the load interval and window.
func NewLoadReporter(interval, window time.Duration) *LoadReporter {
	return &LoadReporter{Interval: interval, Window: window, meter: NewLoadMeter()}
}

// Tick folds in the units added over the interval that ends at now, for
// the slots held now (held, ascending); roles gives the roles awaited in a
// slot.
func (l *LoadReporter) Tick(now time.Time, held []HeldLoad, roles func(s int) int32) {
	l.rates, l.ticked = l.meter.Tick(now, held, roles, l.Interval, l.Window), true
}

// WakeDelay is how long a reporter woken at now waits before it writes:
// ReportPause, and longer while the last early write is less than a tenth
// of an interval old (a member that keeps awaiting new roles writes no more
// often).
func (l *LoadReporter) WakeDelay(now time.Time) time.Duration {
	return max(ReportPause, l.woke.Add(l.Interval/10).Sub(now))
}

// Woke notes an early write made at now.
func (l *LoadReporter) Woke(now time.Time) { l.woke = now }

// LoadNext is what the reporter decided (see Next).
type LoadNext struct {
	// Report is the summary: the last interval's rates, with the roles
	// awaited in the slots owned and in the others.
	Report wire.LoadReport
	// Joined: inc's join wrote its summary with the member key; the
	// reporter takes it as the last written (the driver reports it).
	Joined bool
	// Write: send LoadTxn(Report).
	Write bool
}

// Next decides, for the incarnation inc (nil: none; live: it has not
// ended), whether to write a summary now: roles gives the roles awaited in
// a slot, owned the slots the applied map gives this member, and byLoad
// whether that map is balanced by load (an idle summary is not written
// again while it is not).
func (l *LoadReporter) Next(inc *Inc, live bool, roles func(s int) int32, owned []int, byLoad bool) LoadNext {
	rep := wire.WithRoles(l.rates, roles, owned)
	rep.Unmeasured = !l.ticked
	var n LoadNext
	if inc != nil && inc != l.lastInc && inc.JoinLoad != nil {
		l.last, l.lastInc = *inc.JoinLoad, inc // (written with the member key)
		n.Joined = true
	}
	n.Report = rep
	n.Write = inc != nil && live && (l.force || inc != l.lastInc || LoadChanged(l.last, rep) && (byLoad || !wire.IdleAlike(l.last, rep)) ||
		byLoad && l.matured(rep))
	return n
}

// matured reports whether next lists a slot with a rate that has been held
// for half a load window, which the last summary written listed as held
// for less: the leader takes a slot's rate only from then on (a new
// owner's first figures are noisy: see rink's estimate), so a summary
// that changed too little to be written again would leave it with the
// slot's previous figure for good, stale when the load moved meanwhile.
// It costs at most one write per slot gained.
func (l *LoadReporter) matured(next wire.LoadReport) bool {
	mature := l.Window.Seconds() / 2
	young := map[int]bool{}
	for _, e := range l.last.Slots {
		if e.Age < mature {
			young[e.Slot] = true
		}
	}
	for _, e := range next.Slots {
		if young[e.Slot] && e.Age >= mature && e.Rate > 0 {
			return true
		}
	}
	return false
}

// LoadTxn is the request that writes rep for inc: the member's load key,
// bound to inc's lease, if the member key is still inc's.
func LoadTxn(keys wire.Keys, member string, inc *Inc, rep wire.LoadReport) *etcdserverpb.TxnRequest {
	key := keys.Member(member)
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{wire.CreateRevisionEq(key, inc.CreateRev), wire.LeaseEq(key, inc.Lease)},
		Success: []*etcdserverpb.RequestOp{wire.Put(keys.Load(member), string(rep.Encode()), inc.Lease)},
	}
}

// Written notes that rep was written for inc.
func (l *LoadReporter) Written(inc *Inc, rep wire.LoadReport) {
	l.last, l.lastInc, l.force = rep, inc, false
}

// Forget has the next decision write the summary whether or not it
// changed: the leader says it does not have it (see
// wire.AckFloor.Unreported), since an operator deleted the load key or a
// restore erased it, and the member does not follow its load key itself.
func (l *LoadReporter) Forget() { l.force = true }
