package flightcache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// setGuard is a Guard that answers "maybe" only for the keys it holds and
// counts its calls.
type setGuard struct {
	keys  map[string]bool
	calls atomic.Int64
}

func (g *setGuard) MayExist(ctx context.Context, key string) bool {
	g.calls.Add(1)
	return g.keys[key]
}

func TestGuardNoAnswersNotFoundWithoutSharedReadOrLoad(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	rec := newRecorder()
	g := &setGuard{keys: map[string]bool{}}
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, clock), Shared: shared, Now: clock.Now,
		Guard: g, Observer: rec,
	})
	var o origin
	r, err := c.Fetch(context.Background(), "product:missing", o.load("missing"))
	if !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if r.Outcome != flightcache.OutcomeFiltered || r.Value != nil {
		t.Fatalf("Result = %+v, want a zero value with OutcomeFiltered", r)
	}
	if n := shared.gets.Load(); n != 0 {
		t.Fatalf("%d shared-tier reads for a filtered key", n)
	}
	if n := o.calls.Load(); n != 0 {
		t.Fatalf("%d loader calls for a filtered key", n)
	}
	if n := rec.count(driver.EventFiltered); n != 1 {
		t.Fatalf("%d EventFiltered, want 1", n)
	}
	// Nothing was stored: once the Guard says maybe, the key loads.
	g.keys["product:missing"] = true
	if r, err := c.Fetch(context.Background(), "product:missing", o.load("missing")); err != nil || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("after the Guard said maybe: Outcome %v, err %v; want a load", r.Outcome, err)
	}
}

func TestGuardMaybeLeavesReadPathUnchanged(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	g := &setGuard{keys: map[string]bool{"product:1": true}}
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, clock), Shared: shared, Now: clock.Now, Guard: g,
	})
	var o origin
	ctx := context.Background()
	want := []flightcache.Outcome{flightcache.OutcomeLoaded, flightcache.OutcomeHitLocal}
	for i, w := range want {
		r, err := c.Fetch(ctx, "product:1", o.load("1"))
		if err != nil || r.Outcome != w {
			t.Fatalf("Get %d: Outcome %v, err %v; want %v", i, r.Outcome, err, w)
		}
	}
	if shared.gets.Load() == 0 || o.calls.Load() != 1 {
		t.Fatalf("shared reads %d, loads %d; want the usual miss path (reads, one load)", shared.gets.Load(), o.calls.Load())
	}
	// A local hit does not ask the Guard; the miss did, once.
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("Guard asked %d times, want once (on the local miss)", n)
	}
}

func TestGuardNoOverridesStaleLocalValue(t *testing.T) {
	// The Guard rules the key out at the origin (deleted since it was
	// cached): its stale value is not served.
	clock := newFakeClock()
	g := &setGuard{keys: map[string]bool{"product:1": true}}
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, clock), Now: clock.Now, Guard: g,
		TTL: time.Minute, StaleFor: time.Hour,
	})
	var o origin
	ctx := context.Background()
	if _, err := c.Get(ctx, "product:1", o.load("1")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	delete(g.keys, "product:1")
	r, err := c.Fetch(ctx, "product:1", o.load("1"))
	if !errors.Is(err, flightcache.ErrNotFound) || r.Outcome != flightcache.OutcomeFiltered {
		t.Fatalf("Outcome %v, err %v; want OutcomeFiltered, ErrNotFound", r.Outcome, err)
	}
}

func TestGuardNotAskedForFreshLocalTombstone(t *testing.T) {
	clock := newFakeClock()
	g := &setGuard{keys: map[string]bool{"product:gone": true}}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, clock), Now: clock.Now, Guard: g})
	ctx := context.Background()
	notFound := func(ctx context.Context) (*product, error) { return nil, flightcache.ErrNotFound }
	if _, err := c.Get(ctx, "product:gone", notFound); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatal(err)
	}
	r, err := c.Fetch(ctx, "product:gone", notFound)
	if !errors.Is(err, flightcache.ErrNotFound) || r.Outcome != flightcache.OutcomeNegativeHit {
		t.Fatalf("Outcome %v, err %v; want the cached tombstone", r.Outcome, err)
	}
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("Guard asked %d times, want once", n)
	}
}
