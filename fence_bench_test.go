package flightcache_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// BenchmarkSharedReadWithFences measures shared-tier reads through a Cache
// while the instance keeps fences (the invalidations it applied recently),
// against the same reads with no fence: every shared read asks the fence
// table whether a fence covers the entry it read. Eight goroutines read at
// every -cpu setting (SetParallelism is scaled down by GOMAXPROCS). The
// local tier never holds anything, so every Get is a shared read; the
// shared tier is a read-only map and the codec a fixed 8 bytes, so that
// the Cache's own work, fence lookups included, is what is measured.
//
// mutex-wait-ns/op is the time goroutines spent blocked on a sync.Mutex,
// sync.RWMutex or runtime lock per read (runtime/metrics
// /sync/mutex/wait/total:seconds): the contention.
//
//	go test -run '^$' -bench SharedReadWithFences -cpu 1,2,8 -count 5 .
func BenchmarkSharedReadWithFences(b *testing.B) {
	for _, bc := range []struct {
		name              string
		keyFences, prefix int
	}{
		{"fences=0", 0, 0},
		{"fences=10000+3bulk", 10_000, 3},
	} {
		b.Run(bc.name, func(b *testing.B) { benchSharedReads(b, bc.keyFences, bc.prefix) })
	}
}

const benchReadKeys = 1024

func benchSharedReads(b *testing.B, keyFences, bulkFences int) {
	now := time.Now()
	shared := roShared{}
	keys := make([]string, benchReadKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:%d", i)
		v, _ := int64Codec{}.Marshal(int64(i))
		shared[keys[i]] = driver.Entry{Value: v, Meta: driver.Meta{
			LoadedAt: now, FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour),
		}}
	}
	// An entry read before its key's fence: treated as absent while the
	// fence lives (checked below, so the fences are known to be there).
	shared["probe"] = driver.Entry{Value: make([]byte, 8), Meta: driver.Meta{
		LoadedAt: now.Add(-2 * time.Minute), FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour),
	}}
	bus := &capturingBus{}
	c, err := flightcache.New(flightcache.Options[int64]{
		Name: "bench", Local: nullLocal[int64]{}, Shared: shared, Codec: int64Codec{}, Bus: bus,
		TTL: time.Hour, Logger: quietLogger,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// Fences older than the entries, as after a burst of writes a minute
	// ago: the read keys have one each, the rest are other keys.
	old := now.Add(-time.Minute)
	for i := range keyFences {
		target := fmt.Sprintf("other:%d", i)
		if i < benchReadKeys {
			target = keys[i]
		}
		bus.h.Invalidated(driver.Invalidation{Kind: driver.InvalidationKey, Target: target, Version: old})
	}
	for _, p := range []string{"k:", "other:", "tenant:9:"}[:bulkFences] {
		bus.h.Invalidated(driver.Invalidation{Kind: driver.InvalidationPrefix, Target: p, Version: old})
	}
	if keyFences > 0 {
		bus.h.Invalidated(driver.Invalidation{Kind: driver.InvalidationKey, Target: "probe", Version: old})
		if _, err := c.Get(context.Background(), "probe", nil); err == nil {
			b.Fatal("an entry read before its key's fence was served: the fences are not there")
		}
	}
	for _, k := range keys {
		if _, err := c.Get(context.Background(), k, nil); err != nil {
			b.Fatalf("shared read: %v", err)
		}
	}

	const goroutines = 8
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	var failed atomic.Pointer[error]
	waitBefore := mutexWait()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(benchReadKeys / goroutines))
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.Get(ctx, keys[i%benchReadKeys], nil); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(mutexWait()-waitBefore)/float64(b.N), "mutex-wait-ns/op")
	if err := failed.Load(); err != nil {
		b.Fatalf("shared read: %v", *err)
	}
}

// BenchmarkSharedReadUnderSteadyPUTs measures shared-tier reads while
// bulk invalidations of other products arrive at a steady rate, as on a
// productd instance whose peers answer PUTs (each one an InvalidatePrefix
// of its product): one every 200µs from a background goroutine, each of a
// new prefix, so that the table fills up to its bound. Every shared read
// asks the bulk fences whether one covers its key. Reported: ns per read,
// mutex-wait-ns/op, and invalidations/op (how many arrived per read).
//
//	go test -run '^$' -bench SharedReadUnderSteadyPUTs -cpu 1,2 -count 5 .
func BenchmarkSharedReadUnderSteadyPUTs(b *testing.B) {
	now := time.Now()
	shared := roShared{}
	keys := make([]string, benchReadKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("t:acme:id:%d:loc:en:rev:0", i)
		v, _ := int64Codec{}.Marshal(int64(i))
		shared[keys[i]] = driver.Entry{Value: v, Meta: driver.Meta{
			LoadedAt: now, FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour),
		}}
	}
	bus := &capturingBus{}
	c, err := flightcache.New(flightcache.Options[int64]{
		Name: "bench", Local: nullLocal[int64]{}, Shared: shared, Codec: int64Codec{}, Bus: bus,
		TTL: time.Hour, Logger: quietLogger,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var puts atomic.Int64
	put := func() {
		n := puts.Add(1)
		// Other products than the ones read (ids past benchReadKeys),
		// older than the entries: no read is covered.
		bus.h.Invalidated(driver.Invalidation{Kind: driver.InvalidationPrefix,
			Target: fmt.Sprintf("t:acme:id:%d:", benchReadKeys+n), Version: now.Add(-time.Minute)})
	}
	for range 2000 { // a table already full of recent PUTs
		put()
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				put()
			}
		}
	}()
	defer func() { close(stop); <-stopped }()

	const goroutines = 8
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	var failed atomic.Pointer[error]
	putsBefore, waitBefore := puts.Load(), mutexWait()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(benchReadKeys / goroutines))
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.Get(ctx, keys[i%benchReadKeys], nil); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(mutexWait()-waitBefore)/float64(b.N), "mutex-wait-ns/op")
	b.ReportMetric(float64(puts.Load()-putsBefore)/float64(b.N), "invalidations/op")
	if err := failed.Load(); err != nil {
		b.Fatalf("shared read: %v", *err)
	}
}

// mutexWait is the total time goroutines have spent blocked on locks, in
// nanoseconds.
func mutexWait() float64 {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64() * 1e9
}

// nullLocal is a local tier that never holds anything (every Get of a
// Cache with it reads the shared tier); it ranges, so a Bus is allowed.
type nullLocal[V any] struct{}

func (nullLocal[V]) Get(string) (*driver.Item[V], bool) { return nil, false }
func (nullLocal[V]) Set(string, driver.Item[V])         {}
func (nullLocal[V]) Delete(string)                      {}
func (nullLocal[V]) All() iter.Seq2[string, *driver.Item[V]] {
	return func(func(string, *driver.Item[V]) bool) {}
}

// roShared is a shared tier filled before the Cache is built and only read
// after: no lock, so the benchmark measures the Cache's locks alone.
type roShared map[string]driver.Entry

func (s roShared) Get(_ context.Context, key string) (driver.Entry, bool, error) {
	e, ok := s[key]
	return e, ok, nil
}
func (roShared) Set(context.Context, string, driver.Entry) error { return nil }
func (roShared) Delete(context.Context, string) error            { return nil }

// int64Codec encodes an int64 in 8 bytes.
type int64Codec struct{}

func (int64Codec) Marshal(v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(v)), nil
}

func (int64Codec) Unmarshal(data []byte) (int64, error) {
	if len(data) != 8 {
		return 0, errors.New("int64Codec: want 8 bytes")
	}
	return int64(binary.BigEndian.Uint64(data)), nil
}

// capturingBus is a Bus whose subscription is up at once and whose
// deliveries the test makes by hand, through h.
type capturingBus struct{ h driver.BusHandler }

func (*capturingBus) Publish(context.Context, string, driver.Invalidation) error { return nil }

func (b *capturingBus) Subscribe(_ string, h driver.BusHandler) (func(), error) {
	b.h = h
	h.BusChanged(driver.BusUp)
	return func() {}, nil
}
