package memstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/maypok86/otter/v2"
)

type payload struct{ name string }

const benchKeys = 1024

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkGet measures a hit on Store (pointer V, per-item expiry) against a
// raw otter cache of the same pointers with a fixed write expiry: the price of
// the Item wrapper and the per-item calculator.
func BenchmarkGet(b *testing.B) {
	keys := benchKeyNames()
	now := time.Now()

	b.Run("memstore", func(b *testing.B) {
		s, err := New(Options[*payload]{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, k := range keys {
			s.Set(k, driver.Item[*payload]{Value: &payload{k}, Meta: driver.Meta{
				FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(2 * time.Hour),
			}})
		}
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			if _, ok := s.Get(keys[i&(benchKeys-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})

	b.Run("memstore-GetAt", func(b *testing.B) {
		// GetAt with the caller's reading, as a Cache hit calls it: no
		// precise clock read inside.
		s, err := New(Options[*payload]{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, k := range keys {
			s.Set(k, driver.Item[*payload]{Value: &payload{k}, Meta: driver.Meta{
				FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(2 * time.Hour),
			}})
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, ok := s.GetAt(keys[i&(benchKeys-1)], now); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})

	b.Run("otter-raw", func(b *testing.B) {
		c := otter.Must(&otter.Options[string, *payload]{
			MaximumSize:      DefaultMaxEntries,
			ExpiryCalculator: otter.ExpiryWriting[string, *payload](2 * time.Hour),
		})
		defer c.StopAllGoroutines()
		for _, k := range keys {
			c.Set(k, &payload{k})
		}
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})

	// The same Items memstore stores, in a bare otter cache with the same
	// per-item expiry: separates the cost of copying a whole Item out from
	// the cost of the Store wrapper itself.
	b.Run("otter-raw-Item", func(b *testing.B) {
		c := otter.Must(&otter.Options[string, driver.Item[*payload]]{
			MaximumSize: DefaultMaxEntries,
			ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, driver.Item[*payload]]) time.Duration {
				return time.Until(e.Value.StaleUntil)
			}),
		})
		defer c.StopAllGoroutines()
		for _, k := range keys {
			c.Set(k, driver.Item[*payload]{Value: &payload{k}, Meta: driver.Meta{StaleUntil: now.Add(2 * time.Hour)}})
		}
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})

	b.Run("memstore-parallel", func(b *testing.B) {
		s, err := New(Options[*payload]{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, k := range keys {
			s.Set(k, driver.Item[*payload]{Value: &payload{k}, Meta: driver.Meta{StaleUntil: now.Add(2 * time.Hour)}})
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				s.Get(keys[i&(benchKeys-1)])
				i++
			}
		})
	})
}

// TestGetDoesNotAllocateForPointerValues pins the benchmark's claim so a
// regression fails the ordinary test run, not just a benchmark read by eye.
func TestGetDoesNotAllocateForPointerValues(t *testing.T) {
	s, err := New(Options[*payload]{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set("k", driver.Item[*payload]{Value: &payload{"k"}, Meta: driver.Meta{StaleUntil: time.Now().Add(time.Hour)}})
	if n := testing.AllocsPerRun(1000, func() { s.Get("k") }); n != 0 {
		t.Fatalf("Get allocates %.1f times per call; want 0", n)
	}
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() { s.GetAt("k", now) }); n != 0 {
		t.Fatalf("GetAt allocates %.1f times per call; want 0", n)
	}
}

// BenchmarkAll ranges over a store of 100k items, as bulk invalidation
// (InvalidatePrefix, Clear, the resynchronisation after the Bus was down)
// does, and reports the cost per item visited.
func BenchmarkAll(b *testing.B) {
	const items = 100_000
	for _, tc := range []struct {
		name string
		opts Options[*payload]
	}{
		{"real-clock", Options[*payload]{MaxEntries: 2 * items}},
		{"coarse-clock", Options[*payload]{MaxEntries: 2 * items, ClockResolution: time.Millisecond}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			for i := range items {
				k := "key:" + strconv.Itoa(i)
				s.Set(k, driver.Item[*payload]{Value: &payload{k}, Meta: driver.Meta{StaleUntil: now.Add(time.Hour)}})
			}
			b.ReportAllocs()
			b.ResetTimer()
			visited := 0
			for b.Loop() {
				for range s.All() {
					visited++
				}
			}
			if visited != b.N*items {
				b.Fatalf("visited %d items in %d iterations, want %d each", visited, b.N, items)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(visited), "ns/item")
		})
	}
}
