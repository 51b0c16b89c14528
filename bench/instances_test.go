package bench_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flightcache "github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
)

// BenchmarkCurveInstances: origin queries per expiry against instances
// (1 to 16), each an in-process Cache with its own Redis client, sharing
// one Redis: in local mode (the shared tier only: each instance coalesces
// its own callers) and in cluster mode (a redislease Coordinator: one
// load across the instances). Each op is a cold key that 16 callers per
// instance ask for at once; the loader takes 20 ms. origin-calls/op is the
// curve (make perf-report); ns/op is the herd's time to the last answer.
func BenchmarkCurveInstances(b *testing.B) {
	const callersPerInstance, loadLatency = 16, 20 * time.Millisecond
	for _, n := range []int{1, 2, 4, 8, 16} {
		for _, mode := range []string{"local", "cluster"} {
			b.Run("instances="+strconv.Itoa(n)+"/impl=flightcache-"+mode, func(b *testing.B) {
				prefix := uniquePrefix(b)
				// Registered first, so it runs after every instance closed.
				cleaner := newRedisClient(b)
				b.Cleanup(func() { cleanPrefix(b, cleaner, prefix) })
				caches := make([]*flightcache.Cache[*product], n)
				for i := range caches {
					caches[i] = newInstance(b, prefix, mode == "cluster")
				}
				var calls atomic.Int64
				load := func(ctx context.Context) (*product, error) {
					calls.Add(1)
					t := time.NewTimer(loadLatency)
					defer t.Stop()
					select {
					case <-t.C:
						return benchProduct, nil
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				ctx := context.Background()
				b.ReportAllocs()
				op := 0
				for b.Loop() {
					key := "cold:" + strconv.Itoa(op)
					op++
					start := make(chan struct{})
					var wg sync.WaitGroup
					for _, c := range caches {
						for range callersPerInstance {
							wg.Go(func() {
								<-start
								if _, err := c.Get(ctx, key, load); err != nil {
									b.Error(err)
								}
							})
						}
					}
					close(start)
					wg.Wait()
				}
				b.ReportMetric(float64(calls.Load())/float64(b.N), "origin-calls/op")
			})
		}
	}
}

// newInstance is one service instance: its own client and shared tier on
// prefix, and in cluster mode its own Coordinator.
func newInstance(b *testing.B, prefix string, cluster bool) *flightcache.Cache[*product] {
	b.Helper()
	client := newRedisClient(b)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		b.Fatal(err)
	}
	opts := flightcache.Options[*product]{Shared: store, TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	var coord *redislease.Coordinator
	if cluster {
		// The start checks (a publish and a subscription among them) on a
		// host that runs make test beside another: 5s was not always enough.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		coord, err = redislease.New(ctx, client, store, redislease.Options{})
		if err != nil {
			b.Fatal(err)
		}
		opts.Coordinator = coord
	}
	c, err := flightcache.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		if coord != nil {
			coord.Close()
		}
	})
	return c
}
