package product

import (
	"context"
	"sync"
	"testing"
)

func TestCategoryOfIsDeterministicAndSpreadsTheCatalog(t *testing.T) {
	if got := CategoryOf(ProductID(1)); got != Categories[1] {
		t.Fatalf("CategoryOf(%s) = %q, want %q", ProductID(1), got, Categories[1])
	}
	if CategoryOf(ProductID(3)) != CategoryOf(ProductID(3+len(Categories))) {
		t.Fatal("products n and n+8 must share a category")
	}
	seen := map[string]int{}
	for n := 1; n <= 80; n++ {
		seen[CategoryOf(ProductID(n))]++
	}
	if len(seen) != len(Categories) {
		t.Fatalf("80 catalog products fall in %d categories, want %d", len(seen), len(Categories))
	}
	for _, id := range []string{"custom-1", "A_b", "p-1", "p-00000"} {
		c := CategoryOf(id)
		if c != CategoryOf(id) || CheckCategory(c) != nil {
			t.Fatalf("CategoryOf(%q) = %q: not a stable, valid category", id, c)
		}
	}
}

func TestCheckCategoryRefusesWhatIsNoCategoryName(t *testing.T) {
	for _, c := range []string{"", "-a", "Audio", "a b", "a/b", string(make([]byte, MaxCategoryLen+1))} {
		if err := CheckCategory(c); err == nil {
			t.Errorf("CheckCategory(%q) = nil, want an error", c)
		}
	}
	for _, c := range Categories {
		if err := CheckCategory(c); err != nil {
			t.Errorf("CheckCategory(%q) = %v", c, err)
		}
	}
}

// The seeded catalog carries categories, read back by Get, GetMany and
// Update alike.
func TestSeededCatalogHasCategories(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		ref := Ref{Tenant: "acme", ID: ProductID(5), Locale: "de-DE", Currency: "EUR"}
		got, err := r.Get(ctx, ref)
		if err != nil || got.Category != CategoryOf(ref.ID) || got != smallCatalog.Row("acme", 5, "de-DE", "EUR") {
			t.Fatalf("Get = %+v, %v; want the seeded row in category %q", got, err, CategoryOf(ref.ID))
		}
		many, err := r.GetMany(ctx, Selection{Tenant: "acme", Locale: "de-DE", Currency: "EUR", IDs: []string{ProductID(5), ProductID(6)}})
		if err != nil || many[ProductID(6)].Category != CategoryOf(ProductID(6)) {
			t.Fatalf("GetMany = %+v, %v; want categories", many, err)
		}
		price := int64(7)
		if up, err := r.Update(ctx, ref, Patch{PriceCents: &price}); err != nil || up.Category != CategoryOf(ref.ID) {
			t.Fatalf("Update = %+v, %v; want the category returned", up, err)
		}
		cr := Ref{Tenant: "acme", ID: "custom-9", Locale: "en-US", Currency: "USD"}
		if out, err := r.Create(ctx, cr, Draft{DisplayName: "New", PriceCents: 1}); err != nil || out.Category != CategoryOf(cr.ID) {
			t.Fatalf("Create = %+v, %v; want category %q", out, err, CategoryOf(cr.ID))
		}
		if got, err := r.Get(ctx, cr); err != nil || got.Category != CategoryOf(cr.ID) {
			t.Fatalf("Get of a created product = %+v, %v; want category %q", got, err, CategoryOf(cr.ID))
		}
	})
}

// A database created by a productd older than categories gets them when
// several new instances migrate it at once: every row gets CategoryOf its
// ID, and reprices find them through the new index.
func TestMigrateAssignsCategoriesToAnOlderDatabaseWhenInstancesStartAtOnce(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		old := openRepo(t, dsn, Options{})
		if _, err := old.DB().ExecContext(ctx, oldSchema); err != nil {
			t.Fatal(err)
		}
		ids := []string{ProductID(1), ProductID(2), ProductID(9), "custom-x"}
		for _, id := range ids {
			if _, err := old.DB().ExecContext(ctx, old.bind(`INSERT INTO products VALUES (?, ?, ?, ?, ?, ?)`),
				"acme", id, "en-US", "USD", "Kept", 4200); err != nil {
				t.Fatal(err)
			}
		}
		const instances = 3
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, instances)
		for i := range instances {
			r := openRepo(t, dsn, Options{})
			wg.Go(func() {
				<-start
				_, errs[i] = Migrate(ctx, r, nil)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("instance %d: Migrate: %v", i, err)
			}
		}
		r := openRepo(t, dsn, Options{})
		for _, id := range ids {
			got, err := r.Get(ctx, Ref{Tenant: "acme", ID: id, Locale: "en-US", Currency: "USD"})
			if err != nil || got.Category != CategoryOf(id) || got.DisplayName != "Kept" {
				t.Fatalf("Get(%s) after migrating = %+v, %v; want the old row in category %q", id, got, err, CategoryOf(id))
			}
		}
		var n int
		if err := r.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM products WHERE category = ''`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("rows without a category after migrating: %d, %v", n, err)
		}
	})
}
