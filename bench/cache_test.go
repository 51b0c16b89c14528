package bench_test

// Benchmarks of the read path beside its peers, in one run:
//
//	go test -run '^$' -bench . -benchmem -count 6 . | tee new.txt && benchstat new.txt
//
// Redis benchmarks need the server at 127.0.0.1:6379 (skipped without it).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/bloomguard"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	rediscache "github.com/go-redis/cache/v9"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
)

const benchKeys = 1024

var benchKeyNames = func() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("product:v1:%d", i)
	}
	return keys
}()

var benchProduct = &product{ID: "42", Name: "Teapot", Price: 1999}

func benchLoad(ctx context.Context) (*product, error) { return benchProduct, nil }

var sink *product

// warmLocalCache returns a Cache on a memstore (with a coarse clock of the
// given resolution, or the real clock for 0) holding every bench key.
func warmLocalCache(b *testing.B, resolution time.Duration) *flightcache.Cache[*product] {
	local, err := memstore.New(memstore.Options[*product]{MaxEntries: 10 * benchKeys, ClockResolution: resolution})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	for _, k := range benchKeyNames {
		if _, err := c.Get(context.Background(), k, benchLoad); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkHitLocal: a fresh hit in the in-process tier, pointer V.
func BenchmarkHitLocal(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=flightcache", func(b *testing.B) {
		c := warmLocalCache(b, 0)
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			sink, _ = c.Get(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
			i++
		}
	})
	b.Run("impl=flightcache-coarse", func(b *testing.B) {
		// memstore with its opt-in coarse clock, which the Cache adopts.
		c := warmLocalCache(b, clock.DefaultResolution)
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			sink, _ = c.Get(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
			i++
		}
	})
	b.Run("impl=otter-raw", func(b *testing.B) {
		oc := otter.Must(&otter.Options[string, *product]{MaximumSize: 10 * benchKeys})
		defer oc.StopAllGoroutines()
		for _, k := range benchKeyNames {
			oc.Set(k, benchProduct)
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			sink, _ = oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
			i++
		}
	})
	b.Run("impl=otter-expiry", func(b *testing.B) {
		// otter as memstore configures it: per-entry expiry, which makes
		// every Get read the clock.
		oc := otter.Must(&otter.Options[string, *product]{
			MaximumSize:      10 * benchKeys,
			ExpiryCalculator: otter.ExpiryWriting[string, *product](time.Hour),
		})
		defer oc.StopAllGoroutines()
		for _, k := range benchKeyNames {
			oc.Set(k, benchProduct)
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			sink, _ = oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
			i++
		}
	})
	b.Run("impl=otter-like-memstore-coarse", func(b *testing.B) {
		// otter exactly as memstore with ClockResolution configures it:
		// *Item values, per-entry expiry, a coarse clock.
		clk := clock.NewCoarse(clock.DefaultResolution)
		defer clk.Stop()
		oc := otter.Must(&otter.Options[string, *driver.Item[*product]]{
			MaximumSize: 10 * benchKeys,
			Clock:       clk,
			ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *driver.Item[*product]]) time.Duration {
				return e.Value.StaleUntil.Sub(clk.Now())
			}),
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
			it, _ := oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
			sink = it.Value
			i++
		}
	})
	b.Run("impl=memstore-coarse", func(b *testing.B) {
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 10 * benchKeys, ClockResolution: clock.DefaultResolution})
		defer local.Close()
		now := time.Now()
		for _, k := range benchKeyNames {
			local.Set(k, driver.Item[*product]{Value: benchProduct, Meta: driver.Meta{FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}})
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			it, _ := local.Get(benchKeyNames[i&(benchKeys-1)])
			sink = it.Value
			i++
		}
	})
	b.Run("impl=memstore", func(b *testing.B) {
		// The local tier alone: otter plus the Item copy, no freshness check.
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 10 * benchKeys})
		defer local.Close()
		now := time.Now()
		for _, k := range benchKeyNames {
			local.Set(k, driver.Item[*product]{Value: benchProduct, Meta: driver.Meta{FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}})
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			it, _ := local.Get(benchKeyNames[i&(benchKeys-1)])
			sink = it.Value
			i++
		}
	})
	b.Run("impl=sturdyc", func(b *testing.B) {
		sc := sturdyc.New[*product](10*benchKeys, 8, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
		for _, k := range benchKeyNames {
			sc.GetOrFetch(ctx, k, benchLoad)
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			sink, _ = sc.GetOrFetch(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
			i++
		}
	})
	b.Run("impl=go-redis-cache", func(b *testing.B) {
		// Local TinyLFU only; it stores bytes, so every hit decodes.
		rc := rediscache.New(&rediscache.Options{LocalCache: rediscache.NewTinyLFU(10*benchKeys, time.Hour)})
		for _, k := range benchKeyNames {
			rc.Set(&rediscache.Item{Key: k, Value: benchProduct, TTL: time.Hour})
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			var p product
			rc.Once(&rediscache.Item{Ctx: ctx, Key: benchKeyNames[i&(benchKeys-1)], Value: &p, TTL: time.Hour, Do: func(*rediscache.Item) (any, error) { return benchProduct, nil }})
			i++
		}
	})
}

// BenchmarkGuard: a Get of a key that is in no tier, with a Guard that
// turns it away ("no") or lets it through ("maybe": the Get then runs the
// whole miss path, here a load that finds nothing and stores nothing), next
// to the same miss without a Guard. guard=bloom is bloomguard on 1M IDs at
// 1 %; guard=func a Guard that costs nothing, for the read path's share:
//
//	go test -run '^$' -bench 'BenchmarkGuard' -benchmem -count 6 .
//	go test -run '^$' -bench 'BenchmarkHitLocal$/impl=flightcache-coarse' -benchmem -count 6 .
func BenchmarkGuard(b *testing.B) {
	ctx := context.Background()
	missing := func(ctx context.Context) (*product, error) {
		flightcache.NoStore(ctx)
		return nil, flightcache.ErrNotFound
	}
	f, err := bloomguard.New(bloomguard.Config{ExpectedItems: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	err = f.Rebuild(ctx, func(ctx context.Context, add func(tenant, id string)) error {
		for i := range 1_000_000 {
			add("bench", "product:v1:"+strconv.Itoa(i))
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	bloomGuard := bloomguard.Guard{Filter: f, Split: func(key string) (string, string, bool) { return "bench", key, true }}
	absent := make([]string, benchKeys)
	for i := range absent {
		absent[i] = "product:v1:absent-" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name  string
		guard driver.Guard
		keys  []string
	}{
		{"guard=func/no", guardFunc(func(string) bool { return false }), absent},
		{"guard=bloom/no", bloomGuard, absent},
		{"guard=bloom/maybe", bloomGuard, benchKeyNames},
		{"guard=none/miss", nil, benchKeyNames},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// The coarse clock, as productd runs it (compare with
			// BenchmarkHitLocal/impl=flightcache-coarse).
			local, err := memstore.New(memstore.Options[*product]{MaxEntries: 10 * benchKeys, ClockResolution: clock.DefaultResolution})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(local.Close)
			c, err := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour, Guard: bc.guard})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink, _ = c.Get(ctx, bc.keys[i&(benchKeys-1)], missing)
				i++
			}
		})
	}
}

// BenchmarkColdGet: one cold single-key Get, the path that
// bench/coldget counts: a local miss, a flight, a load that
// answers at once, the write-back to memstore (default options, real
// clock). Every Get asks a key never asked before; the store evicts as it
// fills, as a cache under a stream of new keys does. serial is one caller
// at a time, which mostly measures how fast an idle P wakes the caller up
// again; parallel keeps every P busy, as a server under load does.
func BenchmarkColdGet(b *testing.B) {
	ctx := context.Background()
	newCache := func(b *testing.B) *flightcache.Cache[*product] {
		local, err := memstore.New(memstore.Options[*product]{MaxEntries: 10 * benchKeys})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(local.Close)
		c, err := flightcache.New(flightcache.Options[*product]{Local: local})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	b.Run("callers=serial", func(b *testing.B) {
		c := newCache(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink, _ = c.Get(ctx, "cold:"+strconv.Itoa(i), benchLoad)
			i++
		}
	})
	b.Run("callers=parallel", func(b *testing.B) {
		c := newCache(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Get(ctx, "cold:"+strconv.FormatInt(n.Add(1), 10), benchLoad)
			}
		})
	})
}

// BenchmarkHitLocalParallel is BenchmarkHitLocal from every P at once.
func BenchmarkHitLocalParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=flightcache", func(b *testing.B) {
		c := warmLocalCache(b, 0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Get(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
				i++
			}
		})
	})
	b.Run("impl=flightcache-coarse", func(b *testing.B) {
		c := warmLocalCache(b, clock.DefaultResolution)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Get(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
				i++
			}
		})
	})
	b.Run("impl=otter-raw", func(b *testing.B) {
		oc := otter.Must(&otter.Options[string, *product]{MaximumSize: 10 * benchKeys})
		defer oc.StopAllGoroutines()
		for _, k := range benchKeyNames {
			oc.Set(k, benchProduct)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				oc.GetIfPresent(benchKeyNames[i&(benchKeys-1)])
				i++
			}
		})
	})
	b.Run("impl=sturdyc", func(b *testing.B) {
		sc := sturdyc.New[*product](10*benchKeys, 8, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
		for _, k := range benchKeyNames {
			sc.GetOrFetch(ctx, k, benchLoad)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				sc.GetOrFetch(ctx, benchKeyNames[i&(benchKeys-1)], benchLoad)
				i++
			}
		})
	})
}

// cmdCounter counts the commands a client sends, to prove one round trip
// per shared-tier hit.
type cmdCounter struct{ n atomic.Int64 }

func (h *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (h *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

// BenchmarkHitRedis: a fresh hit in Redis, no local tier, value decoded
// from JSON (go-redis/cache: msgpack, its only codec).
func BenchmarkHitRedis(b *testing.B) {
	ctx := context.Background()
	counter := &cmdCounter{}
	client := newRedisClient(b, counter)
	prefix := uniquePrefix(b)
	report := func(b *testing.B, before int64) {
		b.ReportMetric(float64(counter.n.Load()-before)/float64(b.N), "cmds/op")
	}
	b.Run("impl=flightcache", func(b *testing.B) {
		c, _ := flightcache.New(flightcache.Options[*product]{Shared: newRedisStore(b, client, prefix+"fc:"), TTL: time.Hour})
		defer c.Close()
		c.Get(ctx, "p", benchLoad)
		b.ReportAllocs()
		before := counter.n.Load()
		for b.Loop() {
			sink, _ = c.Get(ctx, "p", benchLoad)
		}
		report(b, before)
	})
	b.Run("impl=go-redis-GET+json", func(b *testing.B) {
		data, _ := json.Marshal(benchProduct)
		client.Set(ctx, prefix+"raw:p", data, time.Hour)
		b.Cleanup(func() { client.Del(ctx, prefix+"raw:p") })
		b.ReportAllocs()
		before := counter.n.Load()
		for b.Loop() {
			raw, err := client.Get(ctx, prefix+"raw:p").Bytes()
			if err != nil {
				b.Fatal(err)
			}
			p := new(product)
			if err := json.Unmarshal(raw, p); err != nil {
				b.Fatal(err)
			}
			sink = p
		}
		report(b, before)
	})
	b.Run("impl=go-redis-cache", func(b *testing.B) {
		rc := rediscache.New(&rediscache.Options{Redis: client})
		k := prefix + "grc:p"
		rc.Set(&rediscache.Item{Ctx: ctx, Key: k, Value: benchProduct, TTL: time.Hour})
		b.Cleanup(func() { client.Del(ctx, k) })
		b.ReportAllocs()
		before := counter.n.Load()
		for b.Loop() {
			var p product
			if err := rc.Once(&rediscache.Item{Ctx: ctx, Key: k, Value: &p, TTL: time.Hour, Do: func(*rediscache.Item) (any, error) { return benchProduct, nil }}); err != nil {
				b.Fatal(err)
			}
		}
		report(b, before)
	})
}

// BenchmarkStampede: 10,000 callers start together on a cold key whose
// loader takes 50 ms. It reports origin calls per key (1 is the goal) and
// the callers' p99 latency beside the loader's. Run with -benchtime=5x.
func BenchmarkStampede(b *testing.B) {
	const (
		callers = 10_000
		latency = 50 * time.Millisecond
	)
	type getFunc func(ctx context.Context, key string, load func() (*product, error)) (*product, error)
	run := func(b *testing.B, get getFunc) {
		var calls atomic.Int64
		load := func() (*product, error) {
			calls.Add(1)
			time.Sleep(latency)
			return benchProduct, nil
		}
		lat := make([]time.Duration, 0, callers*8)
		var mu sync.Mutex
		n := 0
		for b.Loop() {
			key := fmt.Sprintf("cold:%d", n)
			n++
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					<-start
					t0 := time.Now()
					p, err := get(context.Background(), key, load)
					d := time.Since(t0)
					if err != nil || p == nil {
						b.Errorf("get: %v", err)
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
		}
		slices.Sort(lat)
		p99 := lat[len(lat)*99/100]
		b.ReportMetric(float64(calls.Load())/float64(n), "origin-calls/key")
		b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
		b.ReportMetric(float64(latency)/float64(time.Millisecond), "loader-ms")
	}
	b.Run("impl=flightcache", func(b *testing.B) {
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 100_000})
		defer local.Close()
		c, _ := flightcache.New(flightcache.Options[*product]{Local: local})
		defer c.Close()
		run(b, func(ctx context.Context, key string, load func() (*product, error)) (*product, error) {
			return c.Get(ctx, key, func(context.Context) (*product, error) { return load() })
		})
	})
	b.Run("impl=sturdyc", func(b *testing.B) {
		sc := sturdyc.New[*product](100_000, 8, 5*time.Minute, 10, sturdyc.WithNoContinuousEvictions())
		run(b, func(ctx context.Context, key string, load func() (*product, error)) (*product, error) {
			return sc.GetOrFetch(ctx, key, func(context.Context) (*product, error) { return load() })
		})
	})
	b.Run("impl=go-redis-cache", func(b *testing.B) {
		rc := rediscache.New(&rediscache.Options{LocalCache: rediscache.NewTinyLFU(100_000, 5*time.Minute)})
		run(b, func(ctx context.Context, key string, load func() (*product, error)) (*product, error) {
			var p product
			err := rc.Once(&rediscache.Item{Ctx: ctx, Key: key, Value: &p, TTL: 5 * time.Minute, Do: func(*rediscache.Item) (any, error) { return load() }})
			return &p, err
		})
	})
}
