package product

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// smallCatalog keeps the SQL tests fast: 2 x 20 x 2 x 2 = 160 rows.
var smallCatalog = Catalog{
	Tenants:           []string{"acme", "globex"},
	ProductsPerTenant: 20,
	Locales:           []string{"en-US", "de-DE"},
	Currencies:        []string{"USD", "EUR"},
}

// dialects runs f against a fresh SQLite file and a fresh PostgreSQL
// database; f gets a DSN.
func dialects(t *testing.T, f func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, filepath.Join(t.TempDir(), "products.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, testenv.PostgresDB(t))
	})
}

func openRepo(t *testing.T, dsn string, opts Options) *SQLRepository {
	t.Helper()
	r, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func countRows(t *testing.T, r *SQLRepository) int {
	t.Helper()
	var n int
	if err := r.DB().QueryRow(`SELECT COUNT(*) FROM products`).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

func TestSQLRepositoryReadsAndUpdatesTheSeededCatalog(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		seeded, err := Migrate(ctx, r, &smallCatalog)
		if err != nil || !seeded {
			t.Fatalf("Migrate = %v, %v; want seeded", seeded, err)
		}
		if n := countRows(t, r); n != smallCatalog.Rows() {
			t.Fatalf("%d rows, want %d", n, smallCatalog.Rows())
		}
		ref := Ref{Tenant: "globex", ID: ProductID(7), Locale: "de-DE", Currency: "EUR"}
		got, err := r.Get(ctx, ref)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if want := smallCatalog.Row("globex", 7, "de-DE", "EUR"); got != want {
			t.Fatalf("Get = %+v, want %+v", got, want)
		}
		if _, err := r.Get(ctx, Ref{Tenant: "globex", ID: "nope", Locale: "de-DE", Currency: "EUR"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
		}

		name, price := "Renamed", int64(1234)
		up, vs, err := r.Update(ctx, ref, Patch{DisplayName: &name})
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		if up.DisplayName != name || up.PriceCents != got.PriceCents {
			t.Fatalf("Update = %+v: want the new name and the old price", up)
		}
		if len(vs) != len(smallCatalog.Locales)*len(smallCatalog.Currencies) {
			t.Fatalf("Update returned %d variants, want %d", len(vs), len(smallCatalog.Locales)*len(smallCatalog.Currencies))
		}
		if up, _, err = r.Update(ctx, ref, Patch{PriceCents: &price}); err != nil || up.PriceCents != price || up.DisplayName != name {
			t.Fatalf("Update(price) = %+v, %v", up, err)
		}
		if again, err := r.Get(ctx, ref); err != nil || again != up {
			t.Fatalf("Get after Update = %+v, %v; want %+v", again, err, up)
		}
		if _, _, err := r.Update(ctx, Ref{Tenant: "acme", ID: "nope", Locale: "en-US", Currency: "USD"}, Patch{PriceCents: &price}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Update(missing) = %v, want ErrNotFound", err)
		}
		if _, _, err := r.Update(ctx, ref, Patch{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Update(empty patch) = %v, want ErrInvalid", err)
		}

		// A second start neither re-seeds nor undoes the update.
		if seeded, err := Migrate(ctx, r, &smallCatalog); err != nil || seeded {
			t.Fatalf("second Migrate = %v, %v; want not seeded", seeded, err)
		}
		if again, _ := r.Get(ctx, ref); again != up {
			t.Fatalf("second Migrate changed the updated row: %+v", again)
		}
	})
}

// Several instances starting at once against one database: each has its
// own pool, as separate processes would.
func TestMigrateIsSafeWhenInstancesStartAtOnce(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		const instances = 4
		repos := make([]*SQLRepository, instances)
		for i := range repos {
			repos[i] = openRepo(t, dsn, Options{})
		}
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			errs   = make([]error, instances)
			seeded = make([]bool, instances)
		)
		for i, r := range repos {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				seeded[i], errs[i] = Migrate(context.Background(), r, &smallCatalog)
			}()
		}
		close(start)
		wg.Wait()
		n := 0
		for i := range repos {
			if errs[i] != nil {
				t.Fatalf("instance %d: Migrate: %v", i, errs[i])
			}
			if seeded[i] {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d instances seeded, want exactly 1", n)
		}
		if rows := countRows(t, repos[0]); rows != smallCatalog.Rows() {
			t.Fatalf("%d rows, want %d", rows, smallCatalog.Rows())
		}
	})
}

func TestOriginLatencyIsPaidPerGetAndRespectsCancellation(t *testing.T) {
	ctx := context.Background()
	r := openRepo(t, filepath.Join(t.TempDir(), "p.db"), Options{OriginLatency: 50 * time.Millisecond})
	if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
		t.Fatal(err)
	}
	ref := Ref{Tenant: "acme", ID: ProductID(1), Locale: "en-US", Currency: "USD"}
	start := time.Now()
	if _, err := r.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Get took %v, want at least the 50ms origin latency", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Get(cctx, ref); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestCountingRepositoryCountsEveryGet(t *testing.T) {
	var hooked int
	c := Count(NewMemoryRepository(smallCatalog), func() { hooked++ })
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		_, _ = c.Get(ctx, Ref{Tenant: "acme", ID: ProductID(i), Locale: "en-US", Currency: "USD"})
	}
	_, _ = c.Get(ctx, Ref{Tenant: "acme", ID: "missing", Locale: "en-US", Currency: "USD"})
	if c.Queries() != 4 || hooked != 4 {
		t.Fatalf("Queries() = %d, hook called %d times; want 4 and 4", c.Queries(), hooked)
	}
}
