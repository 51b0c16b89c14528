package flightcache_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// A shared entry that claims to be fresh for hours (written by an instance
// with a longer TTL, or forged by anyone who can write to the shared tier)
// is served fresh from this instance's local tier for at most
// Options.MaxTTL; after that the instance asks the shared tier again.
func TestSharedEntryIsFreshAtMostMaxTTL(t *testing.T) {
	const maxTTL = 2 * time.Minute
	shared := newMapShared(time.Now)
	data, _ := json.Marshal(&product{ID: "1", Name: "claims 12h"})
	now := time.Now()
	shared.m["p:1"] = driver.Entry{Value: data, Meta: driver.Meta{
		FreshUntil: now.Add(12 * time.Hour), StaleUntil: now.Add(13 * time.Hour), LoadedAt: now,
	}}
	clock := newFakeClock()
	local := newLocal[*product](t, clock)
	c := clocked(t, clock, flightcache.Options[*product]{
		Local: local, Shared: shared, TTL: time.Minute, MaxTTL: maxTTL, Jitter: flightcache.DisableJitter,
	})
	var o origin

	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitShared)
	it, ok := local.Get("p:1")
	if !ok {
		t.Fatal("the shared hit was not copied into the local tier")
	}
	if limit := clock.Now().Add(maxTTL); it.FreshUntil.After(limit) {
		t.Fatalf("local copy fresh until %v, want at most now+MaxTTL (%v)", it.FreshUntil, limit)
	}
	if it.StaleUntil.After(it.FreshUntil) {
		t.Fatalf("local copy stale until %v, want at most its FreshUntil %v (StaleFor is 0)", it.StaleUntil, it.FreshUntil)
	}

	clock.Advance(maxTTL - time.Second)
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
	if n := shared.gets.Load(); n != 1 {
		t.Fatalf("shared reads = %d within MaxTTL, want 1", n)
	}
	clock.Advance(2 * time.Second) // MaxTTL and a second after the read
	r := mustFetch(t, c, "p:1", o.load("1"))
	if r.Outcome == flightcache.OutcomeHitLocal {
		t.Fatalf("served from the local tier %v after the read; the entry may stay fresh only MaxTTL (%v)", maxTTL+time.Second, maxTTL)
	}
	if n := shared.gets.Load(); n != 2 {
		t.Fatalf("shared reads = %d past MaxTTL, want 2 (the local copy expired, the shared tier is asked again)", n)
	}
	if o.calls.Load() != 0 {
		t.Fatalf("the origin was asked %d times; the shared entry is still there", o.calls.Load())
	}
}

// Reading a shared entry does not renew it: one loaded 90s ago that claims
// 12h is fresh here until its load plus Options.MaxTTL, 30s after the read
// with a MaxTTL of 2 minutes, and the Age the Result reports says so.
func TestSharedEntryIsFreshAtMostMaxTTLFromItsLoad(t *testing.T) {
	const maxTTL = 2 * time.Minute
	const age = 90 * time.Second
	shared := newMapShared(time.Now)
	data, _ := json.Marshal(&product{ID: "1", Name: "claims 12h"})
	now := time.Now()
	shared.m["p:1"] = driver.Entry{Value: data, Meta: driver.Meta{
		FreshUntil: now.Add(12 * time.Hour), StaleUntil: now.Add(13 * time.Hour), LoadedAt: now.Add(-age),
	}}
	clock := newFakeClock()
	local := newLocal[*product](t, clock)
	c := clocked(t, clock, flightcache.Options[*product]{
		Local: local, Shared: shared, TTL: time.Minute, MaxTTL: maxTTL, Jitter: flightcache.DisableJitter,
	})
	var o origin

	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if r.Age < age-time.Second || r.Age > age+time.Second {
		t.Fatalf("Age = %v, want about %v", r.Age, age)
	}
	it, ok := local.Get("p:1")
	if !ok {
		t.Fatal("the shared hit was not copied into the local tier")
	}
	if limit := clock.Now().Add(maxTTL - age + time.Second); it.FreshUntil.After(limit) {
		t.Fatalf("local copy fresh until %v, want at most its load plus MaxTTL (%v)", it.FreshUntil, limit)
	}
	clock.Advance(maxTTL - age + 2*time.Second)
	if r := mustFetch(t, c, "p:1", o.load("1")); r.Outcome == flightcache.OutcomeHitLocal {
		t.Fatalf("served fresh from the local tier %v after its load; MaxTTL is %v", maxTTL+2*time.Second, maxTTL)
	}
}

// A loader's SetTTL longer than Options.MaxTTL is cut to it, in Fetch and
// in FetchMany.
func TestSetTTLIsCappedAtMaxTTL(t *testing.T) {
	const maxTTL = 2 * time.Minute
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Minute, MaxTTL: maxTTL, Jitter: flightcache.DisableJitter})
	var calls atomic.Int64
	load := func(ctx context.Context) (*product, error) {
		calls.Add(1)
		flightcache.SetTTL(ctx, time.Hour)
		return &product{ID: "1"}, nil
	}
	batch := func(ctx context.Context, keys []string) (map[string]*product, error) {
		calls.Add(1)
		flightcache.SetTTL(ctx, time.Hour)
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k}
		}
		return m, nil
	}
	wantOutcome(t, mustFetch(t, c, "p:1", load).Outcome, flightcache.OutcomeLoaded)
	if rs := c.FetchMany(context.Background(), []string{"b:1"}, batch); rs[0].Err != nil || rs[0].Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("FetchMany = %+v", rs[0])
	}
	clock.Advance(maxTTL - time.Second)
	wantOutcome(t, mustFetch(t, c, "p:1", load).Outcome, flightcache.OutcomeHitLocal)
	if rs := c.FetchMany(context.Background(), []string{"b:1"}, batch); rs[0].Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("FetchMany within MaxTTL: %v, want a local hit", rs[0].Outcome)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("loads = %d within MaxTTL, want 2", n)
	}
	clock.Advance(2 * time.Second)
	wantOutcome(t, mustFetch(t, c, "p:1", load).Outcome, flightcache.OutcomeLoaded)
	if rs := c.FetchMany(context.Background(), []string{"b:1"}, batch); rs[0].Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("FetchMany past MaxTTL: %v, want a load (SetTTL(1h) capped at MaxTTL)", rs[0].Outcome)
	}
}

func TestMaxTTLOption(t *testing.T) {
	local := newLocal[int](t, nil)
	for _, tc := range []struct {
		name string
		set  func(o *flightcache.Options[int])
	}{
		{"below TTL", func(o *flightcache.Options[int]) { o.TTL = time.Minute; o.MaxTTL = time.Minute - 1 }},
		{"below the default TTL", func(o *flightcache.Options[int]) { o.MaxTTL = time.Minute }},
		{"above 24h", func(o *flightcache.Options[int]) { o.MaxTTL = flightcache.MaxTTL + 1 }},
		{"negative", func(o *flightcache.Options[int]) { o.MaxTTL = -time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := flightcache.Options[int]{Local: local}
			tc.set(&o)
			c, err := flightcache.New(o)
			var ce *flightcache.ConfigError
			if c != nil || !errors.As(err, &ce) || ce.Field != "MaxTTL" || !errors.Is(err, flightcache.ErrInvalidConfig) {
				t.Fatalf("New = %v, %v; want a *ConfigError for MaxTTL", c, err)
			}
		})
	}
	for _, o := range []flightcache.Options[int]{
		{Local: local, TTL: time.Minute, MaxTTL: time.Minute},
		{Local: local, TTL: time.Minute, MaxTTL: flightcache.MaxTTL},
		{Local: local, TTL: flightcache.MaxTTL},
		{Local: local},
	} {
		c, err := flightcache.New(o)
		if err != nil {
			t.Fatalf("New(TTL %v, MaxTTL %v): %v", o.TTL, o.MaxTTL, err)
		}
		c.Close()
	}
}
