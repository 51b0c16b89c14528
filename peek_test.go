package flightcache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
)

func TestPeekNeverLoads(t *testing.T) {
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	var o origin
	if v, ok := c.Peek(context.Background(), "p:1"); ok || v != nil {
		t.Fatalf("Peek of a key never loaded = %+v, %v", v, ok)
	}
	mustFetch(t, c, "p:1", o.load("1"))
	if v, ok := c.Peek(context.Background(), "p:1"); !ok || v.Price != 1 {
		t.Fatalf("Peek after a Get = %+v, %v", v, ok)
	}
	// Another instance finds the value in the shared tier.
	other := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	if v, ok := other.Peek(context.Background(), "p:1"); !ok || v.Price != 1 {
		t.Fatalf("Peek from the shared tier = %+v, %v", v, ok)
	}
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times, want 1 (Peek never loads)", n)
	}
	for _, key := range []string{"", "\xff"} {
		if _, ok := c.Peek(context.Background(), key); ok {
			t.Fatalf("Peek of an invalid key found a value")
		}
	}
}

func TestPeekAfterDeleteOrInvalidatePrefixIsAbsent(t *testing.T) {
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	mustFetch(t, c, "p:2", o.load("2"))
	if err := c.Delete(context.Background(), "p:1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Peek(context.Background(), "p:1"); ok {
		t.Fatalf("Peek after Delete = %+v", v)
	}
	if err := c.InvalidatePrefix(context.Background(), "p:"); err != nil {
		t.Fatal(err)
	}
	// The shared tier still holds p:2's entry (it cannot be searched by
	// prefix); the fence makes it absent, to Peek as to Get.
	if _, ok := shared.peek("p:2"); !ok {
		t.Fatal("the test needs p:2's shared entry to outlive the invalidation")
	}
	if v, ok := c.Peek(context.Background(), "p:2"); ok {
		t.Fatalf("Peek after InvalidatePrefix = %+v", v)
	}
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("origin called %d times, want 2", n)
	}
}

func TestPeekOfATombstoneOrAStaleValueIsAbsent(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Minute, StaleFor: time.Hour})
	notFound := func(context.Context) (*product, error) { return nil, flightcache.ErrNotFound }
	if _, err := c.Get(context.Background(), "p:gone", notFound); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatal(err)
	}
	if v, ok := c.Peek(context.Background(), "p:gone"); ok {
		t.Fatalf("Peek of a tombstone = %+v", v)
	}
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	clock.Advance(2 * time.Minute)
	if v, ok := c.Peek(context.Background(), "p:1"); ok {
		t.Fatalf("Peek of a value past its TTL = %+v; a Get would load", v)
	}
}

// A shared tier that fails reads as absent; Peek neither loads nor blocks
// past SharedTimeout. (redislease's tests pause a real Redis.)
func TestPeekWithAFailingSharedTierIsAbsent(t *testing.T) {
	shared := newMapShared(nil)
	writer := newCache(t, flightcache.Options[*product]{Shared: shared, TTL: time.Hour})
	var o origin
	mustFetch(t, writer, "p:1", o.load("1"))
	shared.readErr = errOrigin
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	if v, ok := c.Peek(context.Background(), "p:1"); ok {
		t.Fatalf("Peek with a failing shared tier = %+v", v)
	}
}
