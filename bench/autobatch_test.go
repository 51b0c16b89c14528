package bench_test

// Automatic batching of independent misses: flightcache's Batcher beside
// graph-gophers/dataloader v7, vikstrous/dataloadgen and sturdyc's
// GetOrFetchBatch, on an origin that costs 1 ms plus 20 µs per key. Every
// caller loads a key nobody loaded before.
//
//	go test -run '^$' -bench 'Autobatch' -benchtime 2s .
//	go test -run '^$' -bench 'AutobatchFloor' .
//	go test -run 'TestAutobatchIsolation' -v .

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
	"github.com/graph-gophers/dataloader/v7"
	"github.com/viccon/sturdyc"
	"github.com/vikstrous/dataloadgen"
)

// slowOrigin answers any keys after 1 ms + 20 µs per key, or fails with
// its context; failKey, when set, fails alone (each implementation's
// per-key error).
type slowOrigin struct {
	calls, keys atomic.Int64
	busy        atomic.Int64 // nanoseconds spent inside calls, all added up
	failKey     string
}

var errBadKey = errors.New("origin: this key fails")

func (o *slowOrigin) fetch(ctx context.Context, keys []string) (map[string]*product, error) {
	o.calls.Add(1)
	o.keys.Add(int64(len(keys)))
	t0 := time.Now()
	defer func() { o.busy.Add(int64(time.Since(t0))) }()
	t := time.NewTimer(time.Millisecond + time.Duration(len(keys))*20*time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m := make(map[string]*product, len(keys))
	for _, k := range keys {
		if k != o.failKey {
			m[k] = benchProduct
		}
	}
	return m, nil
}

// autoLoad loads one key for one caller.
type autoLoad func(ctx context.Context, key string) (*product, error)

type autoImpl struct {
	name string
	new  func(tb testing.TB, o *slowOrigin) autoLoad
}

var autoImpls = []autoImpl{
	{"flightcache-Batcher", func(tb testing.TB, o *slowOrigin) autoLoad {
		return newBatcherLoad(tb, o, flightcache.BatcherOptions{})
	}},
	{"flightcache-Batcher-MaxKeys1024-InFlight1", func(tb testing.TB, o *slowOrigin) autoLoad {
		return newBatcherLoad(tb, o, flightcache.BatcherOptions{MaxKeys: 1024, MaxInFlight: 1})
	}},
	{"dataloader-v7", func(tb testing.TB, o *slowOrigin) autoLoad {
		l := dataloader.NewBatchedLoader(func(ctx context.Context, keys []string) []*dataloader.Result[*product] {
			m, err := o.fetch(ctx, keys)
			rs := make([]*dataloader.Result[*product], len(keys))
			for i, k := range keys {
				switch v, ok := m[k]; {
				case err != nil:
					rs[i] = &dataloader.Result[*product]{Error: err}
				case !ok:
					rs[i] = &dataloader.Result[*product]{Error: errBadKey}
				default:
					rs[i] = &dataloader.Result[*product]{Data: v}
				}
			}
			return rs
		})
		return func(ctx context.Context, key string) (*product, error) { return l.Load(ctx, key)() }
	}},
	{"dataloadgen", func(tb testing.TB, o *slowOrigin) autoLoad {
		l := dataloadgen.NewMappedLoader(func(ctx context.Context, keys []string) (map[string]*product, error) {
			m, err := o.fetch(ctx, keys)
			if err == nil && o.failKey != "" && slices.Contains(keys, o.failKey) {
				return m, dataloadgen.MappedFetchError[string]{o.failKey: errBadKey}
			}
			return m, err
		})
		return l.Load
	}},
	{"sturdyc-GetOrFetchBatch", func(tb testing.TB, o *slowOrigin) autoLoad {
		sc := sturdyc.New[*product](1<<20, 8, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
		return func(ctx context.Context, key string) (*product, error) {
			m, err := sc.GetOrFetchBatch(ctx, []string{key}, identityKey, o.fetch)
			if err != nil {
				return nil, err
			}
			v, ok := m[key]
			if !ok {
				return nil, errBadKey
			}
			return v, nil
		}
	}},
}

// newBatcherLoad is the use a service makes of a Batcher: a Get on a
// Cache with a memory tier, whose loader is the Batcher's.
func newBatcherLoad(tb testing.TB, o *slowOrigin, opts flightcache.BatcherOptions) autoLoad {
	c := newLoneCache(tb)
	bt, err := flightcache.NewBatcher(func(ctx context.Context, keys []string) (map[string]*product, error) {
		m, err := o.fetch(ctx, keys)
		if err == nil && o.failKey != "" && slices.Contains(keys, o.failKey) {
			return m, &flightcache.BatchError{Keys: map[string]error{o.failKey: errBadKey}}
		}
		return m, err
	}, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context, key string) (*product, error) { return c.Get(ctx, key, bt.Load(key)) }
}

// autoKeys makes keys that no earlier run loaded.
var autoKeyRun atomic.Int64

func autoKeys(n int) []string {
	run := strconv.FormatInt(autoKeyRun.Add(1), 10)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "auto:" + run + ":" + strconv.Itoa(i)
	}
	return keys
}

// originFloor is the latency of a lone origin call of one key on this
// machine (the timer's own lateness included): what a caller pays without
// any batching, to subtract from a batched caller's latency.
var originFloor = sync.OnceValue(func() time.Duration {
	var o slowOrigin
	lat := make([]time.Duration, 200)
	for i := range lat {
		t0 := time.Now()
		o.fetch(context.Background(), []string{"k"})
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
})

// BenchmarkAutobatch: b.N loads of fresh keys by callers concurrent
// callers, each loading one key after another. Reports loads/s, origin
// calls/s, keys per call, what a call took, each load's latency (p50, p99) and what it adds
// to a lone origin call (added-p50, added-p99), allocations per load.
func BenchmarkAutobatch(b *testing.B) {
	floor := originFloor()
	for _, callers := range []int{1, 8, 64, 1024} {
		for _, impl := range autoImpls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", callers, impl.name), func(b *testing.B) {
				var o slowOrigin
				load := impl.new(b, &o)
				keys := autoKeys(b.N)
				lat := make([]time.Duration, b.N)
				var next, failed atomic.Int64
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for {
							i := int(next.Add(1) - 1)
							if i >= len(keys) {
								return
							}
							t0 := time.Now()
							if _, err := load(ctx, keys[i]); err != nil {
								failed.Add(1)
							}
							lat[i] = time.Since(t0)
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if failed.Load() > 0 {
					b.Fatalf("%d loads failed", failed.Load())
				}
				slices.Sort(lat)
				p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "loads/s")
				b.ReportMetric(float64(o.calls.Load())/elapsed.Seconds(), "calls/s")
				b.ReportMetric(float64(o.keys.Load())/float64(o.calls.Load()), "keys/call")
				// What a call really took: 1 ms + 20 µs per key, plus the
				// timer's and the scheduler's lateness on this machine.
				b.ReportMetric(float64(o.busy.Load())/float64(o.calls.Load())/1e6, "ms/call")
				b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
				b.ReportMetric(float64((p50 - floor).Microseconds()), "added-p50-µs")
				b.ReportMetric(float64((p99 - floor).Microseconds()), "added-p99-µs")
			})
		}
	}
}

// BenchmarkAutobatchFloor: the bound of any batching of callers closed-loop
// callers that makes one origin call a round, as the dataloaders do at
// 1,024 callers (986 keys a call): the round cannot be shorter than one
// origin call of every caller's key, so loads/s is at most callers over
// that call's duration. Each op is one such call, measured as the
// benchmark's slowOrigin measures it (the timer's lateness included).
func BenchmarkAutobatchFloor(b *testing.B) {
	for _, callers := range []int{1, 8, 64, 1024} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var o slowOrigin
			keys := autoKeys(callers)
			ctx := context.Background()
			for b.Loop() {
				o.fetch(ctx, keys)
			}
			perCall := time.Duration(o.busy.Load() / o.calls.Load())
			b.ReportMetric(float64(perCall)/1e6, "ms/call")
			b.ReportMetric(float64(callers)/perCall.Seconds(), "bound-loads/s")
		})
	}
}

// BenchmarkAutobatchLone: what a lone caller pays, one load at a time,
// beside the floors of the ways to load it through a Cache: the Cache's
// own miss path calling the origin with the key (no batching at all), and
// the same with the origin called on a goroutine of its own that hands the
// value back on a channel, the least any batcher that runs its calls off
// the caller's flight pays. added-p50-µs is over a bare origin call.
//
//	go test -run '^$' -bench 'AutobatchLone' -count 5 .
func BenchmarkAutobatchLone(b *testing.B) {
	floor := originFloor()
	impls := []struct {
		name string
		new  func(tb testing.TB, o *slowOrigin) autoLoad
	}{
		{"cache-direct", func(tb testing.TB, o *slowOrigin) autoLoad {
			c := newLoneCache(tb)
			return func(ctx context.Context, key string) (*product, error) {
				return c.Get(ctx, key, func(ctx context.Context) (*product, error) {
					m, err := o.fetch(ctx, []string{key})
					return m[key], err
				})
			}
		}},
		{"cache-handoff", func(tb testing.TB, o *slowOrigin) autoLoad {
			c := newLoneCache(tb)
			return func(ctx context.Context, key string) (*product, error) {
				return c.Get(ctx, key, func(ctx context.Context) (*product, error) {
					type answer struct {
						v   *product
						err error
					}
					ch := make(chan answer, 1)
					go func() {
						m, err := o.fetch(context.WithoutCancel(ctx), []string{key})
						ch <- answer{m[key], err}
					}()
					select {
					case a := <-ch:
						return a.v, a.err
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				})
			}
		}},
		{"flightcache-Batcher", func(tb testing.TB, o *slowOrigin) autoLoad {
			return newBatcherLoad(tb, o, flightcache.BatcherOptions{})
		}},
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var o slowOrigin
			load := impl.new(b, &o)
			keys := autoKeys(b.N)
			lat := make([]time.Duration, b.N)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := load(ctx, keys[i]); err != nil {
					b.Fatal(err)
				}
				lat[i] = time.Since(t0)
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64((lat[len(lat)/2] - floor).Microseconds()), "added-p50-µs")
		})
	}
}

// newLoneCache is a Cache with a memory tier, as a service has.
func newLoneCache(tb testing.TB) *flightcache.Cache[*product] {
	local, err := memstore.New(memstore.Options[*product]{MaxEntries: 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[*product]{Local: local, TTL: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestAutobatchIsolation measures, for each implementation, what happens
// to 63 callers that load their keys in the same window as a first
// caller: (1) when the first caller's context is cancelled 2 ms in (its
// request ended), (2) when the origin fails one key of the window with that
// key's own error. It counts the failures among the 63 others, and
// requires zero from flightcache's Batcher.
func TestAutobatchIsolation(t *testing.T) {
	const others = 63
	for _, impl := range autoImpls {
		t.Run(impl.name, func(t *testing.T) {
			// (1) The first caller leaves.
			var o slowOrigin
			load := impl.new(t, &o)
			keys := autoKeys(others + 1)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var cancelFailed atomic.Int64
			started := make(chan struct{})
			wg.Go(func() {
				close(started)
				load(ctx, keys[0]) // fails with its own context, as it should
			})
			<-started
			for _, k := range keys[1:] {
				wg.Go(func() {
					if _, err := load(context.Background(), k); err != nil {
						cancelFailed.Add(1)
					}
				})
			}
			time.Sleep(2 * time.Millisecond) // inside the peers' 16 ms window
			cancel()
			wg.Wait()

			// (2) One key of the window fails.
			bad := autoKeys(others + 1)
			o2 := slowOrigin{failKey: bad[0]}
			load = impl.new(t, &o2)
			var keyFailed atomic.Int64
			for _, k := range bad {
				wg.Go(func() {
					_, err := load(context.Background(), k)
					if k != bad[0] && err != nil {
						keyFailed.Add(1)
					}
					if k == bad[0] && err == nil {
						t.Errorf("the failing key succeeded")
					}
				})
			}
			wg.Wait()
			t.Logf("| %s | %d of %d | %d of %d | %d calls |", impl.name, cancelFailed.Load(), others, keyFailed.Load(), others, o.calls.Load())
			if impl.name == "flightcache-Batcher" && (cancelFailed.Load() > 0 || keyFailed.Load() > 0) {
				t.Fatalf("flightcache: %d failures after the first caller left, %d beside a failing key; want 0", cancelFailed.Load(), keyFailed.Load())
			}
		})
	}
}
