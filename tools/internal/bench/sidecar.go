package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
	"github.com/rink-go/rink/tools/internal/rinkdhttp"
	"github.com/rink-go/rink/tools/rinkd"
)

// Sidecar measures, alternately in one run, n graceful handovers of each
// of three kinds between two members, the holder of a role leaving:
//
//   - in-process: library members, as in Handover (the holder, not the
//     leader, shuts down; the gap from its release to the heir's
//     acquisition, by the members' events);
//   - drain: each member a rinkd.Server in this process on loopback ports,
//     its app an HTTP/JSON client (rinkdhttp) that opened a session and
//     awaits the role; the holder's sidecar is drained (POST /v1/drain, as
//     a preStop hook would), its app stops when it reads REVOKED and
//     releases the role (POST /v1/release);
//   - close: as drain, but the holder's app stops and closes its session.
//
// The gaps through rinkd are measured at the apps' side: from the old
// app's stop (reading REVOKED, or right before it closes its session) to
// the new app reading GRANTED. It reports each kind's min, p50 and max,
// the p50 of both rinkd kinds together against the in-process p50
// (p50_to_inprocess, target <= 1.5), and, to tell where the time goes,
// the p50s of the members' gap (the old app's stop to the heir member's
// acquisition: the release call, rinkd's drain wait, the departure) and of
// the deliveries (the heir member's acquisition to its app reading
// GRANTED; for drain, the holder member's release to its app reading
// REVOKED, and the app's ReleaseRole call; for close, the app's close to
// its member's release). overlaps counts the members' overlaps (as Handover's) and the
// handovers whose new app read GRANTED before the old one stopped.
func Sidecar(env Env, n int) (Sample, error) {
	var inproc, inprocApp, drain, closed, grantTrip, revokeTrip, releaseCall, closeNotice []time.Duration
	memberGap := map[bool][]time.Duration{}
	bad := 0
	for i := 0; i < n; i++ {
		g, ga, b, err := inprocessHandover(env)
		if err != nil {
			return nil, fmt.Errorf("in-process handover %d: %w", i+1, err)
		}
		inproc, inprocApp, bad = append(inproc, g...), append(inprocApp, ga), bad+b
		for _, byDrain := range []bool{true, false} {
			h, err := sidecarHandover(env, byDrain)
			if err != nil {
				return nil, fmt.Errorf("rinkd handover %d (drain %v): %w", i+1, byDrain, err)
			}
			bad += h.overlaps
			if byDrain {
				drain = append(drain, h.gap)
				revokeTrip, releaseCall = append(revokeTrip, h.revokeTrip), append(releaseCall, h.releaseCall)
			} else {
				closed, closeNotice = append(closed, h.gap), append(closeNotice, h.closeNotice)
			}
			memberGap[byDrain], grantTrip = append(memberGap[byDrain], h.memberGap), append(grantTrip, h.grantTrip)
		}
	}
	s := Sample{"overlaps": float64(bad)}
	figures := func(name string, ds []time.Duration) {
		s[name+"_min_ms"] = ms(percentile(ds, 0))
		s[name+"_p50_ms"] = ms(percentile(ds, 0.5))
		s[name+"_max_ms"] = ms(maxDur(ds))
	}
	figures("inprocess", inproc)
	figures("sidecar", append(append([]time.Duration(nil), drain...), closed...))
	figures("sidecar_drain", drain)
	figures("sidecar_close", closed)
	s["sidecar_drain_member_gap_p50_ms"] = ms(percentile(memberGap[true], 0.5))
	s["sidecar_close_member_gap_p50_ms"] = ms(percentile(memberGap[false], 0.5))
	s["sidecar_grant_trip_p50_ms"] = ms(percentile(grantTrip, 0.5))
	s["sidecar_revoke_trip_p50_ms"] = ms(percentile(revokeTrip, 0.5))
	s["sidecar_release_call_p50_ms"] = ms(percentile(releaseCall, 0.5))
	s["sidecar_close_notice_p50_ms"] = ms(percentile(closeNotice, 0.5))
	s["inprocess_app_p50_ms"] = ms(percentile(inprocApp, 0.5))
	s["p50_to_inprocess_app"] = s["sidecar_p50_ms"] / s["inprocess_app_p50_ms"]
	s["p50_to_inprocess"] = s["sidecar_p50_ms"] / s["inprocess_p50_ms"]
	s["p50_drain_to_inprocess"] = s["sidecar_drain_p50_ms"] / s["inprocess_p50_ms"]
	s["p50_close_to_inprocess"] = s["sidecar_close_p50_ms"] / s["inprocess_p50_ms"]
	return s, nil
}

// inprocessHandover is one handover of the handover scenario (without its
// floor): the gaps of the role's slot by the members' events, the gap at
// the apps' side (the holder's role context ending to the heir's
// AwaitRoleContext returning), and the overlaps.
func inprocessHandover(env Env) ([]time.Duration, time.Duration, int, error) {
	rec := &recorder{}
	_, ms, err := cluster(env, rec, "sidecar-inprocess", 2, rink.WithRebalanceDelay(0), rink.WithSessionTTL(2*time.Second))
	if err != nil {
		return nil, 0, 0, err
	}
	defer stopAll(ms)
	holder, heir := ms[1], ms[0] // the first member leads
	role := ""
	for _, r := range roles(4096) {
		if o, _ := holder.r.Owner(r); o == holder.r.Member() {
			role = r
			break
		}
	}
	rctx, ok := holder.r.Get(role)
	if !ok {
		return nil, 0, 0, fmt.Errorf("the holder does not hold %s", role)
	}
	// The apps: the holder's stops when its role context ends; the heir's
	// starts when its AwaitRoleContext returns.
	stopped := make(chan time.Time, 1)
	go func() {
		<-rctx.Done()
		stopped <- time.Now()
	}()
	awaited := make(chan error, 1)
	var started time.Time
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := heir.r.AwaitRoleContext(ctx, role)
		started = time.Now()
		awaited <- err
	}()
	mark := time.Now()
	if err := holder.r.Shutdown(context.Background()); err != nil {
		<-awaited
		return nil, 0, 0, err
	}
	if err := <-awaited; err != nil {
		return nil, 0, 0, err
	}
	appGap := started.Sub(<-stopped)
	events := rec.snapshot()
	gaps := slotMoves(events, slotOf(role), mark)
	if len(gaps) == 0 {
		return nil, 0, 0, fmt.Errorf("no move of %s's slot seen", role)
	}
	return gaps, appGap, overlaps(events), nil
}

// sidecarMember is a rinkd.Server with its etcd client and its app.
type sidecarMember struct {
	cli  *clientv3.Client
	srv  *rinkd.Server
	app  *rinkdhttp.Client
	sess *rinkdhttp.Session
}

func startSidecar(env Env, rinkName, name string, rec *recorder) (*sidecarMember, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	srv, err := rinkd.New(context.Background(), rinkd.Config{Client: cli, Rink: rinkName, Member: name, TTL: 2 * time.Second,
		Options: []rink.Option{rink.WithRebalanceDelay(0), rink.WithEvents(rec.observe)}})
	if err != nil {
		cli.Close()
		return nil, err
	}
	m := &sidecarMember{cli: cli, srv: srv}
	addrs, err := srv.Start("127.0.0.1:0", "127.0.0.1:0", "")
	if err != nil {
		m.stop()
		return nil, err
	}
	m.app = rinkdhttp.New(addrs.HTTP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// (The session outlives ctx: Open's ctx bounds only the wait.)
	m.sess, err = m.app.Open(context.WithoutCancel(ctx))
	if err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

// stop closes the app's session (if it still has one), then stops rinkd.
func (m *sidecarMember) stop() {
	if m.sess != nil {
		m.sess.Close()
	}
	if m.app != nil {
		m.app.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = m.srv.Shutdown(ctx)
	cancel()
	m.cli.Close()
}

// sidecarResult is one handover through rinkd.
type sidecarResult struct {
	gap, memberGap, grantTrip, revokeTrip time.Duration
	releaseCall                           time.Duration // drain: the app's ReleaseRole call
	closeNotice                           time.Duration // close: the app's close to its member's release
	overlaps                              int
}

// sidecarHandover runs one handover through rinkd: the holder's sidecar
// drained (byDrain) or its app's session closed.
func sidecarHandover(env Env, byDrain bool) (sidecarResult, error) {
	var res sidecarResult
	rec := &recorder{}
	name := nextRink("sidecar")
	var ms []*sidecarMember
	defer func() {
		for _, m := range ms {
			m.stop()
		}
	}()
	for i := 0; i < 2; i++ {
		m, err := startSidecar(env, name, fmt.Sprint("m", i), rec)
		if err != nil {
			return res, err
		}
		ms = append(ms, m)
		if i == 0 {
			if err := until(10*time.Second, "first member ranked", func() bool { return m.sess.Rank().Index == 0 && !m.sess.Rank().Waiting }); err != nil {
				return res, err
			}
		}
	}
	if err := until(30*time.Second, "members settled", sidecarSettled(rec, ms)); err != nil {
		return res, err
	}
	holder, heir := ms[1], ms[0] // the first member leads
	held := heldBy(rec.snapshot())
	role := ""
	for _, r := range roles(4096) {
		if held[slotOf(r)] == holder.sess.Member {
			role = r
			break
		}
	}
	if role == "" {
		return res, errors.New("the holder holds no role")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hold, err := holder.app.Await(ctx, holder.sess.ID, role)
	if err != nil {
		return res, err
	}
	defer hold.Close()
	grant := nextEvent(ctx, hold)
	if grant.Kind != rinkdhttp.Granted {
		return res, fmt.Errorf("the holder's app got %+v, not GRANTED (%v)", grant, hold.Err())
	}
	// The heir's await is in place when Await returns (with WAITING).
	wait, err := heir.app.Await(ctx, heir.sess.ID, role)
	if err != nil {
		return res, err
	}
	defer wait.Close()
	if ev := <-wait.Events(); ev.Kind != rinkdhttp.Waiting {
		return res, fmt.Errorf("the heir's app got %+v, not WAITING (%v)", ev, wait.Err())
	}

	var stopped time.Time
	drained := make(chan error, 1)
	if byDrain {
		// The operator's call (a preStop hook): a client of its own.
		op := rinkdhttp.New(holder.srv.Addrs().HTTP)
		defer op.Close()
		go func() { drained <- op.Drain(ctx) }()
		ev := nextEvent(ctx, hold)
		if ev.Kind != rinkdhttp.Revoked || ev.Token != grant.Token {
			return res, fmt.Errorf("the holder's app got %+v, not REVOKED of token %d (%v)", ev, grant.Token, hold.Err())
		}
		stopped = ev.Read // the app stops as it reads REVOKED, then releases
		if err := holder.app.Release(ctx, holder.sess.ID, role, ev.Token); err != nil {
			return res, err
		}
		res.releaseCall = time.Since(stopped)
	} else {
		stopped = time.Now() // the app has stopped, and closes its session
		holder.sess.Close()
		drained <- nil
	}
	got := nextEvent(ctx, wait)
	if got.Kind != rinkdhttp.Granted {
		return res, fmt.Errorf("the heir's app got %+v, not GRANTED (%v)", got, wait.Err())
	}
	if got.Token <= grant.Token {
		res.overlaps++
	}
	if err := <-drained; err != nil {
		return res, fmt.Errorf("drain: %w", err)
	}
	res.gap = got.Read.Sub(stopped)
	if res.gap < 0 {
		res.overlaps++
	}
	slot := slotOf(role)
	var released, acquired time.Time
	for _, e := range rec.snapshot() {
		switch {
		case e.Slot != slot:
		case e.Kind == rink.EventReleased && e.Member == holder.sess.Member:
			released = e.Time
		case e.Kind == rink.EventAcquired && e.Member == heir.sess.Member && e.Token == got.Token:
			acquired = e.Time
		}
	}
	if acquired.IsZero() || released.IsZero() {
		return res, fmt.Errorf("no events of the move of %s's slot (released %v, acquired %v)", role, released, acquired)
	}
	res.memberGap, res.grantTrip = acquired.Sub(stopped), got.Read.Sub(acquired)
	if byDrain {
		res.revokeTrip = stopped.Sub(released)
	} else {
		res.closeNotice = released.Sub(stopped)
	}
	res.overlaps += overlaps(rec.snapshot())
	return res, nil
}

// nextEvent returns aw's next event other than WAITING and RENEWED (zero
// if the stream or ctx ends first).
func nextEvent(ctx context.Context, aw *rinkdhttp.Await) rinkdhttp.RoleEvent {
	for {
		select {
		case ev, ok := <-aw.Events():
			if !ok || ev.Kind != rinkdhttp.Waiting && ev.Kind != rinkdhttp.Renewed {
				return ev
			}
		case <-ctx.Done():
			return rinkdhttp.RoleEvent{}
		}
	}
}

// sidecarSettled is settled for members run by rinkd: their ranks as
// their apps read them (GET /v1/rank: the session stream tells a new
// rank, not every new map), and every slot held by the members' events.
func sidecarSettled(rec *recorder, ms []*sidecarMember) func() bool {
	ranks := func() ([]rinkdhttp.RankInfo, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out := make([]rinkdhttp.RankInfo, len(ms))
		for i, m := range ms {
			rk, err := m.app.Rank(ctx, m.sess.ID)
			if err != nil {
				return nil, false
			}
			out[i] = rk
		}
		return out, true
	}
	return func() bool {
		before, ok := ranks()
		if !ok {
			return false
		}
		for _, rk := range before {
			if rk.Version != before[0].Version || rk.Index < 0 || rk.Waiting || rk.Size != len(ms) {
				return false
			}
		}
		if len(heldBy(rec.snapshot())) != rink.DefaultSlots {
			return false
		}
		after, ok := ranks()
		if !ok {
			return false
		}
		for i, rk := range after {
			if rk.Version != before[i].Version || rk.Index != before[i].Index {
				return false
			}
		}
		return true
	}
}
