package product

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
)

// failingRepo answers from the catalog until fail is set, then fails every
// Get; it counts the Gets that reached it.
type failingRepo struct {
	Repository
	fail  atomic.Bool
	calls atomic.Int64
}

var errOriginDown = errors.New("origin down")

func (f *failingRepo) Get(ctx context.Context, ref Ref) (Product, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return Product{}, errOriginDown
	}
	return f.Repository.Get(ctx, ref)
}

// During an origin outage with a stale value and the failure throttle, the
// first request past the TTL asks the origin, fails and gets the stale
// value (reported as hiding the failure); the requests after it within the
// window get the stale value at once, without asking the origin.
func TestOutageServesStaleAndProbesTheOriginOncePerWindow(t *testing.T) {
	var mu sync.Mutex
	now := time.Now() // the memory tier expires entries on the real clock
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	repo := &failingRepo{Repository: NewMemoryRepository(smallCatalog)}
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	var hidden []error
	obs := WatchStale(nil, func(_ context.Context, why error) { mu.Lock(); hidden = append(hidden, why); mu.Unlock() })
	c, err := flightcache.New(flightcache.Options[Entry]{
		Local: local, TTL: time.Second, NegativeTTL: time.Second, Jitter: flightcache.DisableJitter,
		StaleFor: time.Hour, FailureThrottle: 2 * time.Second, Observer: obs, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Second, NegativeTTL: time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := Ref{Tenant: "acme", ID: ProductID(9), Locale: "en-US", Currency: "USD"}
	if _, err := svc.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	repo.fail.Store(true)
	advance(1500 * time.Millisecond) // past the TTL
	before := repo.calls.Load()

	sv, err := svc.Get(ctx, ref)
	if err != nil || sv.Outcome != flightcache.OutcomeStale || !errors.Is(sv.StaleCause, errOriginDown) {
		t.Fatalf("first Get in the outage = %v, cause %v, %v; want the stale value hiding the origin's error", sv.Outcome, sv.StaleCause, err)
	}
	for range 50 {
		sv, err := svc.Get(ctx, ref)
		var te *flightcache.ThrottledError
		if err != nil || sv.Outcome != flightcache.OutcomeStale || !errors.As(sv.StaleCause, &te) {
			t.Fatalf("Get within the throttle window = %v, cause %v, %v; want the stale value, throttled", sv.Outcome, sv.StaleCause, err)
		}
	}
	if n := repo.calls.Load() - before; n != 1 {
		t.Fatalf("%d origin calls for 51 requests within one throttle window, want 1", n)
	}
	advance(2 * time.Second) // the window ends: the origin is probed again, once
	if _, err := svc.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if n := repo.calls.Load() - before; n != 2 {
		t.Fatalf("%d origin calls after the window ended, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hidden) != 52 || !errors.Is(hidden[0], errOriginDown) {
		t.Fatalf("hidden failures reported: %d (first %v), want one per stale answer", len(hidden), hidden[0])
	}
}

// A value served stale is never reported as fresh, even when the entry's
// own FreshUntil (set on the service's wall clock inside the load) is still
// ahead of that clock: the Cache judges expiry on its own clock, and on a
// busy machine its coarse clock can have lagged more at the load's end than
// it does now, so the Cache may see more time pass than the wall clock.
func TestStaleAnswerIsNeverShownFresh(t *testing.T) {
	var mu sync.Mutex
	wall := time.Now()
	cacheNow := wall
	svcClock := func() time.Time { mu.Lock(); defer mu.Unlock(); return wall }
	cacheClock := func() time.Time { mu.Lock(); defer mu.Unlock(); return cacheNow }

	repo := &failingRepo{Repository: NewMemoryRepository(smallCatalog)}
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[Entry]{
		Local: local, TTL: time.Second, NegativeTTL: time.Second, Jitter: flightcache.DisableJitter,
		StaleFor: time.Hour, FailureThrottle: 2 * time.Second, Now: cacheClock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Second, NegativeTTL: time.Second, Now: svcClock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := Ref{Tenant: "acme", ID: ProductID(9), Locale: "en-US", Currency: "USD"}
	if _, err := svc.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	repo.fail.Store(true)
	mu.Lock()
	cacheNow = cacheNow.Add(1500 * time.Millisecond) // past the TTL by the Cache's clock
	wall = wall.Add(500 * time.Millisecond)          // not yet by the wall clock
	mu.Unlock()
	for i := range 3 { // the failed probe, then throttled answers
		sv, err := svc.Get(ctx, ref)
		if err != nil || sv.Outcome != flightcache.OutcomeStale {
			t.Fatalf("Get %d = %v, %v; want the stale value", i, sv.Outcome, err)
		}
		if !sv.TTLKnown || sv.TTL >= 0 {
			t.Fatalf("Get %d: stale answer with TTL %v (known %v); want a negative TTL", i, sv.TTL, sv.TTLKnown)
		}
	}
}
