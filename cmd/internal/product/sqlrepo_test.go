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
		up, err := r.Update(ctx, ref, Patch{DisplayName: &name})
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		if up.DisplayName != name || up.PriceCents != got.PriceCents || up.Revision != 1 {
			t.Fatalf("Update = %+v: want the new name, the old price and revision 1", up)
		}
		if up, err = r.Update(ctx, ref, Patch{PriceCents: &price}); err != nil || up.PriceCents != price || up.DisplayName != name || up.Revision != 2 {
			t.Fatalf("Update(price) = %+v, %v; want revision 2", up, err)
		}
		if again, err := r.Get(ctx, ref); err != nil || again != up {
			t.Fatalf("Get after Update = %+v, %v; want %+v", again, err, up)
		}
		if _, err := r.Update(ctx, Ref{Tenant: "acme", ID: "nope", Locale: "en-US", Currency: "USD"}, Patch{PriceCents: &price}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Update(missing) = %v, want ErrNotFound", err)
		}
		if _, err := r.Update(ctx, ref, Patch{}); !errors.Is(err, ErrInvalid) {
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

// oldSchema is the products table as productd created it before rows had
// a revision.
const oldSchema = `CREATE TABLE products (
	tenant_id    TEXT   NOT NULL,
	product_id   TEXT   NOT NULL,
	locale       TEXT   NOT NULL,
	currency     TEXT   NOT NULL,
	display_name TEXT   NOT NULL,
	price_cents  BIGINT NOT NULL,
	PRIMARY KEY (tenant_id, product_id, locale, currency)
)`

// A database created by an older productd gains the revision column when
// several new instances start on it at once: its rows are kept, start at
// revision 0, and updates bump them.
func TestMigrateAddsRevisionToAnOlderDatabaseWhenInstancesStartAtOnce(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		old := openRepo(t, dsn, Options{})
		if _, err := old.DB().ExecContext(ctx, oldSchema); err != nil {
			t.Fatal(err)
		}
		if _, err := old.DB().ExecContext(ctx, old.bind(`INSERT INTO products VALUES (?, ?, ?, ?, ?, ?)`),
			"acme", ProductID(1), "en-US", "USD", "Kept", 4200); err != nil {
			t.Fatal(err)
		}
		const instances = 4
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, instances)
		for i := range instances {
			r := openRepo(t, dsn, Options{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = Migrate(ctx, r, nil)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("instance %d: Migrate: %v", i, err)
			}
		}
		r := openRepo(t, dsn, Options{})
		ref := Ref{Tenant: "acme", ID: ProductID(1), Locale: "en-US", Currency: "USD"}
		got, err := r.Get(ctx, ref)
		if err != nil || got.DisplayName != "Kept" || got.PriceCents != 4200 || got.Revision != 0 {
			t.Fatalf("Get after migrating = %+v, %v; want the old row at revision 0", got, err)
		}
		price := int64(1)
		if up, err := r.Update(ctx, ref, Patch{PriceCents: &price}); err != nil || up.Revision != 1 {
			t.Fatalf("Update after migrating = %+v, %v; want revision 1", up, err)
		}
	})
}

// Concurrent updates of one row each commit their own revision: no two
// return the same one, and the last is the count.
func TestConcurrentUpdatesGetDistinctRevisions(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		// SQLite serialises the writers: on a loaded host the last of
		// them waits longer than the default write deadline, which is not
		// what this test is about.
		r := openRepo(t, dsn, Options{WriteTimeout: time.Minute})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		ref := Ref{Tenant: "acme", ID: ProductID(2), Locale: "en-US", Currency: "USD"}
		const n = 16
		var wg sync.WaitGroup
		revs := make([]int64, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				price := int64(i)
				var up Product
				up, errs[i] = r.Update(ctx, ref, Patch{PriceCents: &price})
				revs[i] = up.Revision
			}()
		}
		wg.Wait()
		seen := map[int64]bool{}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Update %d: %v", i, errs[i])
			}
			if seen[revs[i]] || revs[i] < 1 || revs[i] > n {
				t.Fatalf("revisions %v: want each of 1..%d once", revs, n)
			}
			seen[revs[i]] = true
		}
	})
}
