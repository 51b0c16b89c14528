package flightcache_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
)

func TestNewRejectsOutOfRangeOptions(t *testing.T) {
	local := newLocal[int](t, nil)
	cases := []struct {
		name  string
		field string
		set   func(o *flightcache.Options[int])
	}{
		{"no tier", "Local", func(o *flightcache.Options[int]) { o.Local = nil }},
		{"TTL below 1s", "TTL", func(o *flightcache.Options[int]) { o.TTL = time.Second - 1 }},
		{"TTL above 24h", "TTL", func(o *flightcache.Options[int]) { o.TTL = 24*time.Hour + 1 }},
		{"negative TTL", "TTL", func(o *flightcache.Options[int]) { o.TTL = -time.Minute }},
		{"Jitter above 0.5", "Jitter", func(o *flightcache.Options[int]) { o.Jitter = 0.51 }},
		{"negative Jitter", "Jitter", func(o *flightcache.Options[int]) { o.Jitter = -0.2 }},
		{"NaN Jitter", "Jitter", func(o *flightcache.Options[int]) { o.Jitter = math.NaN() }},
		{"NegativeTTL above TTL", "NegativeTTL", func(o *flightcache.Options[int]) { o.TTL = 10 * time.Second; o.NegativeTTL = 11 * time.Second }},
		{"NegativeTTL below 1s", "NegativeTTL", func(o *flightcache.Options[int]) { o.NegativeTTL = time.Millisecond }},
		{"LoaderTimeout below 1ms", "LoaderTimeout", func(o *flightcache.Options[int]) { o.LoaderTimeout = time.Microsecond }},
		{"LoaderTimeout above 10m", "LoaderTimeout", func(o *flightcache.Options[int]) { o.LoaderTimeout = 11 * time.Minute }},
		{"SoftTimeout not below LoaderTimeout", "SoftTimeout", func(o *flightcache.Options[int]) { o.LoaderTimeout = time.Second; o.SoftTimeout = time.Second }},
		{"negative SoftTimeout", "SoftTimeout", func(o *flightcache.Options[int]) { o.SoftTimeout = -1 }},
		{"negative StaleFor", "StaleFor", func(o *flightcache.Options[int]) { o.StaleFor = -1 }},
		{"StaleFor above 7 days", "StaleFor", func(o *flightcache.Options[int]) { o.StaleFor = 8 * 24 * time.Hour }},
		{"Beta above 10", "Beta", func(o *flightcache.Options[int]) { o.Beta = 10.5 }},
		{"negative Beta", "Beta", func(o *flightcache.Options[int]) { o.Beta = -1 }},
		{"NaN Beta", "Beta", func(o *flightcache.Options[int]) { o.Beta = math.NaN() }},
		{"FailureThrottle above 1m", "FailureThrottle", func(o *flightcache.Options[int]) { o.FailureThrottle = time.Minute + 1 }},
		{"negative MaxInFlight", "MaxInFlight", func(o *flightcache.Options[int]) { o.MaxInFlight = -1 }},
		{"negative MaxWaiters", "MaxWaiters", func(o *flightcache.Options[int]) { o.MaxWaiters = -1 }},
		{"MaxKeyLen above 64KiB", "MaxKeyLen", func(o *flightcache.Options[int]) { o.MaxKeyLen = 64<<10 + 1 }},
		{"negative MaxKeyLen", "MaxKeyLen", func(o *flightcache.Options[int]) { o.MaxKeyLen = -1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := flightcache.Options[int]{Local: local}
			tc.set(&o)
			c, err := flightcache.New(o)
			if c != nil || err == nil {
				t.Fatalf("New accepted %s", tc.name)
			}
			var ce *flightcache.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, flightcache.ErrInvalidConfig) {
				t.Fatalf("err = %v, want a *ConfigError for %s matching ErrInvalidConfig", err, tc.field)
			}
		})
	}
}

func TestNewAcceptsInclusiveBounds(t *testing.T) {
	local := newLocal[int](t, nil)
	cases := []struct {
		name string
		set  func(o *flightcache.Options[int])
	}{
		{"TTL 1s", func(o *flightcache.Options[int]) { o.TTL = time.Second }},
		{"TTL 24h", func(o *flightcache.Options[int]) { o.TTL = 24 * time.Hour }},
		{"Jitter 0.5", func(o *flightcache.Options[int]) { o.Jitter = 0.5 }},
		{"DisableJitter", func(o *flightcache.Options[int]) { o.Jitter = flightcache.DisableJitter }},
		{"NegativeTTL = TTL", func(o *flightcache.Options[int]) { o.TTL = 2 * time.Second; o.NegativeTTL = 2 * time.Second }},
		{"short TTL caps default NegativeTTL", func(o *flightcache.Options[int]) { o.TTL = 2 * time.Second }},
		{"LoaderTimeout 1ms", func(o *flightcache.Options[int]) { o.LoaderTimeout = time.Millisecond }},
		{"Beta 10", func(o *flightcache.Options[int]) { o.Beta = 10 }},
		{"everything on", func(o *flightcache.Options[int]) {
			o.StaleFor, o.SoftTimeout, o.FailureThrottle = time.Hour, time.Second, time.Minute
			o.EarlyRefresh, o.MaxInFlight, o.MaxWaiters, o.MaxKeyLen = true, 10, 10, 64<<10
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := flightcache.Options[int]{Local: local}
			tc.set(&o)
			c, err := flightcache.New(o)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			c.Close()
		})
	}
}
