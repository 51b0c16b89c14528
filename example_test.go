package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/key"
)

type Product struct {
	ID   string
	Name string
}

// newProductCache returns a Cache and a function that closes it. Its local
// tier is the core's test store; a service takes memstore
// (memstore.New(memstore.Options[*Product]{MaxEntries: 10_000})), which is
// a module of its own.
func newProductCache() (*flightcache.Cache[*Product], func()) {
	local := testlocal.New[*Product](nil)
	c, err := flightcache.New(flightcache.Options[*Product]{Name: "product", TTL: 5 * time.Minute, Local: local})
	if err != nil {
		log.Fatal(err)
	}
	return c, func() { c.Close() }
}

// The common call is a one-liner: the loader runs on a miss, once per key
// however many callers miss together.
func ExampleCache_Get() {
	c, closeCache := newProductCache()
	defer closeCache()

	p, err := c.Get(context.Background(), "product:42", func(ctx context.Context) (*Product, error) {
		return &Product{ID: "42", Name: "Teapot"}, nil
	})
	fmt.Println(p.Name, err)
	// Output: Teapot <nil>
}

// Fetch says how each answer was served.
func ExampleCache_Fetch() {
	c, closeCache := newProductCache()
	defer closeCache()

	load := func(ctx context.Context) (*Product, error) { return &Product{ID: "42", Name: "Teapot"}, nil }
	for range 2 {
		r, err := c.Fetch(context.Background(), "product:42", load)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Value.Name, r.Outcome)
	}
	// Output:
	// Teapot loaded
	// Teapot hit_local
}

// A loader that returns ErrNotFound caches a tombstone: the origin is not
// asked again until NegativeTTL has passed.
func ExampleCache_Fetch_negativeCaching() {
	c, closeCache := newProductCache()
	defer closeCache()

	calls := 0
	load := func(ctx context.Context) (*Product, error) {
		calls++
		return nil, fmt.Errorf("product 404: %w", flightcache.ErrNotFound)
	}
	for range 3 {
		r, err := c.Fetch(context.Background(), "product:404", load)
		fmt.Println(errors.Is(err, flightcache.ErrNotFound), r.Outcome)
	}
	fmt.Println("origin calls:", calls)
	// Output:
	// true loaded
	// true negative_hit
	// true negative_hit
	// origin calls: 1
}

// A loader can pick its own value's TTL, or keep a value out of the cache.
func ExampleSetTTL() {
	c, closeCache := newProductCache()
	defer closeCache()

	p, _ := c.Get(context.Background(), "product:7", func(ctx context.Context) (*Product, error) {
		flightcache.SetTTL(ctx, time.Hour) // this product rarely changes
		return &Product{ID: "7", Name: "Kettle"}, nil
	})
	fmt.Println(p.Name)
	// Output: Kettle
}

// ProductRepository is the origin: the database or API the cache protects.
type ProductRepository interface {
	ByID(ctx context.Context, tenant, id string) (*Product, error)
}

// ProductQueryService is a cache-aside product service in Go. The Cache
// does, in order: cache lookup, single-flight on the canonical key,
// double-check inside the flight, repository call, best-effort write-back.
type ProductQueryService struct {
	cache *flightcache.Cache[*Product]
	repo  ProductRepository
}

// productKey includes every dimension that changes the result. The tenant is
// required: a key without it would serve one tenant's data to another.
var productKey = key.New("product").Version("1").Require(key.DimTenant)

func (s *ProductQueryService) ByID(ctx context.Context, tenant, id string) (*Product, error) {
	k, err := productKey.Tenant(tenant).ID(id).Build()
	if err != nil {
		return nil, err // bad input: a typed error, not a panic
	}
	return s.cache.Get(ctx, k, func(ctx context.Context) (*Product, error) {
		// ctx keeps the caller's values but not its cancellation: one
		// impatient caller does not fail the others.
		return s.repo.ByID(ctx, tenant, id)
	})
}

type slowRepo struct{ calls int }

func (r *slowRepo) ByID(ctx context.Context, tenant, id string) (*Product, error) {
	r.calls++
	if id == "missing" {
		return nil, flightcache.ErrNotFound
	}
	return &Product{ID: id, Name: tenant + " teapot"}, nil
}

func Example_productQueryService() {
	repo := &slowRepo{}
	c, closeCache := newProductCache()
	defer closeCache()
	svc := &ProductQueryService{cache: c, repo: repo}

	ctx := context.Background()
	a, _ := svc.ByID(ctx, "acme", "42")
	b, _ := svc.ByID(ctx, "globex", "42")
	again, _ := svc.ByID(ctx, "acme", "42")
	_, err := svc.ByID(ctx, "acme", "missing")
	_, bad := svc.ByID(ctx, "", "42")

	fmt.Println(a.Name, "|", b.Name, "|", again.Name)
	fmt.Println("repository calls:", repo.calls)
	fmt.Println(errors.Is(err, flightcache.ErrNotFound), errors.Is(bad, key.ErrInvalid))
	// Output:
	// acme teapot | globex teapot | acme teapot
	// repository calls: 3
	// true true
}

// InvalidatePrefix drops every variant of one product (all locales and
// currencies) with one call; with Options.Bus, on every instance. The
// prefix comes from the same key policy, so it ends at a separator and
// never matches product 420 when it means product 42.
func ExampleCache_InvalidatePrefix() {
	c, done := newProductCache()
	defer done()
	ctx := context.Background()
	keys := key.New("product").Version("1").Require(key.DimTenant, key.DimID, key.DimLocale)
	loads := 0
	load := func(ctx context.Context) (*Product, error) {
		loads++
		return &Product{ID: "42"}, nil
	}
	for _, loc := range []string{"en-US", "de-DE"} {
		for _, id := range []string{"42", "420"} {
			k := keys.Tenant("acme").ID(id).Locale(loc).MustBuild()
			if _, err := c.Get(ctx, k, load); err != nil {
				log.Fatal(err)
			}
		}
	}
	prefix, err := keys.Tenant("acme").ID("42").Prefix()
	if err != nil {
		log.Fatal(err)
	}
	if err := c.InvalidatePrefix(ctx, prefix); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"42", "420"} {
		r, _ := c.Fetch(ctx, keys.Tenant("acme").ID(id).Locale("de-DE").MustBuild(), load)
		fmt.Println(id, r.Outcome)
	}
	fmt.Println("loads:", loads)
	// Output:
	// 42 loaded
	// 420 hit_local
	// loads: 5
}
