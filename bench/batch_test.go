package bench_test

// Batch benchmarks beside 100 single Gets and sturdyc's GetOrFetchBatch,
// in one run:
//
//	go test -run '^$' -bench 'Batch' -benchmem -count 6 . | tee batch.txt && benchstat batch.txt

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/memstore"
	"github.com/viccon/sturdyc"
)

const batchN = 100

// batchKeys are the first 100 bench keys, and batchIDs the ids sturdyc's
// key function turns into the same keys.
var batchKeys = benchKeyNames[:batchN]

func benchBatchLoad(ctx context.Context, keys []string) (map[string]*product, error) {
	m := make(map[string]*product, len(keys))
	for _, k := range keys {
		m[k] = benchProduct
	}
	return m, nil
}

func sturdycBatchFetch(ctx context.Context, ids []string) (map[string]*product, error) {
	return benchBatchLoad(ctx, ids)
}

// identityKey makes sturdyc's keys the ids themselves, as flightcache's
// are.
func identityKey(id string) string { return id }

func newSturdyc() *sturdyc.Client[*product] {
	return sturdyc.New[*product](100*benchKeys, 8, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
}

// BenchmarkBatchHitLocal: 100 keys, all fresh in the local tier.
func BenchmarkBatchHitLocal(b *testing.B) {
	ctx := context.Background()
	for _, res := range []struct {
		name       string
		resolution time.Duration
	}{{"", 0}, {"-coarse", clock.DefaultResolution}} {
		b.Run("impl=flightcache-FetchMany"+res.name, func(b *testing.B) {
			c := warmLocalCache(b, res.resolution)
			b.ReportAllocs()
			for b.Loop() {
				rs := c.FetchMany(ctx, batchKeys, benchBatchLoad)
				sink = rs[0].Value
			}
		})
		b.Run("impl=flightcache-GetMany"+res.name, func(b *testing.B) {
			c := warmLocalCache(b, res.resolution)
			b.ReportAllocs()
			for b.Loop() {
				m, _ := c.GetMany(ctx, batchKeys, benchBatchLoad)
				sink = m[batchKeys[0]]
			}
		})
		b.Run("impl=flightcache-100xGet"+res.name, func(b *testing.B) {
			c := warmLocalCache(b, res.resolution)
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range batchKeys {
					sink, _ = c.Get(ctx, k, benchLoad)
				}
			}
		})
	}
	b.Run("impl=sturdyc-GetOrFetchBatch", func(b *testing.B) {
		sc := newSturdyc()
		sc.GetOrFetchBatch(ctx, batchKeys, identityKey, sturdycBatchFetch)
		b.ReportAllocs()
		for b.Loop() {
			m, _ := sc.GetOrFetchBatch(ctx, batchKeys, identityKey, sturdycBatchFetch)
			sink = m[batchKeys[0]]
		}
	})
}

// coldKeys returns 100 keys never asked before in this process.
var coldSeq atomic.Int64

func coldKeys() []string {
	n := coldSeq.Add(1)
	keys := make([]string, batchN)
	for i := range keys {
		keys[i] = fmt.Sprintf("cold:%d:%d", n, i)
	}
	return keys
}

// BenchmarkBatchMiss: 100 keys that no tier has; the loader answers at
// once, so this is the cost of the machinery around one origin call.
func BenchmarkBatchMiss(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=flightcache-FetchMany", func(b *testing.B) {
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 100 * benchKeys}) // sturdyc's capacity
		defer local.Close()
		c, _ := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour})
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			keys := coldKeys()
			b.StartTimer()
			rs := c.FetchMany(ctx, keys, benchBatchLoad)
			sink = rs[0].Value
		}
	})
	b.Run("impl=sturdyc-GetOrFetchBatch", func(b *testing.B) {
		sc := newSturdyc()
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			keys := coldKeys()
			b.StartTimer()
			m, _ := sc.GetOrFetchBatch(ctx, keys, identityKey, sturdycBatchFetch)
			sink = m[keys[0]]
		}
	})
}

// BenchmarkBatchOverlapping: 16 batches of 100 keys start together on a
// cold pool of 200 keys, as concurrent requests for listing pages do. The
// loader takes 1 ms. It reports the origin's keys loaded per distinct key
// (1 is the goal) and loader calls per round. BenchmarkFloorBatchOverlapping
// (floors_test.go) runs the same rounds with no cache at all.
func BenchmarkBatchOverlapping(b *testing.B) {
	b.Run("impl=flightcache-FetchMany", func(b *testing.B) {
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 100 * benchKeys}) // sturdyc's capacity
		defer local.Close()
		c, _ := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour})
		defer c.Close()
		batchOverlapping(b, func(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]*product, error)) {
			c.FetchMany(ctx, keys, load)
		})
	})
	b.Run("impl=flightcache-FetchMany-Batcher", func(b *testing.B) {
		// The batches' loads share the Batcher's calls: the keys each
		// batch leads merge into calls of up to 100 keys.
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 100 * benchKeys})
		defer local.Close()
		c, _ := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour})
		defer c.Close()
		var (
			once sync.Once
			bt   *flightcache.Batcher[*product]
		)
		batchOverlapping(b, func(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]*product, error)) {
			once.Do(func() { bt, _ = flightcache.NewBatcher(load, flightcache.BatcherOptions{}) })
			c.FetchMany(ctx, keys, bt.LoadMany)
		})
	})
	b.Run("impl=sturdyc-GetOrFetchBatch", func(b *testing.B) {
		sc := newSturdyc()
		batchOverlapping(b, func(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]*product, error)) {
			sc.GetOrFetchBatch(ctx, keys, identityKey, load)
		})
	})
}

// batchOverlapping is BenchmarkBatchOverlapping's rounds for one
// implementation's fetch.
func batchOverlapping(b *testing.B, fetch func(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]*product, error))) {
	const (
		batches = 16
		pool    = 200
	)
	var loadedKeys, calls atomic.Int64
	load := func(ctx context.Context, keys []string) (map[string]*product, error) {
		calls.Add(1)
		loadedKeys.Add(int64(len(keys)))
		time.Sleep(time.Millisecond)
		return benchBatchLoad(ctx, keys)
	}
	rounds := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		round := coldSeq.Add(1)
		sets := make([][]string, batches)
		for i := range sets {
			sets[i] = make([]string, batchN)
			for j := range sets[i] {
				sets[i][j] = fmt.Sprintf("ov:%d:%d", round, (i*batchN/batches*2+j*7)%pool)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, keys := range sets {
			wg.Go(func() {
				<-start
				fetch(context.Background(), keys, load)
			})
		}
		b.StartTimer()
		close(start)
		wg.Wait()
		rounds++
	}
	b.ReportMetric(float64(loadedKeys.Load())/float64(rounds*pool), "loaded/key")
	b.ReportMetric(float64(calls.Load())/float64(rounds), "loader-calls/round")
}

// BenchmarkBatchHitRedis: 100 keys missing locally (no local tier) and
// present in Redis; it reports Redis commands and round trips per batch.
func BenchmarkBatchHitRedis(b *testing.B) {
	ctx := context.Background()
	counter := &cmdCounter{}
	trips := &roundTrips{}
	client := newRedisClient(b, counter, trips)
	prefix := uniquePrefix(b)
	report := func(b *testing.B, cmds int64) {
		n := trips.reset()
		b.ReportMetric(float64(counter.n.Load()-cmds)/float64(b.N), "cmds/op")
		b.ReportMetric(float64(n)/float64(b.N), "round-trips/op")
	}
	c, _ := flightcache.New(flightcache.Options[*product]{Shared: newRedisStore(b, client, prefix), TTL: time.Hour})
	defer c.Close()
	c.FetchMany(ctx, batchKeys, benchBatchLoad)
	b.Run("impl=flightcache-FetchMany", func(b *testing.B) {
		b.ReportAllocs()
		before := counter.n.Load()
		trips.reset()
		for b.Loop() {
			rs := c.FetchMany(ctx, batchKeys, benchBatchLoad)
			sink = rs[0].Value
		}
		report(b, before)
	})
	b.Run("impl=flightcache-100xGet", func(b *testing.B) {
		b.ReportAllocs()
		before := counter.n.Load()
		trips.reset()
		for b.Loop() {
			for _, k := range batchKeys {
				sink, _ = c.Get(ctx, k, benchLoad)
			}
		}
		report(b, before)
	})
}
