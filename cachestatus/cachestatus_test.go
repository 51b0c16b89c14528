package cachestatus_test

import (
	"testing"
	"time"

	"github.com/flightcache/flightcache/cachestatus"
)

func TestEntryRendersParametersInTheRFCsOrder(t *testing.T) {
	for _, tc := range []struct {
		e    cachestatus.Entry
		want string
	}{
		{cachestatus.Entry{Cache: "c", Hit: true, TTL: 41500 * time.Millisecond, HasTTL: true}, "c; hit; ttl=42"},
		{cachestatus.Entry{Cache: "c", Fwd: cachestatus.FwdMiss, Stored: true, Collapsed: true, TTL: 300 * time.Second, HasTTL: true, Detail: "coalesced-local"},
			"c; fwd=miss; stored; collapsed; ttl=300; detail=coalesced-local"},
		{cachestatus.Entry{Cache: "c", Fwd: cachestatus.FwdStale, FwdStatus: 502, TTL: -3500 * time.Millisecond, HasTTL: true}, "c; fwd=stale; fwd-status=502; ttl=-4"},
		{cachestatus.Entry{Cache: "my cache", Detail: "not a token"}, `"my cache"; detail="not a token"`},
		{cachestatus.Entry{Cache: "c", HasTTL: true}, "c; ttl=0"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestTTLSecondsRoundsAwayFromZero(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Millisecond: 1, -time.Millisecond: -1, 2 * time.Second: 2, 0: 0} {
		if got := cachestatus.TTLSeconds(d); got != want {
			t.Errorf("TTLSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
