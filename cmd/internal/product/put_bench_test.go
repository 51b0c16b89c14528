package product

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
)

// benchLocalEntries is the local tier a PUT would walk: the entries an
// instance holds besides the products the benchmark reads and writes.
const benchLocalEntries = 100_000

// benchPutEvery paces the benchmark's writer: 50 PUTs a second, a busy
// catalog's steady rate. A writer whose PUT takes longer runs them back
// to back.
const benchPutEvery = 20 * time.Millisecond

// BenchmarkReadsUnderSteadyPuts measures what a PUT costs the reads of
// its own instance: parallel GETs of 1,000 hot rows (local hits, and a
// reload after each PUT of one of them) while one writer PUTs other rows
// every benchPutEvery, with 100,000 other entries in the local tier.
// invalidate=prefix makes each PUT's invalidation as productd did before
// tags (Cache.InvalidatePrefix of the product, which walks the local
// tier, then the same deletes); invalidate=tag is QueryService.Update
// (Cache.InvalidateTag of the product and list tags, then the deletes).
// ns/op is per GET; puts/s is what the writer achieved meanwhile and
// us/put its mean PUT. There is no shared tier: the cost measured is the
// invalidation's own, in one process.
func BenchmarkReadsUnderSteadyPuts(b *testing.B) {
	for _, mode := range []string{"prefix", "tag"} {
		b.Run("invalidate="+mode, func(b *testing.B) {
			catalog := Catalog{Tenants: []string{"acme"}, ProductsPerTenant: 2000, Locales: []string{"en-US"}, Currencies: []string{"USD"}}
			repo := NewMemoryRepository(catalog)
			local, err := memstore.New(memstore.Options[Entry]{MaxEntries: 2 * benchLocalEntries})
			if err != nil {
				b.Fatal(err)
			}
			defer local.Close()
			now := time.Now()
			for i := range benchLocalEntries {
				local.Set(fmt.Sprintf("other|%d", i), driver.Item[Entry]{Meta: driver.Meta{
					LoadedAt: now, FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}})
			}
			c, err := flightcache.New(flightcache.Options[Entry]{Name: "product", Local: local, TTL: time.Hour, NegativeTTL: time.Second,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Hour, NegativeTTL: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			update := svc.Update
			if mode == "prefix" {
				update = func(ctx context.Context, ref Ref, p Patch) (Product, error) {
					out, err := repo.Update(ctx, ref, p)
					if err != nil {
						return out, err
					}
					old := svc.raiseFloor(ref, out.Revision)
					prefix, err := svc.keys.Tenant(ref.Tenant).ID(ref.ID).Prefix()
					if err != nil {
						return out, err
					}
					if err := c.InvalidatePrefix(ctx, prefix); err != nil {
						return out, err
					}
					for _, f := range []int64{0, old, out.Revision - 1} {
						if k, err := svc.key(ref, f); err == nil {
							_ = c.Delete(ctx, k)
						}
					}
					return out, nil
				}
			}
			const hot = 1000
			refs := make([]Ref, catalog.ProductsPerTenant)
			for i := range refs {
				refs[i] = Ref{Tenant: "acme", ID: ProductID(i + 1), Locale: "en-US", Currency: "USD"}
				if i < hot {
					if _, err := svc.Get(ctx, refs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			var puts atomic.Int64
			var putTime atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(benchPutEvery)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					price := int64(i)
					start := time.Now()
					// Every tenth PUT is of a hot row, the others of the
					// rest of the catalog.
					ref := refs[hot+i%(len(refs)-hot)]
					if i%10 == 0 {
						ref = refs[i%hot]
					}
					if _, err := update(ctx, ref, Patch{PriceCents: &price}); err != nil {
						b.Error(err)
						return
					}
					putTime.Add(int64(time.Since(start)))
					puts.Add(1)
				}
			})
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := svc.Get(ctx, refs[next.Add(1)%hot]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			wg.Wait()
			if n := puts.Load(); n > 0 {
				b.ReportMetric(float64(n)/elapsed.Seconds(), "puts/s")
				b.ReportMetric(float64(putTime.Load())/float64(n)/1e3, "us/put")
			}
		})
	}
}
