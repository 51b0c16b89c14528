package observers_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/flightstats"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/otelflight"
	"github.com/flightcache/flightcache/promflight"
	"github.com/flightcache/flightcache/singleflight"
)

// observer is what both layers accept; nil means none.
type observer interface {
	singleflight.Observer
	driver.Observer
}

// observers returns the adapters compared side by side: none, the
// stdlib-only Recorder, Prometheus, and OpenTelemetry on the real SDK.
func observers(b *testing.B) []struct {
	name string
	obs  func() observer
} {
	return []struct {
		name string
		obs  func() observer
	}{
		{"none", func() observer { return nil }},
		{"flightstats", func() observer { return flightstats.New() }},
		{"prometheus", func() observer {
			m, err := promflight.New(prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
		{"otel", func() observer {
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { provider.Shutdown(context.Background()) })
			m, err := otelflight.NewMetrics(provider.Meter(otelflight.ScopeName))
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
	}
}

// BenchmarkDo is one uncontended engine call: six events (request, in-flight
// up, loader started, loader succeeded, in-flight down, wait done).
func BenchmarkDo(b *testing.B) {
	for _, o := range observers(b) {
		b.Run("observer="+o.name, func(b *testing.B) {
			var opts []singleflight.Option
			if obs := o.obs(); obs != nil {
				opts = append(opts, singleflight.WithObserver(obs))
			}
			g := singleflight.New[string, int](opts...)
			ctx := context.Background()
			fn := func(context.Context) (int, error) { return 1, nil }
			b.ReportAllocs()
			for b.Loop() {
				g.Do(ctx, "k", fn)
			}
		})
	}
}

func hitCache(b *testing.B, obs observer) *flightcache.Cache[*int] {
	local, err := memstore.New(memstore.Options[*int]{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(local.Close)
	opts := flightcache.Options[*int]{Name: "bench", Local: local, TTL: time.Hour}
	if obs != nil {
		opts.Observer = obs
	}
	c, err := flightcache.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	v := 1
	if err := c.Set(context.Background(), "k", &v); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkCacheHit is a fresh local hit, the path the observer must not
// make allocate: two events (hit, get).
func BenchmarkCacheHit(b *testing.B) {
	for _, o := range observers(b) {
		b.Run("observer="+o.name, func(b *testing.B) {
			c := hitCache(b, o.obs())
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Get(ctx, "k", nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCacheHitParallel is BenchmarkCacheHit from every P at once: the
// adapters' shared counters are contended here.
func BenchmarkCacheHitParallel(b *testing.B) {
	for _, o := range observers(b) {
		b.Run("observer="+o.name, func(b *testing.B) {
			c := hitCache(b, o.obs())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := c.Get(ctx, "k", nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestHitPathDoesNotAllocate pins the adapter's cost rule: observing a cache
// hit (and an engine call) allocates nothing.
func TestHitPathDoesNotAllocate(t *testing.T) {
	m, err := promflight.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hit := driver.Event{Kind: driver.EventHit, Ctx: ctx, Tier: driver.TierLocal}
	get := driver.Event{Kind: driver.EventGet, Ctx: ctx, Outcome: flightcache.OutcomeHitLocal, Duration: time.Microsecond}
	wait := singleflight.Event{Kind: singleflight.EventWaitDone, Ctx: ctx, Duration: time.Microsecond}
	if n := testing.AllocsPerRun(1000, func() {
		m.ObserveCache(hit)
		m.ObserveCache(get)
		m.ObserveFlight(wait)
	}); n != 0 {
		t.Errorf("promflight: %v allocations per hit, want 0", n)
	}

	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer provider.Shutdown(ctx)
	om, err := otelflight.NewMetrics(provider.Meter(otelflight.ScopeName))
	if err != nil {
		t.Fatal(err)
	}
	om.ObserveCache(hit) // the SDK allocates a series on its first measurement
	om.ObserveCache(get)
	if n := testing.AllocsPerRun(1000, func() {
		om.ObserveCache(hit)
		om.ObserveCache(get)
	}); n != 0 {
		t.Errorf("otelflight: %v allocations per hit, want 0", n)
	}
}

// noop is an observer that does nothing: the baseline of the Observe
// benchmarks.
type noop struct{}

func (noop) ObserveFlight(singleflight.Event) {}
func (noop) ObserveCache(driver.Event)        {}

// doEvents are the six events one uncontended Do reports, in order.
func doEvents() []singleflight.Event {
	ctx := context.Background()
	return []singleflight.Event{
		{Kind: singleflight.EventRequest, Ctx: ctx},
		{Kind: singleflight.EventInFlight, InFlight: 1, InFlightDelta: 1},
		{Kind: singleflight.EventLoaderStarted, Ctx: ctx, Flight: 1},
		{Kind: singleflight.EventLoaderSucceeded, Ctx: ctx, Flight: 1, Duration: 80 * time.Microsecond},
		{Kind: singleflight.EventInFlight, InFlight: 0, InFlightDelta: -1},
		{Kind: singleflight.EventWaitDone, Ctx: ctx, Flight: 1, Leader: true, Duration: 90 * time.Microsecond},
	}
}

// BenchmarkObservePerDo isolates what an adapter adds to one Do: the six
// events replayed straight into it, without the engine's own cost (clock
// reads, flight IDs) that any observer pays.
func BenchmarkObservePerDo(b *testing.B) {
	events := doEvents()
	for _, o := range observers(b) {
		obs := o.obs()
		if obs == nil {
			obs = noop{} // the cost of the replay loop and the interface call
		}
		b.Run("observer="+o.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range events {
					obs.ObserveFlight(events[i])
				}
			}
		})
	}
}

// BenchmarkObservePerHit is what an adapter adds to one cache hit: the hit
// and get events.
func BenchmarkObservePerHit(b *testing.B) {
	ctx := context.Background()
	hit := driver.Event{Kind: driver.EventHit, Ctx: ctx, Cache: "bench", Tier: driver.TierLocal}
	get := driver.Event{Kind: driver.EventGet, Ctx: ctx, Cache: "bench", Outcome: flightcache.OutcomeHitLocal, Duration: 300 * time.Nanosecond}
	for _, o := range observers(b) {
		obs := o.obs()
		if obs == nil {
			obs = noop{} // the cost of the replay loop and the interface call
		}
		b.Run("observer="+o.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obs.ObserveCache(hit)
				obs.ObserveCache(get)
			}
		})
	}
}
