package rink

import (
	"net/http"
)

// Ready reports whether the rink's leader (the member that coordinates the
// rink, see Rank.Leader) has listed this member — ranked it, or listed it
// as waiting to be ranked — at least once in this Rink's life, and
// Shutdown has not begun. It never goes back to false on its own: a
// fence (etcd slow or unreachable for 7/8 of the TTL) and the rejoin that
// follows leave it true, so that an etcd hiccup cannot turn every replica
// of a service NotReady at once and empty its endpoints.
//
// It is the readiness rule for a rolling deploy: once the new replica is
// Ready, the rink's leader knows it, and the old replica's Shutdown hands
// its index and roles to it (or to an earlier newcomer) at once. Rank tells more
// precisely where the member stands at each moment.
func (r *Rink) Ready() bool {
	select {
	case <-r.stopping:
		return false
	default:
		return r.listed.Load()
	}
}

// ReadyHandler returns an http.Handler for a readiness probe: it answers
// 200 while Ready is true and 503 otherwise, with a one-line body.
//
//	http.Handle("/readyz", r.ReadyHandler())
func (r *Rink) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.Ready() {
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not listed by the rink's leader yet\n"))
	})
}
