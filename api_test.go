package rink

import (
	"fmt"
	"testing"
)

func TestEventKindString(t *testing.T) {
	for _, tc := range []struct {
		kind EventKind
		want string
	}{
		{EventAcquired, "acquired"},
		{EventReleased, "released"},
		{EventFenced, "fenced"},
		{EventRejoined, "rejoined"},
		{EventMapApplied, "map-applied"},
		{EventRankChanged, "rank-changed"},
		{EventRankChanged + 1, "EventKind(6)"},
		{-1, "EventKind(-1)"},
	} {
		if got := tc.kind.String(); got != tc.want {
			t.Errorf("EventKind(%d).String() = %q, want %q", int(tc.kind), got, tc.want)
		}
		if got := fmt.Sprint(tc.kind); got != tc.want {
			t.Errorf("fmt.Sprint(EventKind(%d)) = %q, want %q", int(tc.kind), got, tc.want)
		}
	}
}
