package flightcache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// An entry written by a host whose clock runs ahead (by more than
// ClockSkew) is served, but its read time never becomes this instance's key
// fence: otherwise nothing read at a correct time would be cached for the
// key for the whole fence window, neither this instance's loads nor a
// correct peer's Sets.
func TestSharedEntryFromAClockAheadNeverBlocksCachingItsKey(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, clock), Shared: shared, Now: clock.Now,
		TTL: time.Minute, Jitter: flightcache.DisableJitter})

	// A peer whose clock is an hour ahead wrote k, fresh for 1s of real time.
	now := time.Now()
	future := now.Add(time.Hour)
	data, _ := driver.JSONCodec[*product]{}.Marshal(&product{ID: "k", Price: 100})
	shared.Set(context.Background(), "k", driver.Entry{Value: data, Meta: driver.Meta{
		LoadedAt: future, FreshUntil: now.Add(time.Second), StaleUntil: now.Add(time.Second)}})
	mustGet(t, c, "k", nil) // served (a shared hit); fence raised to now+1h

	// Later: the entry is gone, the local copy expired.
	shared.Delete(context.Background(), "k")
	clock.Advance(2 * time.Second)

	var o origin
	for range 3 {
		mustGet(t, c, "k", o.load("k"))
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("3 Gets after the future-dated entry went called the origin %d times, want 1: the key is uncacheable until the fence expires", n)
	}
	if _, ok := shared.m["k"]; !ok {
		t.Errorf("the load was not written back to the shared tier")
	}
}

// A Cache without a shared tier keeps no fences (nothing would ask them),
// so a load on a Cache clock moved by hand (Options.Now, "set it in
// tests") is cached even when its wall-converted read time falls before the
// previous fill's.
func TestCacheWithoutASharedTierKeepsNoFencesAndCachesASlowLoad(t *testing.T) {
	clock := newFakeClock()
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, clock), Now: clock.Now,
		TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var calls atomic.Int64
	load := func(ctx context.Context) (*product, error) {
		n := calls.Add(1)
		if n > 1 {
			clock.Advance(2 * time.Second) // a slow load
		}
		return &product{ID: "k", Price: int(n)}, nil
	}
	mustGet(t, c, "k", load)
	clock.Advance(time.Minute + time.Second) // expired, within the fence window
	mustGet(t, c, "k", load)                 // slow load: 2s of Cache clock
	r := mustGet(t, c, "k", load)
	if r.Outcome != flightcache.OutcomeHitLocal {
		t.Errorf("the value loaded after expiry was not cached: outcome %v, %d loads", r.Outcome, calls.Load())
	}
}

// Fills of many keys never push a Set's fence out of the table (they have
// their own bound): a write-back older than the Set (a peer without a
// Coordinator whose load read the origin before the Set) is never served by
// the instance that made the Set.
func TestFillsNeverPushASetsFenceOut(t *testing.T) {
	logs := &logBuffer{}
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[string]{Shared: shared, Logger: logs.logger()})
	ctx := context.Background()
	if err := c.Set(ctx, "k", "new"); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	old := func() {
		shared.Set(ctx, "k", driver.Entry{Value: []byte(`"old"`), Meta: driver.Meta{
			LoadedAt: before, FreshUntil: time.Now().Add(time.Minute), StaleUntil: time.Now().Add(time.Minute)}})
	}
	load := func(context.Context) (string, error) { return "new", nil }
	old()
	if v, _ := c.Get(ctx, "k", load); v != "new" {
		t.Fatalf("right after the Set: served %q", v)
	}
	for i := range 110_000 {
		key := fmt.Sprintf("key:%d", i)
		if _, err := c.Get(ctx, key, func(context.Context) (string, error) { return key, nil }); err != nil {
			t.Fatal(err)
		}
	}
	old()
	if v, _ := c.Get(ctx, "k", load); v != "new" {
		t.Errorf("after 110,000 fills of other keys: served %q, read before this instance's own Set (warnings logged: %d)",
			v, logs.count("oldest fences were dropped early"))
	}
}

// versionless is a shared tier that keeps LoadedAt and LoadDuration but
// not Version, as redisstore's envelope does.
type versionless struct{ *mapShared }

func (s versionless) Set(ctx context.Context, key string, e driver.Entry) error {
	e.Version = time.Time{}
	return s.mapShared.Set(ctx, key, e)
}

// An entry's Version is derived, once, from what a store keeps
// (LoadedAt − LoadDuration), and is exactly the version the writer
// recorded: a Set's own entry read back is not older than the Set, and a
// loaded entry read back is not older than the load that wrote it, so
// neither is reloaded.
func TestAVersionSurvivesAStoreThatKeepsOnlyLoadedAtAndLoadDuration(t *testing.T) {
	shared := newMapShared(nil)
	local := newLocal[*product](t, nil)
	c := newCache(t, flightcache.Options[*product]{Local: local, Shared: versionless{shared}})
	ctx := context.Background()
	if err := c.Set(ctx, "set", &product{ID: "set", Price: 1}); err != nil {
		t.Fatal(err)
	}
	var o origin
	slow := o.load("loaded")
	mustGet(t, c, "loaded", slow)
	for _, key := range []string{"set", "loaded"} {
		if e, ok := shared.peek(key); !ok || !e.Version.IsZero() {
			t.Fatalf("%s: the store kept a Version (%v, %v)", key, e.Version, ok)
		}
		local.Delete(key) // read the shared tier again
		if r := mustGet(t, c, key, slow); r.Outcome != flightcache.OutcomeHitShared {
			t.Errorf("%s read back from the shared tier: %v, want a shared hit (its own version taken for an older one)", key, r.Outcome)
		}
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("%d loads, want 1", n)
	}
	// An entry that ended after the Set but was read before it (its load
	// began earlier) is older: its derived Version is LoadedAt −
	// LoadDuration, and this instance, having served the Set, treats it
	// as absent.
	e, _ := shared.peek("set")
	data, _ := driver.JSONCodec[*product]{}.Marshal(&product{ID: "set", Price: 99})
	shared.m["set"] = driver.Entry{Value: data, Meta: driver.Meta{
		LoadedAt: e.LoadedAt.Add(time.Millisecond), LoadDuration: 2 * time.Millisecond,
		FreshUntil: e.FreshUntil, StaleUntil: e.StaleUntil}}
	local.Delete("set")
	if r := mustGet(t, c, "set", slow); r.Value.Price == 99 {
		t.Errorf("served an entry read before the Set it followed (%v)", r.Outcome)
	}
}
