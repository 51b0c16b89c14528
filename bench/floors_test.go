package bench_test

// Floors of the read path: what a hit cannot cost less than, measured in
// the same run as BenchmarkHitLocal (docs/PERFORMANCE.md, "Speed goals"):
//
//	go test -run '^$' -bench 'BenchmarkHitLocal$|FloorHitLocal' -benchmem -count 6 .
//	go test -run '^$' -bench 'BatchOverlapping' -benchmem -count 6 .

import (
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
	"github.com/maypok86/otter/v2"
)

var sinkTime time.Time

// BenchmarkFloorHitLocal: the clock reads a local hit is made of, alone,
// and the least a hit that checks freshness itself can do.
//
//   - impl=time.Now: one time.Now (wall and monotonic clock).
//   - impl=clock.Monotonic: one read of the clock memstore and a default
//     Cache use (the monotonic clock only; what otter reads too).
//   - impl=otter-expiry+freshness: otter with per-entry expiry (as
//     BenchmarkHitLocal/impl=otter-expiry, one clock read inside) holding
//     memstore's *driver.Item, then the Cache's freshness check on the
//     item with a second read of clock.Monotonic: the floor of a hit on a
//     store that expires entries by its own clock read, by a Cache that
//     reads the clock again to decide freshness.
//   - impl=otter-coarse-expiry+freshness: the same with one precise read,
//     handed to the freshness check, and otter on a coarse clock for its
//     expiry (an atomic load): the floor of a hit that reads the clock
//     once, as memstore's GetAt lets the Cache do.
func BenchmarkFloorHitLocal(b *testing.B) {
	b.Run("impl=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			sinkTime = time.Now()
		}
	})
	b.Run("impl=clock.Monotonic", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			sinkTime = clock.Monotonic()
		}
	})
	b.Run("impl=otter-expiry+freshness", func(b *testing.B) {
		oc := otter.Must(&otter.Options[string, *driver.Item[*product]]{
			MaximumSize:      10 * benchKeys,
			ExpiryCalculator: otter.ExpiryWriting[string, *driver.Item[*product]](time.Hour),
		})
		defer oc.StopAllGoroutines()
		now := time.Now()
		for _, k := range benchKeyNames {
			oc.Set(k, &driver.Item[*product]{Value: benchProduct, Meta: driver.Meta{FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}})
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			it, ok := oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
			if ok && clock.Monotonic().Before(it.FreshUntil) {
				sink = it.Value
			}
			i++
		}
	})
	b.Run("impl=otter-coarse-expiry+freshness", func(b *testing.B) {
		// The least a hit can cost with one precise clock read: otter with
		// per-entry expiry on a coarse clock (memstore's default since the
		// Cache hands it its reading), the item's pointer, one
		// clock.Monotonic read and the freshness check.
		clk := otter.NewCoarseClock(time.Second)
		defer clk.Stop()
		oc := otter.Must(&otter.Options[string, *driver.Item[*product]]{
			MaximumSize:      10 * benchKeys,
			Clock:            clk,
			ExpiryCalculator: otter.ExpiryWriting[string, *driver.Item[*product]](time.Hour),
		})
		defer oc.StopAllGoroutines()
		now := time.Now()
		for _, k := range benchKeyNames {
			oc.Set(k, &driver.Item[*product]{Value: benchProduct, Meta: driver.Meta{FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}})
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			now := clock.Monotonic()
			it, ok := oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
			if ok && now.Before(it.FreshUntil) {
				sink = it.Value
			}
			i++
		}
	})
}

// BenchmarkFloorBatchOverlapping is BenchmarkBatchOverlapping's rounds with
// no cache: every batch calls the loader for its 100 keys itself, at once.
// Nothing is coalesced (each key is loaded 8 times); what is left is the
// loader's 1 ms sleep and the rounds' own goroutines, the time floor of a
// round.
func BenchmarkFloorBatchOverlapping(b *testing.B) {
	b.Run("impl=loader-only", func(b *testing.B) {
		batchOverlapping(b, func(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]*product, error)) {
			load(ctx, keys)
		})
	})
}
