package singleflight_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/singleflight"
	xsync "golang.org/x/sync/singleflight"
	resenje "resenje.org/singleflight"
)

// The scaling curves of make perf-report (bench/perfreport): each point
// is a sub-benchmark named by its x value, so that one run gives every
// implementation's curve side by side. ns/caller and allocs/caller are the
// cost of one call; B/key is the memory a key in flight holds.

// engine is one implementation's Do on string keys.
type engine struct {
	name string
	new  func() func(key string, fn func() int)
}

var engines = []engine{
	{"flightcache", func() func(string, func() int) {
		g := singleflight.New[string, int]()
		return func(key string, fn func() int) {
			g.Do(context.Background(), key, func(context.Context) (int, error) { return fn(), nil })
		}
	}},
	{"resenje", func() func(string, func() int) {
		var g resenje.Group[string, int]
		return func(key string, fn func() int) {
			g.Do(context.Background(), key, func(context.Context) (int, error) { return fn(), nil })
		}
	}},
	{"xsync", func() func(string, func() int) {
		var g xsync.Group
		return func(key string, fn func() int) {
			g.Do(key, func() (any, error) { return fn(), nil })
		}
	}},
}

// herd runs callers goroutines, each calling do on key(i), and returns
// when all have returned. Every execution waits until every caller has
// entered do (parked on a channel, so that a million executions in flight
// cost no CPU while they wait), then yields settle times: with one key,
// that gives the last callers to enter a moment to join the first
// execution (executions/op tells when some did not); with a key each,
// every key is in flight at once.
func herd(callers, settle int, key func(i int) string, do func(key string, fn func() int), execs *atomic.Int64) {
	var entered atomic.Int64
	allIn := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(callers)
	fn := func() int {
		execs.Add(1)
		<-allIn
		for range settle {
			runtime.Gosched()
		}
		return 1
	}
	for i := range callers {
		go func() {
			defer wg.Done()
			if entered.Add(1) == int64(callers) {
				close(allIn)
			}
			do(key(i), fn)
		}()
	}
	wg.Wait()
}

// BenchmarkCurveWaiters: 1 to 100,000 callers on one key; one execution
// serves them all.
func BenchmarkCurveWaiters(b *testing.B) {
	for _, n := range testenv.CurvePoints(1_000, 1, 10, 100, 1_000, 10_000, 100_000) {
		for _, e := range engines {
			b.Run("waiters="+strconv.Itoa(n)+"/impl="+e.name, func(b *testing.B) {
				do := e.new()
				var execs atomic.Int64
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				i := 0
				for b.Loop() {
					key := benchKeys[i&1023]
					herd(n, 100, func(int) string { return key }, do, &execs)
					i++
				}
				runtime.ReadMemStats(&ms1)
				calls := float64(b.N * n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/calls, "ns/caller")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/caller")
				b.ReportMetric(float64(execs.Load())/float64(b.N), "executions/op")
			})
		}
	}
}

// BenchmarkCurveKeysInFlight: 1 to 1,000,000 distinct keys in flight at
// once, a caller each.
func BenchmarkCurveKeysInFlight(b *testing.B) {
	names := make([]string, 1_000_000)
	for i := range names {
		names[i] = "product:" + strconv.Itoa(i)
	}
	for _, n := range testenv.CurvePoints(10_000, 1, 100, 10_000, 1_000_000) {
		for _, e := range engines {
			b.Run("keys="+strconv.Itoa(n)+"/impl="+e.name, func(b *testing.B) {
				do := e.new()
				var execs atomic.Int64
				var ms0, ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				for b.Loop() {
					herd(n, 0, func(i int) string { return names[i] }, do, &execs)
				}
				runtime.ReadMemStats(&ms1)
				calls := float64(b.N * n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/calls, "ns/caller")
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/calls, "B/key")
			})
		}
	}
}
