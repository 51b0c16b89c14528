package redislease

import (
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// Through real Caches: a write on one instance drops the other instance's
// local copy, so its next read is the new value, not the copy it held.
func TestBusKeepsOtherInstancesLocalTiersFresh(t *testing.T) {
	addr, prefix := sharedRedis(t)
	withBus := instanceConfig{cache: func(o *flightcache.Options[string]) {
		o.Bus = o.Coordinator.(*Coordinator)
		o.TTL = time.Hour // without the bus, the old copy would be served for an hour
	}}
	a := newInstance(t, newClient(t, addr), prefix, withBus)
	b := newInstance(t, newClient(t, addr), prefix, withBus)
	for _, in := range []*instance{a, b} {
		eventually(t, 10*time.Second, "bus up", func() bool { return in.cache.BusState() == driver.BusUp })
	}
	ctx := context.Background()
	old := &origin{value: "v1"}
	if r, err := b.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Value != "v1" {
		t.Fatalf("b's first read = %+v, %v", r, err)
	}
	if r, err := b.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("b's second read = %+v, %v; want a local hit", r, err)
	}
	applied := b.rec.count(driver.EventInvalidationApplied)
	if err := a.cache.Set(ctx, "product:42", "v2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b applied a's invalidation", func() bool {
		return b.rec.count(driver.EventInvalidationApplied) > applied
	})
	r, err := b.cache.Fetch(ctx, "product:42", old.load)
	if err != nil || r.Value != "v2" {
		t.Fatalf("b's read after a's Set = %+v, %v; want v2", r, err)
	}
	if old.calls.Load() != 1 {
		t.Fatalf("origin called %d times, want 1 (v2 comes from the shared tier)", old.calls.Load())
	}
	if s := a.coord.BusStats(); s.Published == 0 {
		t.Fatalf("a's bus stats %+v", s)
	}
}
