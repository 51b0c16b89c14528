package memstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
)

// The core's tests run the Cache on a map-backed store of their own
// (memstore is another module); these run it on memstore, for what only
// memstore does: its clock, its Cost function inside otter, its typed nil.

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newCache(t *testing.T, local *memstore.Store[string], opts flightcache.Options[string]) *flightcache.Cache[string] {
	t.Helper()
	t.Cleanup(local.Close)
	opts.Local, opts.Logger = local, quietLogger
	c, err := flightcache.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func fetch(t *testing.T, c *flightcache.Cache[string], key string, loads *atomic.Int64) flightcache.Result[string] {
	t.Helper()
	r, err := c.Fetch(context.Background(), key, func(context.Context) (string, error) {
		loads.Add(1)
		return "v", nil
	})
	if err != nil {
		t.Fatalf("Fetch(%q): %v", key, err)
	}
	return r
}

// A Cache without Options.Now keeps time by the Store's clock (Store.Clock),
// so the two agree on expiry.
func TestCacheWithoutNowFollowsTheStoresClock(t *testing.T) {
	clk := &testClock{}
	clk.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	local, err := memstore.New(memstore.Options[string]{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t, local, flightcache.Options[string]{TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var loads atomic.Int64
	if r := fetch(t, c, "k", &loads); r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("first Fetch: %v, want loaded", r.Outcome)
	}
	clk.Advance(30 * time.Second)
	if r := fetch(t, c, "k", &loads); r.Outcome != flightcache.OutcomeHitLocal || r.Age != 30*time.Second {
		t.Fatalf("Fetch 30s later by the store's clock: %v, age %v; want hit_local, 30s", r.Outcome, r.Age)
	}
	clk.Advance(31 * time.Second) // past the TTL by the store's clock only
	if r := fetch(t, c, "k", &loads); r.Outcome != flightcache.OutcomeLoaded || loads.Load() != 2 {
		t.Fatalf("Fetch past the TTL: %v after %d loads; want loaded, 2", r.Outcome, loads.Load())
	}
}

// A Cost function that panics inside otter's Set reaches the Cache's
// caller, and neither otter nor the Cache keeps a lock: the key keeps
// working.
func TestPanickingCostKeepsTheKeyUsable(t *testing.T) {
	local, err := memstore.New(memstore.Options[string]{
		MaxCost: 1 << 20,
		Cost: func(key string, it driver.Item[string]) uint32 {
			if it.Value == "boom" {
				panic("cost of " + key)
			}
			return 1
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t, local, flightcache.Options[string]{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Set of the value whose Cost panics did not panic")
			}
		}()
		_ = c.Set(context.Background(), "k", "boom")
	}()
	type outcome struct {
		setErr, fetchErr error
		r                flightcache.Result[string]
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		o.setErr = c.Set(context.Background(), "k", "ok")
		o.r, o.fetchErr = c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "loaded", nil })
		done <- o
	}()
	select {
	case o := <-done:
		if o.setErr != nil || o.fetchErr != nil || o.r.Outcome != flightcache.OutcomeHitLocal || o.r.Value != "ok" {
			t.Fatalf("after the panic: Set = %v, Fetch = %v %q, %v; want the value Set, from the local tier", o.setErr, o.r.Outcome, o.r.Value, o.fetchErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Set and Fetch after the panic still blocked after 10s")
	}
}

// A nil *Store as Local is refused by New with a *ConfigError on Local.
func TestTypedNilStoreIsAConfigError(t *testing.T) {
	var local *memstore.Store[string]
	c, err := flightcache.New(flightcache.Options[string]{Local: local, Logger: quietLogger})
	if c != nil {
		c.Close()
	}
	var ce *flightcache.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Local" {
		t.Fatalf("New with a nil *memstore.Store = %v, want a *ConfigError on Local", err)
	}
}

// The Cache reads its clock once per local hit and hands that reading to
// the Store (GetAt): the two agree on the boundary instant. With no
// StaleFor, FreshUntil is StaleUntil: 1ns before it the Cache serves the
// local copy, at it the Cache loads, and so does the Store's GetAt.
func TestCacheAndStoreAgreeAtTheBoundary(t *testing.T) {
	clk := &testClock{}
	clk.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	local, err := memstore.New(memstore.Options[string]{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t, local, flightcache.Options[string]{TTL: time.Minute, Jitter: flightcache.DisableJitter, Now: clk.Now})
	var loads atomic.Int64
	fetch(t, c, "k", &loads)
	clk.Advance(time.Minute - time.Nanosecond)
	if r := fetch(t, c, "k", &loads); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("Fetch 1ns before the TTL ends: %v, want hit_local", r.Outcome)
	}
	clk.Advance(time.Nanosecond)
	if _, ok := local.GetAt("k", clk.Now()); ok {
		t.Fatal("the Store's GetAt returned the item at its StaleUntil")
	}
	if r := fetch(t, c, "k", &loads); r.Outcome != flightcache.OutcomeLoaded || loads.Load() != 2 {
		t.Fatalf("Fetch at the instant the TTL ends: %v after %d loads; want loaded, 2", r.Outcome, loads.Load())
	}
}

// A Cache with its own Options.Now over a Store on the real clock: the
// Cache's reading decides. Past StaleUntil by the Cache's clock the item is
// served neither fresh nor as the fallback of a failed load, although the
// Store's own clock says it has an hour to live; between FreshUntil and
// StaleUntil it is the fallback.
func TestItemExpiredByTheCachesClockIsNeverServed(t *testing.T) {
	clk := &testClock{}
	clk.ns.Store(time.Now().UnixNano())
	local, err := memstore.New(memstore.Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t, local, flightcache.Options[string]{TTL: 30 * time.Minute, StaleFor: 30 * time.Minute,
		Jitter: flightcache.DisableJitter, Now: clk.Now})
	var loads atomic.Int64
	fetch(t, c, "k", &loads)
	failing := func(context.Context) (string, error) { return "", errors.New("origin down") }

	clk.Advance(45 * time.Minute) // stale by the Cache's clock
	if r, err := c.Fetch(context.Background(), "k", failing); r.Outcome != flightcache.OutcomeStale || r.Value != "v" {
		t.Fatalf("Fetch between FreshUntil and StaleUntil, load failing: %v %q, %v; want the stale value", r.Outcome, r.Value, err)
	}
	clk.Advance(15 * time.Minute) // at StaleUntil by the Cache's clock
	if _, ok := local.Get("k"); !ok {
		t.Fatal("the Store lost the item before its StaleUntil on its own clock")
	}
	r, err := c.Fetch(context.Background(), "k", failing)
	if err == nil || r.Outcome != flightcache.OutcomeLoadFailed || r.Value != "" {
		t.Fatalf("Fetch at StaleUntil by the Cache's clock, load failing: %v %q, %v; want load_failed and no value", r.Outcome, r.Value, err)
	}
}
