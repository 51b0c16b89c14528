package product

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
)

func TestCreateInsertsOnceThenReportsExists(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		ref, err := NewRef("acme", "new-1", "en-US", "USD")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before Create: Get error %v, want ErrNotFound", err)
		}
		d := Draft{DisplayName: "Kettle", PriceCents: 4200}
		got, err := r.Create(ctx, ref, d)
		if err != nil {
			t.Fatal(err)
		}
		if got.DisplayName != "Kettle" || got.PriceCents != 4200 || got.ProductID != "new-1" {
			t.Fatalf("Create returned %+v", got)
		}
		if p, err := r.Get(ctx, ref); err != nil || p.DisplayName != "Kettle" {
			t.Fatalf("after Create: Get = %+v, %v", p, err)
		}
		if _, err := r.Create(ctx, ref, Draft{DisplayName: "Other", PriceCents: 1}); !errors.Is(err, ErrExists) {
			t.Fatalf("second Create error %v, want ErrExists", err)
		}
		if p, _ := r.Get(ctx, ref); p.DisplayName != "Kettle" {
			t.Fatalf("a refused Create changed the row: %+v", p)
		}
		if _, err := r.Create(ctx, ref, Draft{DisplayName: "", PriceCents: 1}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Create of an invalid draft: error %v, want ErrInvalid", err)
		}
	})
}

func TestEachIDStreamsEveryDistinctTenantAndID(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		seen := map[[2]string]int{}
		if err := r.EachID(ctx, func(tenant, id string) { seen[[2]string{tenant, id}]++ }); err != nil {
			t.Fatal(err)
		}
		want := len(smallCatalog.Tenants) * smallCatalog.ProductsPerTenant
		if len(seen) != want {
			t.Fatalf("%d distinct pairs, want %d", len(seen), want)
		}
		for p, n := range seen {
			if n != 1 {
				t.Fatalf("pair %v streamed %d times", p, n)
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := r.EachID(cctx, func(string, string) {}); err == nil {
			t.Fatal("EachID on a cancelled context returned nil: a partial stream would pass for the catalog")
		}
	})
}

func TestCreateDropsANotFoundCachedBeforeIt(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, filepath.Join(t.TempDir(), "products.db"), Options{})
	if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
		t.Fatal(err)
	}
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
	svc, err := NewQueryService(Count(r, nil), ServiceOptions{Cache: c, TTL: time.Minute, NegativeTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := NewRef("acme", "late", "en-US", "USD")
	if _, err := svc.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before Create: %v, want ErrNotFound", err)
	}
	if sv, err := svc.Get(ctx, ref); !errors.Is(err, ErrNotFound) || sv.Outcome != flightcache.OutcomeNegativeHit {
		t.Fatalf("second Get: %v %v, want a cached not-found", sv.Outcome, err)
	}
	if _, err := svc.Create(ctx, ref, Draft{DisplayName: "Late", PriceCents: 1}); err != nil {
		t.Fatal(err)
	}
	if sv, err := svc.Get(ctx, ref); err != nil || sv.Product.DisplayName != "Late" {
		t.Fatalf("Get after Create: %+v, %v; want the new row despite the cached not-found", sv, err)
	}
}
