package bench_test

// Memory per entry of the local tier beside otter and sturdyc, in one run:
//
//	go test -run '^$' -bench 'MemoryPerEntry' -benchtime 1x -count 3 .
//
// Each side holds the same 1,000,000 keys with a 100-byte []byte value;
// the keys and values are built once, before any side, and shared, so
// what a side adds is its own bookkeeping (B/entry). B/entry-with-data
// adds what every side also holds: the key string (16 B) and the value's
// array (112 B, its size class).

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	"github.com/maypok86/otter/v2"
	"github.com/viccon/sturdyc"
)

const (
	memEntries = 1_000_000
	memValue   = 100
	// memData is what every side holds per entry besides its bookkeeping:
	// the key's bytes ("key:0000000", 11 bytes, a 16-byte allocation) and
	// the value's array (100 bytes, a 112-byte allocation).
	memData = 16 + 112
)

// memKeysAndValues builds the keys and values once, when the benchmark first runs
// (not at package initialisation: the package's other tests and
// benchmarks do not need 130 MB).
var memKeysAndValues = sync.OnceValues(func() ([]string, [][]byte) {
	keys, values := make([]string, memEntries), make([][]byte, memEntries)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%07d", i)
		values[i] = make([]byte, memValue)
	}
	return keys, values
})

// heapAfterGC is the live heap once the garbage collector has run.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measureEntries reports the heap a side adds per entry: fill builds the
// side and stores every key, then returns it (kept alive until measured)
// and how many entries it holds.
func measureEntries(b *testing.B, fill func() (keep any, held int)) {
	var perEntry float64
	for b.Loop() {
		before := heapAfterGC()
		keep, held := fill()
		after := heapAfterGC()
		if held < memEntries*99/100 {
			b.Fatalf("holds %d entries of %d: the bound evicted some, the measure would be low", held, memEntries)
		}
		perEntry = float64(after-before) / float64(held)
		runtime.KeepAlive(keep)
		if c, ok := keep.(interface{ Close() }); ok {
			c.Close()
		}
	}
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(perEntry+memData, "B/entry-with-data")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMemoryPerEntry: 1M keys, 100-byte values. Run with -benchtime 1x.
func BenchmarkMemoryPerEntry(b *testing.B) {
	memKeys, memValues := memKeysAndValues()
	now := time.Now()
	meta := driver.Meta{FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(2 * time.Hour), LoadedAt: now}
	b.Run("impl=flightcache-memstore", func(b *testing.B) {
		// Defaults but for the bound, which must hold every key.
		measureEntries(b, func() (any, int) {
			s, err := memstore.New(memstore.Options[[]byte]{MaxEntries: 2 * memEntries})
			if err != nil {
				b.Fatal(err)
			}
			for i, k := range memKeys {
				s.Set(k, driver.Item[[]byte]{Value: memValues[i], Meta: meta, FilledAt: now})
			}
			return s, s.Len()
		})
	})
	b.Run("impl=otter", func(b *testing.B) {
		measureEntries(b, func() (any, int) {
			c := otter.Must(&otter.Options[string, []byte]{MaximumSize: 2 * memEntries})
			for i, k := range memKeys {
				c.Set(k, memValues[i])
			}
			return otterCloser[[]byte]{c}, c.EstimatedSize()
		})
	})
	b.Run("impl=otter-expiry", func(b *testing.B) {
		// otter with per-entry expiry, as memstore configures it.
		measureEntries(b, func() (any, int) {
			c := otter.Must(&otter.Options[string, []byte]{
				MaximumSize:      2 * memEntries,
				ExpiryCalculator: otter.ExpiryWriting[string, []byte](time.Hour),
			})
			for i, k := range memKeys {
				c.Set(k, memValues[i])
			}
			return otterCloser[[]byte]{c}, c.EstimatedSize()
		})
	})
	b.Run("impl=otter-expiry-item", func(b *testing.B) {
		// The floor of memstore on otter: otter with per-entry expiry
		// holding a pointer to the driver.Item the Cache hands the tier,
		// nothing of memstore's own.
		measureEntries(b, func() (any, int) {
			c := otter.Must(&otter.Options[string, *driver.Item[[]byte]]{
				MaximumSize:      2 * memEntries,
				ExpiryCalculator: otter.ExpiryWriting[string, *driver.Item[[]byte]](time.Hour),
			})
			for i, k := range memKeys {
				c.Set(k, &driver.Item[[]byte]{Value: memValues[i], Meta: meta, FilledAt: now})
			}
			return otterCloser[*driver.Item[[]byte]]{c}, c.EstimatedSize()
		})
	})
	b.Run("impl=otter-expiry-item-int64", func(b *testing.B) {
		// What an Item with int64 times would cost: otter with per-entry
		// expiry holding a pointer to everything a driver.Item holds, its
		// five times as Unix nanoseconds (the floor with Get still
		// returning a pointer, so that a hit allocates nothing).
		measureEntries(b, func() (any, int) {
			c := otter.Must(&otter.Options[string, *compactItem]{
				MaximumSize:      2 * memEntries,
				ExpiryCalculator: otter.ExpiryWriting[string, *compactItem](time.Hour),
			})
			for i, k := range memKeys {
				c.Set(k, newCompactItem(memValues[i], meta, now))
			}
			return otterCloser[*compactItem]{c}, c.EstimatedSize()
		})
	})
	b.Run("impl=otter-expiry-inline-int64", func(b *testing.B) {
		// The same fields held by value in otter's node: no allocation of
		// its own per entry, but a hit would have to copy it out (or build
		// a driver.Item) instead of returning a pointer.
		measureEntries(b, func() (any, int) {
			c := otter.Must(&otter.Options[string, compactItem]{
				MaximumSize:      2 * memEntries,
				ExpiryCalculator: otter.ExpiryWriting[string, compactItem](time.Hour),
			})
			for i, k := range memKeys {
				c.Set(k, *newCompactItem(memValues[i], meta, now))
			}
			return otterCloser[compactItem]{c}, c.EstimatedSize()
		})
	})
	b.Run("impl=sturdyc", func(b *testing.B) {
		measureEntries(b, func() (any, int) {
			c := sturdyc.New[[]byte](2*memEntries, 8, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
			for i, k := range memKeys {
				c.Set(k, memValues[i])
			}
			return c, c.Size()
		})
	})
}

// otterCloser gives an otter cache the Close measureEntries calls.
type otterCloser[V any] struct{ c *otter.Cache[string, V] }

func (o otterCloser[V]) Close() { o.c.StopAllGoroutines() }

// compactItem is everything a driver.Item[[]byte] holds, its times as Unix
// nanoseconds (104 bytes against the Item's 184): what the local tier
// would keep per entry if driver.Meta used int64 times.
type compactItem struct {
	value                                               []byte
	freshUntil, staleUntil, loadedAt, filledAt, version int64
	loadDuration                                        time.Duration
	notFound                                            bool
	tags                                                []string
}

func newCompactItem(v []byte, m driver.Meta, filledAt time.Time) *compactItem {
	return &compactItem{value: v, freshUntil: m.FreshUntil.UnixNano(), staleUntil: m.StaleUntil.UnixNano(),
		loadedAt: m.LoadedAt.UnixNano(), filledAt: filledAt.UnixNano(), version: m.Version.UnixNano(),
		loadDuration: m.LoadDuration, notFound: m.NotFound, tags: m.Tags}
}
