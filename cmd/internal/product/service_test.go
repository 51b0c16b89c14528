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

// gatedRepo blocks every Get until release is closed, counting arrivals.
type gatedRepo struct {
	Repository
	arrived chan struct{}
	release chan struct{}
}

func (g *gatedRepo) Get(ctx context.Context, ref Ref) (Product, error) {
	g.arrived <- struct{}{}
	<-g.release
	return g.Repository.Get(ctx, ref)
}

func newServices(t *testing.T, repo Repository) (naive, coalesced *QueryService) {
	t.Helper()
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	naive, err = NewQueryService(repo, ServiceOptions{Mode: ModeNaive, Naive: local, TTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	local2, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local2.Close)
	c, err := flightcache.New(flightcache.Options[Entry]{Local: local2, TTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	coalesced, err = NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return naive, coalesced
}

// Naive mode is the bad example on purpose: n concurrent misses are n
// origin queries. Flightcache mode makes one. Both answer everyone.
func TestNaiveModeQueriesOncePerMissAndFlightcacheOncePerKey(t *testing.T) {
	const n = 20
	ref := Ref{Tenant: "acme", ID: ProductID(3), Locale: "en-US", Currency: "USD"}
	want := smallCatalog.Row("acme", 3, "en-US", "USD")
	for _, mode := range []Mode{ModeNaive, ModeFlightcache} {
		t.Run(string(mode), func(t *testing.T) {
			g := &gatedRepo{Repository: NewMemoryRepository(smallCatalog), arrived: make(chan struct{}, n), release: make(chan struct{})}
			naive, coalesced := newServices(t, g)
			svc := coalesced
			if mode == ModeNaive {
				svc = naive
			}
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sv, err := svc.Get(context.Background(), ref)
					if err == nil && sv.Product != want {
						err = errors.New("wrong product")
					}
					errs <- err
				}()
			}
			<-g.arrived // one load is certainly in the origin
			if mode == ModeNaive {
				for range n - 1 { // every other miss reaches the origin too
					<-g.arrived
				}
			}
			close(g.release)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if extra := len(g.arrived); extra != 0 {
				t.Fatalf("%d more origin queries than expected", extra)
			}
		})
	}
}

func TestUnknownProductMatchesBothNotFoundErrors(t *testing.T) {
	_, svc := newServices(t, NewMemoryRepository(smallCatalog))
	_, err := svc.Get(context.Background(), Ref{Tenant: "acme", ID: "nope", Locale: "en-US", Currency: "USD"})
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound and flightcache.ErrNotFound", err)
	}
	sv, err := svc.Get(context.Background(), Ref{Tenant: "acme", ID: "nope", Locale: "en-US", Currency: "USD"})
	if !errors.Is(err, ErrNotFound) || sv.Outcome != flightcache.OutcomeNegativeHit {
		t.Fatalf("second Get(unknown) = %v, %v; want a negative hit", sv.Outcome, err)
	}
}

// A cached "not found" is dropped and reloaded when CreatedSince says the
// product was created after it was stored, and only then: the reload's
// own "not found" (a create that was announced but never inserted) is
// younger than the creation and stays cached, so such an id costs one
// extra origin query, not one per request.
func TestNotFoundIsReloadedOnceWhenCreatedSinceItWasCached(t *testing.T) {
	var queries atomic.Int64
	repo := Count(NewMemoryRepository(smallCatalog), func() { queries.Add(1) })
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[Entry]{Local: local, TTL: time.Minute, NegativeTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var createdAt atomic.Pointer[time.Time] // nil: never created
	svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Minute, NegativeTTL: time.Minute,
		CreatedSince: func(_ context.Context, _ Ref, since time.Time) bool {
			at := createdAt.Load()
			return at != nil && at.After(since)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := Ref{Tenant: "acme", ID: "ghost", Locale: "en-US", Currency: "USD"}
	get := func() flightcache.Outcome {
		t.Helper()
		sv, err := svc.Get(ctx, ref)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get: %v, want not found", err)
		}
		return sv.Outcome
	}
	get()
	if o := get(); o != flightcache.OutcomeNegativeHit || queries.Load() != 1 {
		t.Fatalf("second Get: %v after %d queries; want a negative hit after 1", o, queries.Load())
	}
	now := time.Now()
	createdAt.Store(&now)
	if o := get(); o != flightcache.OutcomeLoaded || queries.Load() != 2 {
		t.Fatalf("Get after a creation: %v after %d queries; want a reload (2 queries)", o, queries.Load())
	}
	for range 5 {
		if o := get(); o != flightcache.OutcomeNegativeHit {
			t.Fatalf("Get after the reload: %v; want a negative hit", o)
		}
	}
	if q := queries.Load(); q != 2 {
		t.Fatalf("%d origin queries; the reloaded not-found must stay cached (2)", q)
	}
}

// CacheKey names the entries the service fills: floor 0 for a process that
// never updated the row, the committed revision after its own Update.
func TestCacheKeyIsWhereTheServiceCachesARow(t *testing.T) {
	ctx := context.Background()
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	// No clock skew: one clock, and the Get right after the Update's tag
	// invalidation is to be cached, not taken for older than it.
	c, err := flightcache.New(flightcache.Options[Entry]{Local: local, TTL: time.Minute, NegativeTTL: time.Second, ClockSkew: flightcache.DisableClockSkew})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := NewQueryService(NewMemoryRepository(DemoCatalog), ServiceOptions{Cache: c, TTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ref := Ref{Tenant: "acme", ID: ProductID(3), Locale: "en-US", Currency: "USD"}
	cached := func(floor int64) (int64, bool) {
		t.Helper()
		k, err := CacheKey(ref, floor)
		if err != nil {
			t.Fatal(err)
		}
		it, ok := local.Get(k)
		if !ok {
			return 0, false
		}
		return it.Value.Product.Revision, true
	}
	if _, err := svc.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if rev, ok := cached(0); !ok || rev != 0 {
		t.Fatalf("after a Get, CacheKey(ref, 0) holds revision %d (present %v), want 0", rev, ok)
	}
	price := int64(1234)
	out, err := svc.Update(ctx, ref, Patch{PriceCents: &price})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if rev, ok := cached(out.Revision); !ok || rev != out.Revision {
		t.Fatalf("after its own Update and a Get, CacheKey(ref, %d) holds revision %d (present %v)", out.Revision, rev, ok)
	}
}
