package product

import (
	"context"
	"slices"
	"testing"

	"github.com/flightcache/flightcache"
)

func TestSQLGetManyReadsASelectionInOneStatement(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		ids := []string{ProductID(3), "nope", ProductID(17), ProductID(1)}
		got, err := r.GetMany(ctx, Selection{Tenant: "globex", Locale: "de-DE", Currency: "EUR", IDs: ids})
		if err != nil {
			t.Fatalf("GetMany: %v", err)
		}
		if len(got) != 3 {
			t.Fatalf("GetMany returned %d rows, want 3: %v", len(got), got)
		}
		for _, n := range []int{3, 17, 1} {
			if want := smallCatalog.Row("globex", n, "de-DE", "EUR"); got[ProductID(n)] != want {
				t.Fatalf("row %d = %+v, want %+v", n, got[ProductID(n)], want)
			}
		}
		// Another tenant's rows never answer.
		other, err := r.GetMany(ctx, Selection{Tenant: "nobody", Locale: "de-DE", Currency: "EUR", IDs: ids})
		if err != nil || len(other) != 0 {
			t.Fatalf("GetMany for an unknown tenant = %v, %v", other, err)
		}
		full := make([]string, MaxBatchIDs)
		for i := range full {
			full[i] = ProductID(i + 1)
		}
		if got, err := r.GetMany(ctx, Selection{Tenant: "acme", Locale: "en-US", Currency: "USD", IDs: full}); err != nil || len(got) != smallCatalog.ProductsPerTenant {
			t.Fatalf("GetMany of %d ids = %d rows, %v", MaxBatchIDs, len(got), err)
		}
	})
}

func TestServiceGetManyLoadsOnlyWhatNoTierHasWithOneStatement(t *testing.T) {
	repo := Count(NewMemoryRepository(smallCatalog), nil)
	_, svc := newServices(t, repo)
	ctx := context.Background()
	if _, err := svc.Get(ctx, Ref{Tenant: "acme", ID: ProductID(2), Locale: "en-US", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	sel := Selection{Tenant: "acme", Locale: "en-US", Currency: "USD", IDs: []string{ProductID(1), ProductID(2), "nope", ProductID(3)}}
	out, err := svc.GetMany(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if repo.Queries() != 2 || repo.Rows() != 4 { // the single Get, then one statement for 3 ids
		t.Fatalf("%d origin statements for %d rows, want 2 for 4", repo.Queries(), repo.Rows())
	}
	var ids []string
	for _, p := range out.Products {
		ids = append(ids, p.ProductID)
	}
	if !slices.Equal(ids, []string{ProductID(1), ProductID(2), ProductID(3)}) || !slices.Equal(out.Missing, []string{"nope"}) {
		t.Fatalf("products %v, missing %v", ids, out.Missing)
	}
	if out.Outcomes[flightcache.OutcomeHitLocal] != 1 || out.Outcomes[flightcache.OutcomeLoaded] != 3 {
		t.Fatalf("outcomes = %v", out.Outcomes)
	}
	// Every product is cached now, the missing one negatively.
	out, err = svc.GetMany(ctx, sel)
	if err != nil || repo.Queries() != 2 || out.Outcomes[flightcache.OutcomeHitLocal] != 3 || out.Outcomes[flightcache.OutcomeNegativeHit] != 1 {
		t.Fatalf("second GetMany: %v, %v after %d statements", out.Outcomes, err, repo.Queries())
	}
}

func TestNaiveGetManyQueriesTheOriginOncePerID(t *testing.T) {
	repo := Count(NewMemoryRepository(smallCatalog), nil)
	naive, _ := newServices(t, repo)
	sel := Selection{Tenant: "acme", Locale: "en-US", Currency: "USD", IDs: []string{ProductID(1), ProductID(2), "nope"}}
	out, err := naive.GetMany(context.Background(), sel)
	if err != nil || len(out.Products) != 2 || len(out.Missing) != 1 || repo.Queries() != 3 {
		t.Fatalf("naive GetMany = %+v, %v after %d statements; want 3", out, err, repo.Queries())
	}
}
