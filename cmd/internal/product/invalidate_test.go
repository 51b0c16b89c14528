package product

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
)

// testBus is an in-process driver.Bus: Publish hands the invalidation
// to the subscribers of every other endpoint before it returns, and
// records it. Subscriptions are up at once.
type testBus struct {
	mu   sync.Mutex
	subs map[*busEndpoint][]driver.BusHandler // guarded by mu
	sent []sentInvalidation                   // guarded by mu
	fail error                                // Publish returns it when set; guarded by mu
}

type sentInvalidation struct {
	from *busEndpoint
	inv  driver.Invalidation
}

// busEndpoint is one instance's Bus on a testBus.
type busEndpoint struct{ net *testBus }

func (n *testBus) endpoint() *busEndpoint { return &busEndpoint{net: n} }

func (e *busEndpoint) Publish(_ context.Context, _ string, inv driver.Invalidation) error {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if e.net.fail != nil {
		return e.net.fail
	}
	e.net.sent = append(e.net.sent, sentInvalidation{from: e, inv: inv})
	for ep, hs := range e.net.subs {
		if ep != e {
			for _, h := range hs {
				h.Invalidated(inv)
			}
		}
	}
	return nil
}

func (e *busEndpoint) Subscribe(_ string, h driver.BusHandler) (func(), error) {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if e.net.subs == nil {
		e.net.subs = make(map[*busEndpoint][]driver.BusHandler)
	}
	e.net.subs[e] = append(e.net.subs[e], h)
	h.BusChanged(driver.BusUp)
	return func() {
		e.net.mu.Lock()
		defer e.net.mu.Unlock()
		delete(e.net.subs, e)
	}, nil
}

// published returns what ep published since the last call, and forgets it.
func (n *testBus) published(ep *busEndpoint) []driver.Invalidation {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []driver.Invalidation
	for _, s := range n.sent {
		if s.from == ep {
			out = append(out, s.inv)
		}
	}
	n.sent = nil
	return out
}

// newBusInstance is one process with its own memory tier on the bus; the
// origin is shared. failed counts OnInvalidateFailed.
func newBusInstance(t *testing.T, repo Repository, bus driver.Bus, failed *atomic.Int64) *QueryService {
	t.Helper()
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The instances share one clock: no skew to allow for, so a read just
	// after an invalidation is not taken for older than it.
	c, err := flightcache.New(flightcache.Options[Entry]{Name: "product", Local: local, Bus: bus, TTL: time.Hour, NegativeTTL: time.Second,
		ClockSkew: flightcache.DisableClockSkew, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Hour, NegativeTTL: time.Second, Logger: quiet, OnInvalidateFailed: func() { failed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// An Update on one instance publishes the invalidation of the product's
// tag and its tenant's list tag first, then deletes the superseded
// floors' keys; the other instance, which held every locale and currency
// of the product in memory, reloads all of them and serves the update,
// while other products stay in its memory.
func TestUpdateInvalidatesEveryVariantOnEveryInstanceByTag(t *testing.T) {
	repo := NewMemoryRepository(smallCatalog)
	bus := &testBus{}
	epA, epB := bus.endpoint(), bus.endpoint()
	var failed atomic.Int64
	a, b := newBusInstance(t, repo, epA, &failed), newBusInstance(t, repo, epB, &failed)
	ctx := context.Background()
	ref := Ref{Tenant: "acme", ID: ProductID(7), Locale: "de-DE", Currency: "EUR"}
	other := Ref{Tenant: "acme", ID: ProductID(8), Locale: "de-DE", Currency: "EUR"}
	variants := func(r Ref) []Ref {
		var out []Ref
		for _, l := range smallCatalog.Locales {
			for _, c := range smallCatalog.Currencies {
				out = append(out, Ref{Tenant: r.Tenant, ID: r.ID, Locale: l, Currency: c})
			}
		}
		return out
	}
	keyPrefix, err := a.keys.Tenant(ref.Tenant).ID(ref.ID).Prefix()
	if err != nil {
		t.Fatal(err)
	}
	wantTags := []string{ProductTag(ref.Tenant, ref.ID), ListTag(ref.Tenant)}
	hot := func(s *QueryService, r Ref) bool {
		t.Helper()
		sv, err := s.Get(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return sv.Outcome == flightcache.OutcomeHitLocal
	}
	for round := 1; round <= 3; round++ {
		for _, r := range append(variants(ref), other) {
			hot(b, r)
			if !hot(b, r) {
				t.Fatalf("round %d: B does not hold %+v in memory after reading it", round, r)
			}
		}
		bus.published(epA) // the reads published nothing; start clean
		price := int64(100 + round)
		up, err := a.Update(ctx, ref, Patch{PriceCents: &price})
		if err != nil {
			t.Fatal(err)
		}
		sent := bus.published(epA)
		if len(sent) < 3 {
			t.Fatalf("round %d: A published %d invalidations, want two tags and the superseded floors' keys", round, len(sent))
		}
		// The tags first: they are the fence every instance needs, and
		// they must not wait behind the deletes when Redis is slow.
		for i, inv := range sent {
			switch {
			case i < len(wantTags) && (inv.Kind != driver.InvalidationTag || inv.Target != wantTags[i]):
				t.Fatalf("round %d: A's invalidation %d is %v %q, want the tag %q", round, i, inv.Kind, inv.Target, wantTags[i])
			case i >= len(wantTags) && (inv.Kind != driver.InvalidationKey || !strings.HasPrefix(inv.Target, keyPrefix)):
				t.Fatalf("round %d: A's invalidation %d is %v %q, want a key of the product after the tags", round, i, inv.Kind, inv.Target)
			}
		}
		// Floor 0 always; from round 2 on also floor round-1 (A's own).
		if want := min(round, 2) + len(wantTags); len(sent) != want {
			t.Fatalf("round %d: A published %d invalidations, want %d", round, len(sent), want)
		}
		for _, r := range variants(ref) {
			sv, err := b.Get(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if sv.Outcome == flightcache.OutcomeHitLocal {
				t.Fatalf("round %d: B served %+v from memory after A's update", round, r)
			}
			if r == ref && (sv.Product.PriceCents != price || sv.Product.Revision != up.Revision) {
				t.Fatalf("round %d: B served price %d revision %d, want %d revision %d", round, sv.Product.PriceCents, sv.Product.Revision, price, up.Revision)
			}
		}
		if !hot(b, other) {
			t.Fatalf("round %d: the update of %s dropped another product from B's memory", round, ref.ID)
		}
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d invalidations counted as failed", n)
	}
}

// A Bus that refuses the invalidations fails no Update: each failed
// invalidation (the floor key's delete, the two tags) is counted, and the
// writer still reads its own write.
func TestUpdateCountsUnpublishedInvalidationsAndSucceeds(t *testing.T) {
	repo := NewMemoryRepository(smallCatalog)
	bus := &testBus{}
	var failed atomic.Int64
	a := newBusInstance(t, repo, bus.endpoint(), &failed)
	ctx := context.Background()
	ref := Ref{Tenant: "globex", ID: ProductID(3), Locale: "en-US", Currency: "USD"}
	if _, err := a.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	bus.mu.Lock()
	bus.fail = errors.New("bus unreachable")
	bus.mu.Unlock()
	price := int64(4242)
	up, err := a.Update(ctx, ref, Patch{PriceCents: &price})
	if err != nil {
		t.Fatalf("Update with the bus failing: %v", err)
	}
	if n := failed.Load(); n != 3 {
		t.Fatalf("%d invalidations counted as failed, want 3 (floor 0's delete and the two tags)", n)
	}
	sv, err := a.Get(ctx, ref)
	if err != nil || sv.Product.Revision != up.Revision {
		t.Fatalf("Get after the Update: %+v, %v; want revision %d", sv.Product, err, up.Revision)
	}
}
