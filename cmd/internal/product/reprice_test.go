package product

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
)

func int64p(v int64) *int64 { return &v }

func TestRepriceValidateWantsExactlyOneFieldInRange(t *testing.T) {
	bad := map[string]Reprice{
		"neither":        {},
		"both":           {Percent: int64p(5), DeltaCents: int64p(5)},
		"zero percent":   {Percent: int64p(0)},
		"percent low":    {Percent: int64p(MinRepricePercent - 1)},
		"percent high":   {Percent: int64p(MaxRepricePercent + 1)},
		"zero delta":     {DeltaCents: int64p(0)},
		"delta too high": {DeltaCents: int64p(MaxPriceCents + 1)},
	}
	for name, rp := range bad {
		var inv *InvalidError
		if err := rp.Validate(); !errors.As(err, &inv) {
			t.Errorf("%s: Validate = %v, want an *InvalidError", name, err)
		}
	}
	for _, rp := range []Reprice{{Percent: int64p(-100)}, {Percent: int64p(10)}, {DeltaCents: int64p(-MaxPriceCents)}} {
		if err := rp.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", rp, err)
		}
	}
}

// A reprice changes every row of the tenant's category, and no other, in
// one transaction that bumps each row's revision and leaves one outbox
// record of the category, which a relay claims as such.
func TestRepriceChangesTheWholeCategoryAndRecordsItsInvalidation(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		cat := CategoryOf(ProductID(3))
		var inCat []int
		for n := 1; n <= smallCatalog.ProductsPerTenant; n++ {
			if CategoryOf(ProductID(n)) == cat {
				inCat = append(inCat, n)
			}
		}
		out, err := r.Reprice(ctx, "acme", cat, Reprice{Percent: int64p(10)})
		variants := int64(len(smallCatalog.Locales) * len(smallCatalog.Currencies))
		if err != nil || out.Products != int64(len(inCat)) || out.Rows != int64(len(inCat))*variants || out.Revision != 1 {
			t.Fatalf("Reprice = %+v, %v; want %d products, %d rows, revision 1", out, err, len(inCat), int64(len(inCat))*variants)
		}
		for _, n := range inCat {
			ref := Ref{Tenant: "acme", ID: ProductID(n), Locale: "de-DE", Currency: "EUR"}
			want := smallCatalog.Row("acme", n, "de-DE", "EUR")
			got, err := r.Get(ctx, ref)
			if err != nil || got.PriceCents != want.PriceCents*110/100 || got.Revision != 1 {
				t.Fatalf("Get(%s) = %+v, %v; want price %d at revision 1", ref.ID, got, err, want.PriceCents*110/100)
			}
		}
		other := smallCatalog.Row("acme", inCat[0]+1, "en-US", "USD")
		if got, _ := r.Get(ctx, Ref{Tenant: "acme", ID: other.ProductID, Locale: "en-US", Currency: "USD"}); got != other {
			t.Fatalf("a product of another category changed: %+v, want %+v", got, other)
		}
		if got, _ := r.Get(ctx, Ref{Tenant: "globex", ID: ProductID(inCat[0]), Locale: "en-US", Currency: "USD"}); got.Revision != 0 {
			t.Fatalf("another tenant's product changed: %+v", got)
		}
		// Prices stay at or above zero.
		if out, err = r.Reprice(ctx, "acme", cat, Reprice{DeltaCents: int64p(-MaxPriceCents)}); err != nil || out.Revision != 2 {
			t.Fatalf("second Reprice = %+v, %v; want revision 2", out, err)
		}
		if got, _ := r.Get(ctx, Ref{Tenant: "acme", ID: ProductID(inCat[0]), Locale: "en-US", Currency: "USD"}); got.PriceCents != 0 {
			t.Fatalf("price after a reprice below zero: %d, want 0", got.PriceCents)
		}
		recs, err := r.Claim(ctx, time.Now().Add(time.Minute), 10, time.Minute)
		if err != nil || len(recs) != 2 {
			t.Fatalf("Claim = %+v, %v; want the two reprices' records", recs, err)
		}
		for i, rec := range recs {
			if rec.Category != cat || rec.Ref != (Ref{Tenant: "acme"}) || rec.Revision != int64(i+1) {
				t.Fatalf("record %d = %+v; want category %q of acme at revision %d", i, rec, cat, i+1)
			}
		}
		if err := r.Done(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		if left, err := r.Pending(ctx, time.Now().Add(time.Minute), 10); err != nil || len(left) != 0 {
			t.Fatalf("Pending after Done = %+v, %v; want none", left, err)
		}
	})
}

func TestRepriceOfAnEmptyCategoryIsNotFoundAndWritesNothing(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		r := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, r, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reprice(ctx, "acme", "no-such", Reprice{Percent: int64p(5)}); !errors.Is(err, ErrCategoryNotFound) {
			t.Fatalf("Reprice of an empty category = %v, want ErrCategoryNotFound", err)
		}
		if _, err := r.Reprice(ctx, "nobody", Categories[0], Reprice{Percent: int64p(5)}); !errors.Is(err, ErrCategoryNotFound) {
			t.Fatalf("Reprice for an unknown tenant = %v, want ErrCategoryNotFound", err)
		}
		if recs, err := r.Pending(ctx, time.Now().Add(time.Minute), 10); err != nil || len(recs) != 0 {
			t.Fatalf("outbox after refused reprices = %+v, %v; want empty", recs, err)
		}
	})
}

// A reprice on one instance reaches what another holds in memory, read
// alone (category tag) or in a batch (list tag): it serves the new prices
// at once, products of other categories stay in its memory, and the
// outbox keeps no record of an invalidation that was made.
func TestRepriceInvalidatesTheCategoryOnEveryInstance(t *testing.T) {
	ctx := context.Background()
	repo := openRepo(t, t.TempDir()+"/products.db", Options{})
	if _, err := Migrate(ctx, repo, &smallCatalog); err != nil {
		t.Fatal(err)
	}
	bus := &testBus{}
	var failed atomic.Int64
	a, b := newBusInstance(t, Count(repo, nil), bus.endpoint(), &failed), newBusInstance(t, Count(repo, nil), bus.endpoint(), &failed)
	alone := Ref{Tenant: "acme", ID: ProductID(3), Locale: "en-US", Currency: "USD"}
	batched := ProductID(3 + len(Categories)) // the same category
	other := Ref{Tenant: "acme", ID: ProductID(4), Locale: "en-US", Currency: "USD"}
	sel := Selection{Tenant: "acme", Locale: "de-DE", Currency: "EUR", IDs: []string{batched}}
	read := func() (Served, BatchServed, Served) {
		t.Helper()
		sa, err := b.Get(ctx, alone)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := b.GetMany(ctx, sel)
		if err != nil || len(sb.Products) != 1 {
			t.Fatalf("GetMany = %+v, %v", sb, err)
		}
		so, err := b.Get(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		return sa, sb, so
	}
	read()
	if sa, sb, so := read(); sa.Outcome != flightcache.OutcomeHitLocal || sb.Outcomes[flightcache.OutcomeHitLocal] != 1 || so.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("B does not hold the products in memory: %v, %v, %v", sa.Outcome, sb.Outcomes, so.Outcome)
	}
	out, err := a.Reprice(ctx, "acme", CategoryOf(alone.ID), Reprice{DeltaCents: int64p(1000)})
	if err != nil {
		t.Fatal(err)
	}
	sa, sb, so := read()
	if want := smallCatalog.Row("acme", 3, "en-US", "USD").PriceCents + 1000; sa.Product.PriceCents != want || sa.Outcome == flightcache.OutcomeHitLocal {
		t.Fatalf("B after the reprice: %+v (%v); want price %d, reloaded", sa.Product, sa.Outcome, want)
	}
	if want := smallCatalog.Row("acme", 3+len(Categories), "de-DE", "EUR").PriceCents + 1000; sb.Products[0].PriceCents != want {
		t.Fatalf("B's batch after the reprice: %+v; want price %d", sb.Products[0], want)
	}
	if so.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("the reprice dropped a product of another category from B's memory (%v)", so.Outcome)
	}
	if out.Revision != 1 || failed.Load() != 0 {
		t.Fatalf("Reprice = %+v with %d failed invalidations", out, failed.Load())
	}
	if recs := pendingRecords(t, repo); len(recs) != 0 {
		t.Fatalf("the outbox holds %+v after an invalidation that was made", recs)
	}
	// With the Bus refusing, the record stays for a relay, which redoes it
	// as a category's invalidation.
	bus.mu.Lock()
	bus.fail = errors.New("bus down")
	bus.mu.Unlock()
	if _, err := a.Reprice(ctx, "acme", CategoryOf(alone.ID), Reprice{Percent: int64p(-10)}); err != nil {
		t.Fatal(err)
	}
	recs := pendingRecords(t, repo)
	if len(recs) != 1 || recs[0].Category != CategoryOf(alone.ID) {
		t.Fatalf("after a refused invalidation the outbox holds %+v, want the category's record", recs)
	}
	bus.mu.Lock()
	bus.fail = nil
	bus.mu.Unlock()
	bus.published(nil)
	if !b.redo(ctx, recs[0]) {
		t.Fatal("the relay's redo of the category failed")
	}
	sent := map[string]bool{}
	bus.mu.Lock()
	for _, s := range bus.sent {
		sent[s.inv.Target] = s.inv.Kind == driver.InvalidationTag
	}
	bus.mu.Unlock()
	if !sent[CategoryTag("acme", CategoryOf(alone.ID))] || !sent[ListTag("acme")] {
		t.Fatalf("the redo published %v, want the category and list tags", sent)
	}
}

// hidingRepository wraps a Repository as productd's guard does: its
// optional interfaces are hidden, Unwrap reaches them.
type hidingRepository struct{ Repository }

func (h hidingRepository) Unwrap() Repository { return h.Repository }

// The service finds the Repricer under every wrapper, and a repository
// that cannot reprice is refused with ErrRepriceUnsupported.
func TestRepricerOfLooksThroughWrappers(t *testing.T) {
	repo := openRepo(t, t.TempDir()+"/products.db", Options{})
	if rr, ok := RepricerOf(hidingRepository{Count(repo, nil)}); !ok || rr != Repricer(repo) {
		t.Fatalf("RepricerOf through two wrappers = %v, %v; want the SQL repository", rr, ok)
	}
	if _, ok := RepricerOf(Count(NewMemoryRepository(smallCatalog), nil)); ok {
		t.Fatal("RepricerOf found a Repricer in a memory repository")
	}
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	svc, err := NewQueryService(NewMemoryRepository(smallCatalog), ServiceOptions{Mode: ModeNaive, Naive: local, TTL: time.Minute, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reprice(context.Background(), "acme", Categories[0], Reprice{Percent: int64p(1)}); !errors.Is(err, ErrRepriceUnsupported) {
		t.Fatalf("Reprice on a memory repository = %v, want ErrRepriceUnsupported", err)
	}
}
