package singleflight_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flightcache/flightcache/singleflight"
	xsync "golang.org/x/sync/singleflight"
	resenje "resenje.org/singleflight"
)

// The benchmarks compare this engine with golang.org/x/sync/singleflight and
// resenje.org/singleflight on the same scenarios, in one run, so benchstat can
// put them side by side. See docs/PERFORMANCE.md for the numbers.

var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "product:" + strconv.Itoa(i)
	}
	return k
}()

var sinkInt int

// BenchmarkLeader: one caller per key, so every call starts (and finishes) an
// execution: the cost of coalescing when there is nothing to coalesce.
func BenchmarkLeader(b *testing.B) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"ctx=background", context.Background()}, {"ctx=cancellable", cancellable}} {
		ctx := bc.ctx
		b.Run(bc.name+"/impl=flightcache", func(b *testing.B) {
			g := singleflight.New[string, int]()
			b.ReportAllocs()
			defer reportCPU(b, 1)()
			for i := 0; b.Loop(); i++ {
				v, _, _ := g.Do(ctx, benchKeys[i&1023], func(context.Context) (int, error) { return 1, nil })
				sinkInt += v
			}
		})
		b.Run(bc.name+"/impl=resenje", func(b *testing.B) {
			var g resenje.Group[string, int]
			b.ReportAllocs()
			defer reportCPU(b, 1)()
			for i := 0; b.Loop(); i++ {
				v, _, _ := g.Do(ctx, benchKeys[i&1023], func(context.Context) (int, error) { return 1, nil })
				sinkInt += v
			}
		})
		if ctx == context.Background() {
			b.Run(bc.name+"/impl=xsync", func(b *testing.B) {
				var g xsync.Group
				b.ReportAllocs()
				defer reportCPU(b, 1)()
				for i := 0; b.Loop(); i++ {
					v, _, _ := g.Do(benchKeys[i&1023], func() (any, error) { return 1, nil })
					sinkInt += v.(int)
				}
			})
		}
	}
}

// BenchmarkDistinctKeysParallel: every goroutine works on its own keys, so the
// only contention is the engine's own locking.
func BenchmarkDistinctKeysParallel(b *testing.B) {
	b.Run("impl=flightcache", func(b *testing.B) {
		g := singleflight.New[string, int]()
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			base := int(next.Add(1)) * 64
			for i := 0; pb.Next(); i++ {
				g.Do(context.Background(), benchKeys[(base+i&63)&1023], func(context.Context) (int, error) { return 1, nil })
			}
		})
	})
	b.Run("impl=resenje", func(b *testing.B) {
		var g resenje.Group[string, int]
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			base := int(next.Add(1)) * 64
			for i := 0; pb.Next(); i++ {
				g.Do(context.Background(), benchKeys[(base+i&63)&1023], func(context.Context) (int, error) { return 1, nil })
			}
		})
	})
	b.Run("impl=xsync", func(b *testing.B) {
		var g xsync.Group
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			base := int(next.Add(1)) * 64
			for i := 0; pb.Next(); i++ {
				g.Do(benchKeys[(base+i&63)&1023], func() (any, error) { return 1, nil })
			}
		})
	})
}

// BenchmarkHotKey: 1,000 callers join one in-flight execution and are woken
// by its completion. ns/op is per 1,000 callers, sec/caller per caller;
// executions/op shows how many loads the 1,000 callers caused (1 is
// perfect coalescing). BenchmarkFloorHotKey (floors_test.go) runs the same
// herd on the least a coalescer can do.
func BenchmarkHotKey(b *testing.B) {
	b.Run("impl=flightcache", func(b *testing.B) {
		g := singleflight.New[string, int]()
		hotKey(b, func(key string, fn func() int) {
			g.Do(context.Background(), key, func(context.Context) (int, error) { return fn(), nil })
		})
	})
	b.Run("impl=resenje", func(b *testing.B) {
		var g resenje.Group[string, int]
		hotKey(b, func(key string, fn func() int) {
			g.Do(context.Background(), key, func(context.Context) (int, error) { return fn(), nil })
		})
	})
	b.Run("impl=xsync", func(b *testing.B) {
		var g xsync.Group
		hotKey(b, func(key string, fn func() int) {
			g.Do(key, func() (any, error) { return fn(), nil })
		})
	})
}

// hotKeyCallers is how many callers BenchmarkHotKey puts on one key.
const hotKeyCallers = 1000

// hotKey is BenchmarkHotKey's herd for one implementation's do: per
// iteration, hotKeyCallers fresh goroutines call do on one key, whose
// function holds the execution open until all of them have entered do.
func hotKey(b *testing.B, do func(key string, fn func() int)) {
	const callers = hotKeyCallers
	b.ReportAllocs()
	defer reportCPU(b, callers)()
	var execs int64
	for i := 0; b.Loop(); i++ {
		key := benchKeys[i&1023]
		var entered atomic.Int64
		var wg sync.WaitGroup
		wg.Add(callers)
		fn := func() int {
			atomic.AddInt64(&execs, 1)
			// Hold the execution open until every caller has entered Do,
			// then give the stragglers a moment to attach.
			for entered.Load() < callers {
				runtime.Gosched()
			}
			for range 100 {
				runtime.Gosched()
			}
			return 1
		}
		for range callers {
			go func() {
				defer wg.Done()
				entered.Add(1)
				do(key, fn)
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*callers), "ns/caller")
	b.ReportMetric(float64(execs)/float64(b.N), "executions/op")
}
