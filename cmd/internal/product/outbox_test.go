package product

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// pendingRecords is everything in r's outbox.
func pendingRecords(t *testing.T, r Outbox) []OutboxRecord {
	t.Helper()
	recs, err := r.Pending(context.Background(), time.Now().Add(time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// An Update commits its outbox record with the row; the writer deletes it
// once its invalidation reached every instance, and leaves it when the
// Bus refused it. The writer then dies; the relay of another instance,
// which still held the old row, makes the invalidation once the Bus works
// again, deletes the record, and serves the update.
func TestOutboxKeepsAnInvalidationTheWriterCouldNotMake(t *testing.T) {
	dialects(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		repo := openRepo(t, dsn, Options{})
		if _, err := Migrate(ctx, repo, &smallCatalog); err != nil {
			t.Fatal(err)
		}
		bus := &testBus{}
		epA, epB := bus.endpoint(), bus.endpoint()
		var failed atomic.Int64
		// Behind a wrapper, as productd has it: OutboxOf finds the outbox.
		counted := Count(repo, nil)
		a, b := newBusInstance(t, counted, epA, &failed), newBusInstance(t, counted, epB, &failed)
		ref := Ref{Tenant: "acme", ID: ProductID(3), Locale: "de-DE", Currency: "EUR"}

		price := int64(111)
		if _, err := a.Update(ctx, ref, Patch{PriceCents: &price}); err != nil {
			t.Fatal(err)
		}
		if recs := pendingRecords(t, repo); len(recs) != 0 {
			t.Fatalf("after an Update whose invalidation succeeded the outbox holds %+v, want nothing", recs)
		}
		missing := Ref{Tenant: "acme", ID: "p-99999", Locale: "de-DE", Currency: "EUR"}
		if _, err := a.Update(ctx, missing, Patch{PriceCents: &price}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Update of a missing row = %v, want ErrNotFound", err)
		}
		if recs := pendingRecords(t, repo); len(recs) != 0 {
			t.Fatalf("an Update that committed nothing left %+v in the outbox", recs)
		}

		// B holds the row in memory; the Bus then refuses A's invalidation.
		if sv, err := b.Get(ctx, ref); err != nil || sv.Product.PriceCents != price {
			t.Fatalf("B: %+v, %v", sv, err)
		}
		bus.mu.Lock()
		bus.fail = errors.New("bus down")
		bus.mu.Unlock()
		price = 222
		up, err := a.Update(ctx, ref, Patch{PriceCents: &price})
		if err != nil {
			t.Fatal(err)
		}
		recs := pendingRecords(t, repo)
		if len(recs) != 1 || recs[0].Ref != ref || recs[0].Revision != up.Revision {
			t.Fatalf("after an invalidation the Bus refused, the outbox holds %+v, want the row at revision %d", recs, up.Revision)
		}
		if sv, err := b.Get(ctx, ref); err != nil || sv.Product.PriceCents != 111 || sv.Outcome != flightcache.OutcomeHitLocal {
			t.Fatalf("B: %+v, %v; want the old row from memory (nothing reached it)", sv, err)
		}

		// A is gone; the Bus works again. B's relay makes the invalidation.
		bus.mu.Lock()
		bus.fail = nil
		bus.mu.Unlock()
		bus.published(epB)
		rctx, stop := context.WithCancel(ctx)
		relayed := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.RelayOutbox(rctx, RelayOptions{Every: 10 * time.Millisecond, Grace: time.Nanosecond,
				OnRelayed: func() { relayed <- struct{}{} }})
		}()
		defer func() { stop(); <-done }()
		select {
		case <-relayed:
		case <-time.After(10 * time.Second):
			t.Fatal("the relay made no invalidation in 10s")
		}
		if recs := pendingRecords(t, repo); len(recs) != 0 {
			t.Fatalf("after the relay the outbox holds %+v", recs)
		}
		tag := ProductTag(ref.Tenant, ref.ID)
		sawTag := false
		for _, inv := range bus.published(epB) {
			sawTag = sawTag || (inv.Kind == driver.InvalidationTag && inv.Target == tag)
		}
		if !sawTag {
			t.Fatalf("the relay published no invalidation of the product's tag %q", tag)
		}
		if sv, err := b.Get(ctx, ref); err != nil || sv.Product.PriceCents != 222 || sv.Product.Revision != up.Revision {
			t.Fatalf("B after the relay: %+v, %v; want price 222 revision %d", sv, err, up.Revision)
		}
	})
}

// A relay whose invalidation fails keeps the record and tries again; a
// repository without an outbox, or naive mode, runs no relay.
func TestOutboxRelayKeepsARecordItCouldNotInvalidate(t *testing.T) {
	ctx := context.Background()
	repo := openRepo(t, t.TempDir()+"/products.db", Options{})
	if _, err := Migrate(ctx, repo, &smallCatalog); err != nil {
		t.Fatal(err)
	}
	bus := &testBus{fail: errors.New("bus down")}
	var failedInv atomic.Int64
	a := newBusInstance(t, repo, bus.endpoint(), &failedInv)
	ref := Ref{Tenant: "globex", ID: ProductID(4), Locale: "en-US", Currency: "USD"}
	price := int64(333)
	if _, err := a.Update(ctx, ref, Patch{PriceCents: &price}); err != nil {
		t.Fatal(err)
	}
	afterUpdate := failedInv.Load()
	if afterUpdate == 0 {
		t.Fatal("the Update's failed invalidation was not counted")
	}
	rctx, stop := context.WithCancel(ctx)
	failures := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.RelayOutbox(rctx, RelayOptions{Every: 10 * time.Millisecond, Grace: time.Nanosecond,
			OnRelayed: func() { t.Error("the relay reported an invalidation the Bus refused") },
			OnFailed: func() {
				select {
				case failures <- struct{}{}:
				default:
				}
			}})
	}()
	for range 2 { // two rounds, both failed
		select {
		case <-failures:
		case <-time.After(10 * time.Second):
			t.Fatal("the relay reported no failure in 10s")
		}
	}
	stop()
	<-done
	if n := failedInv.Load(); n != afterUpdate {
		t.Fatalf("OnInvalidateFailed went from %d to %d during the relay's rounds; it counts failed invalidations after a PUT, the relay counts its own tries", afterUpdate, n)
	}
	if recs := pendingRecords(t, repo); len(recs) != 1 || recs[0].Ref != ref {
		t.Fatalf("after failed relays the outbox holds %+v, want the record kept", recs)
	}

	// Without an outbox (the memory repository) RelayOutbox returns at once.
	mem := newBusInstance(t, NewMemoryRepository(smallCatalog), (&testBus{}).endpoint(), &failedInv)
	returned := make(chan struct{})
	go func() { mem.RelayOutbox(context.Background(), RelayOptions{}); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("RelayOutbox over a repository without an outbox did not return")
	}
}
