package otelflight_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/otelflight"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// hooked forwards every event to the adapter under test and then to hook, so
// a test can synchronise on the event stream instead of sleeping.
type hooked struct {
	*otelflight.Metrics
	hook func(singleflight.Event)
}

func (h hooked) ObserveFlight(e singleflight.Event) {
	h.Metrics.ObserveFlight(e)
	if h.hook != nil {
		h.hook(e)
	}
}

// sharedBarrier returns a hook that closes the channel once n callers have
// joined an execution in flight.
func sharedBarrier(n int) (func(singleflight.Event), <-chan struct{}) {
	ch := make(chan struct{})
	var seen atomic.Int64
	return func(e singleflight.Event) {
		if e.Kind == singleflight.EventShared && seen.Add(1) == int64(n) {
			close(ch)
		}
	}, ch
}

func newMetrics(t *testing.T, opts ...otelflight.MetricsOption) (*otelflight.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	m, err := otelflight.NewMetrics(provider.Meter(otelflight.ScopeName), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// collected indexes one collection by instrument name.
type collected map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	c := collected{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			c[m.Name] = m.Data
		}
	}
	return c
}

// value returns the sum (counter), last value (gauge) or count (histogram)
// of the data point of name whose attributes include want. The SDK exports
// only data points that were recorded, so an absent one is 0.
func (c collected) value(t *testing.T, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	matches := func(s attribute.Set) bool {
		for _, kv := range want {
			if v, ok := s.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	var total float64
	switch d := c[name].(type) {
	case nil:
		return 0
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes) {
				total += float64(dp.Value)
			}
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes) {
				total += float64(dp.Value)
			}
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes) {
				total += dp.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes) {
				total += float64(dp.Count)
			}
		}
	default:
		t.Fatalf("%s: unexpected aggregation %T", name, d)
	}
	return total
}

func stampede(t *testing.T, g *singleflight.Group[string, int], attached <-chan struct{}, hot, distinct int, marker string) {
	t.Helper()
	release := make(chan struct{})
	var loads atomic.Int32
	var wg sync.WaitGroup
	for range hot {
		wg.Go(func() {
			v, _, err := g.Do(context.Background(), marker+"hot", func(context.Context) (int, error) {
				loads.Add(1)
				<-release
				return 42, nil
			})
			if err != nil || v != 42 {
				t.Errorf("hot Do = %d, %v", v, err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("hot key loaded %d times, want 1", n)
	}
	for i := range distinct {
		if _, _, err := g.Do(context.Background(), fmt.Sprintf("%sdistinct-%d", marker, i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatalf("distinct Do: %v", err)
		}
	}
}

var op = otelflight.AttrCache.String("product")

func TestStampedeCountsExactly(t *testing.T) {
	const hot, distinct = 1000, 10
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	hook, attached := sharedBarrier(hot - 1)
	g := singleflight.New[string, int](singleflight.WithObserver(hooked{m, hook}))
	stampede(t, g, attached, hot, distinct, "k")

	got := collect(t, reader)
	success := otelflight.AttrResult.String("success")
	for _, w := range []struct {
		name string
		kv   []attribute.KeyValue
		v    float64
	}{
		{"single_flight.requests", nil, hot + distinct},
		{"single_flight.flights.started", nil, 1 + distinct},
		{"single_flight.waiters.shared", nil, hot - 1},
		{"single_flight.flights.succeeded", nil, 1 + distinct},
		{"single_flight.flights.failed", nil, 0},
		{"single_flight.in_flight", nil, 0},
		{"single_flight.waiter.duration", []attribute.KeyValue{success}, hot + distinct},
		{"single_flight.flight.duration", []attribute.KeyValue{success}, 1 + distinct},
	} {
		if v := got.value(t, w.name, append(w.kv, op)...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.kv, v, w.v)
		}
	}
	requests := got.value(t, "single_flight.requests", op)
	loaders := got.value(t, "single_flight.flights.started", op)
	if ratio, want := 1-loaders/requests, 1-11.0/1010; math.Abs(ratio-want) > 1e-12 {
		t.Errorf("suppression ratio = %v, want 1 - 11/1010 = %v", ratio, want)
	}
	if d, ok := got["single_flight.waiter.duration"].(metricdata.Histogram[float64]); !ok || len(d.DataPoints) == 0 {
		t.Errorf("waiter duration is %T, want a float64 histogram", got["single_flight.waiter.duration"])
	}
}

func TestRejectionsCarryTheirReason(t *testing.T) {
	m, reader := newMetrics(t)
	g := singleflight.New[string, int](singleflight.WithObserver(m), singleflight.WithMaxInFlight(1), singleflight.WithMaxWaiters(1))
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		g.Do(context.Background(), "a", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	noop := func(context.Context) (int, error) { return 0, nil }
	if _, _, err := g.Do(context.Background(), "b", noop); !errors.Is(err, singleflight.ErrTooManyInFlight) {
		t.Fatalf("second key: %v", err)
	}
	if _, _, err := g.Do(context.Background(), "a", noop); !errors.Is(err, singleflight.ErrTooManyWaiters) {
		t.Fatalf("second waiter: %v", err)
	}
	close(release)
	<-done
	g.Close()
	if _, _, err := g.Do(context.Background(), "a", noop); !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	got := collect(t, reader)
	for _, reason := range []string{"too_many_in_flight", "too_many_waiters", "closed"} {
		if v := got.value(t, "single_flight.rejections", otelflight.AttrReason.String(reason)); v != 1 {
			t.Errorf("rejected{reason=%s} = %v, want 1", reason, v)
		}
	}
	if v := got.value(t, "single_flight.rejections"); v != 3 {
		t.Errorf("rejected total = %v, want 3", v)
	}
}

func TestPanicIsCountedAsPanic(t *testing.T) {
	m, reader := newMetrics(t)
	g := singleflight.New[string, int](singleflight.WithObserver(m))
	if _, _, err := g.Do(context.Background(), "p", func(context.Context) (int, error) { panic("boom") }); err == nil {
		t.Fatal("panic returned no error")
	}
	got := collect(t, reader)
	panicResult := otelflight.AttrResult.String("panic")
	for _, w := range []struct {
		name string
		kv   []attribute.KeyValue
		v    float64
	}{
		{"single_flight.flights.panicked", nil, 1},
		{"single_flight.flights.failed", nil, 0},
		{"single_flight.flight.duration", []attribute.KeyValue{panicResult}, 1},
		{"single_flight.waiter.duration", []attribute.KeyValue{panicResult}, 1},
	} {
		if v := got.value(t, w.name, w.kv...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.kv, v, w.v)
		}
	}
}

// TestNoAttributeDerivesFromAKey pins the cardinality rule for OTel: no
// attribute of any data point contains a key's text.
func TestNoAttributeDerivesFromAKey(t *testing.T) {
	const marker = "KEYMARKER-51c0de-"
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	hook, attached := sharedBarrier(9)
	g := singleflight.New[string, int](singleflight.WithObserver(hooked{m, hook}))
	stampede(t, g, attached, 10, 50, marker)
	c := newCache(t, m, nil)
	for i := range 20 {
		key := fmt.Sprintf("%suser-%d", marker, i)
		if _, err := c.Get(context.Background(), key, func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(context.Background(), key, nil); err != nil {
			t.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	pairs := map[string]bool{}
	check := func(name string, s attribute.Set) {
		for _, kv := range s.ToSlice() {
			pair := string(kv.Key) + "=" + kv.Value.String()
			if strings.Contains(pair, "KEYMARKER") {
				t.Errorf("%s has key-derived attribute %s", name, pair)
			}
			pairs[pair] = true
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					check(mt.Name, dp.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					check(mt.Name, dp.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					check(mt.Name, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					check(mt.Name, dp.Attributes)
				}
			}
		}
	}
	if len(pairs) == 0 || len(pairs) > 25 {
		t.Errorf("%d distinct attribute pairs, want a small bounded, non-empty set: %v", len(pairs), pairs)
	}
}

func newCache(t *testing.T, obs driver.Observer, tracer driver.Tracer) *flightcache.Cache[int] {
	t.Helper()
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Local: local, TTL: time.Minute, Observer: obs, Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCacheEventsThroughRealCache(t *testing.T) {
	const hot = 100
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	hook, attached := sharedBarrier(hot - 1)
	c := newCache(t, hooked{m, hook}, nil)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range hot {
		wg.Go(func() {
			if _, err := c.Get(context.Background(), "hot", func(context.Context) (int, error) { <-release; return 1, nil }); err != nil {
				t.Error(err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	if _, err := c.Get(context.Background(), "hot", nil); err != nil {
		t.Fatal(err)
	}
	got := collect(t, reader)
	local := otelflight.AttrTier.String("local")
	for _, w := range []struct {
		name string
		kv   []attribute.KeyValue
		v    float64
	}{
		{"single_flight.requests", nil, hot},
		{"single_flight.flights.started", nil, 1},
		{"single_flight.waiters.shared", nil, hot - 1},
		{"flightcache.lookups", []attribute.KeyValue{local, otelflight.AttrOutcome.String("miss")}, hot},
		{"flightcache.origin.calls", []attribute.KeyValue{otelflight.AttrResult.String("success")}, 1},
		{"flightcache.origin.duration", []attribute.KeyValue{otelflight.AttrResult.String("success")}, 1},
		{"flightcache.lookups", []attribute.KeyValue{local, otelflight.AttrOutcome.String("hit")}, 1},
		{"flightcache.gets", []attribute.KeyValue{otelflight.AttrOutcome.String("coalesced")}, hot - 1},
		{"flightcache.gets", []attribute.KeyValue{otelflight.AttrOutcome.String("loaded")}, 1},
		{"flightcache.get.duration", nil, hot + 1},
	} {
		if v := got.value(t, w.name, append(w.kv, op)...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.kv, v, w.v)
		}
	}
}

func TestCacheEventsMapToTheirInstruments(t *testing.T) {
	m, reader := newMetrics(t)
	errStore := errors.New("store down")
	for _, e := range []driver.Event{
		{Kind: driver.EventNegativeHit, Tier: driver.TierShared},
		{Kind: driver.EventStaleServed, Err: errStore},
		{Kind: driver.EventEarlyRefresh},
		{Kind: driver.EventWriteFailed, Tier: driver.TierShared, Err: errStore},
		{Kind: driver.EventReadFailed, Tier: driver.TierShared, Err: errStore},
		{Kind: driver.EventThrottled, Err: errStore},
		{Kind: driver.EventOriginCall, Err: fmt.Errorf("query: %w", context.DeadlineExceeded)},
	} {
		m.ObserveCache(e)
	}
	got := collect(t, reader)
	shared := otelflight.AttrTier.String("shared")
	for _, w := range []struct {
		name string
		kv   []attribute.KeyValue
	}{
		{"flightcache.lookups", []attribute.KeyValue{shared, otelflight.AttrOutcome.String("negative_hit")}},
		{"flightcache.origin.calls", []attribute.KeyValue{otelflight.AttrResult.String("timeout")}},
		{"flightcache.stale_served", nil},
		{"flightcache.early_refreshes", nil},
		{"flightcache.write_failures", []attribute.KeyValue{shared}},
		{"flightcache.read_failures", []attribute.KeyValue{shared}},
		{"flightcache.throttled", nil},
	} {
		if v := got.value(t, w.name, w.kv...); v != 1 {
			t.Errorf("%s%v = %v, want 1", w.name, w.kv, v)
		}
	}
}

// The breaker gauge reads closed before the first change and then follows
// each change; the transitions count every change by new state.
func TestBreakerChangesSetTheGaugeAndCountTransitions(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	const state, changes = "flightcache.shared_breaker.state", "flightcache.shared_breaker.transitions"
	got := collect(t, reader)
	if got[state] == nil {
		t.Fatalf("%s has no data point before the first change", state)
	}
	if v := got.value(t, state, op); v != 0 {
		t.Fatalf("breaker state before any change = %v, want 0 (closed)", v)
	}
	for _, step := range []struct {
		to    driver.BreakerState
		gauge float64
	}{
		{driver.BreakerOpen, 2},
		{driver.BreakerHalfOpen, 1},
		{driver.BreakerOpen, 2},
		{driver.BreakerHalfOpen, 1},
		{driver.BreakerClosed, 0},
	} {
		m.ObserveCache(driver.Event{Kind: driver.EventBreakerChanged, Cache: "product", Tier: driver.TierShared, Breaker: step.to})
		if v := collect(t, reader).value(t, state, op); v != step.gauge {
			t.Fatalf("breaker state after a change to %v = %v, want %v", step.to, v, step.gauge)
		}
	}
	got = collect(t, reader)
	for to, want := range map[string]float64{"open": 2, "half_open": 2, "closed": 1} {
		if v := got.value(t, changes, op, otelflight.AttrBreakerState.String(to)); v != want {
			t.Errorf("%s{flightcache.breaker.state=%s} = %v, want %v", changes, to, v, want)
		}
	}
}

func TestFilteredEventsAndOutcomeAreCounted(t *testing.T) {
	m, reader := newMetrics(t)
	for range 3 {
		m.ObserveCache(driver.Event{Kind: driver.EventFiltered})
		m.ObserveCache(driver.Event{Kind: driver.EventGet, Outcome: flightcache.OutcomeFiltered, Duration: time.Microsecond})
	}
	got := collect(t, reader)
	if v := got.value(t, "flightcache.filtered"); v != 3 {
		t.Errorf("flightcache.filtered = %v, want 3", v)
	}
	if v := got.value(t, "flightcache.gets", otelflight.AttrOutcome.String("filtered")); v != 3 {
		t.Errorf("flightcache.gets{outcome=filtered} = %v, want 3", v)
	}
}

func TestNewMetricsRejectsBadConfiguration(t *testing.T) {
	if _, err := otelflight.NewMetrics(nil); !errors.Is(err, otelflight.ErrNilMeter) {
		t.Errorf("NewMetrics(nil) = %v, want ErrNilMeter", err)
	}
	provider := sdkmetric.NewMeterProvider()
	defer provider.Shutdown(context.Background())
	if _, err := otelflight.NewMetrics(provider.Meter("x"), otelflight.WithOperation("")); err == nil {
		t.Error("empty operation accepted")
	}
}

func TestClusterEventsMapToTheirInstruments(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	obs := func(e driver.Event) { e.Cache = "product"; m.ObserveCache(e) }
	obs(driver.Event{Kind: driver.EventLeaseAcquired})
	obs(driver.Event{Kind: driver.EventLeaseTakenOver})
	obs(driver.Event{Kind: driver.EventLeaseLost})
	obs(driver.Event{Kind: driver.EventFencedWriteRejected})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Millisecond})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Millisecond, Err: flightcache.ErrLeaderFailed})
	if v := collect(t, reader).value(t, "flightcache.cluster.degraded", op); v != 0 {
		t.Fatalf("degraded before any scope change = %v, want 0", v)
	}
	obs(driver.Event{Kind: driver.EventScopeChanged, Scope: flightcache.ScopeLocal})
	got := collect(t, reader)
	for _, c := range []struct {
		name string
		attr []attribute.KeyValue
		want float64
	}{
		{"flightcache.cluster.leases", []attribute.KeyValue{otelflight.AttrLeaseEvent.String("acquired")}, 1},
		{"flightcache.cluster.leases", []attribute.KeyValue{otelflight.AttrLeaseEvent.String("taken_over")}, 1},
		{"flightcache.cluster.leases", []attribute.KeyValue{otelflight.AttrLeaseEvent.String("lost")}, 1},
		{"flightcache.cluster.fenced_writes_rejected", nil, 1},
		{"flightcache.cluster.follower.wait.duration", []attribute.KeyValue{otelflight.AttrResult.String("woken")}, 1},
		{"flightcache.cluster.follower.wait.duration", []attribute.KeyValue{otelflight.AttrResult.String("leader_failed")}, 1},
		{"flightcache.cluster.scope_changes", []attribute.KeyValue{otelflight.AttrScope.String("local")}, 1},
		{"flightcache.cluster.degraded", nil, 1},
	} {
		if v := got.value(t, c.name, append([]attribute.KeyValue{op}, c.attr...)...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.attr, v, c.want)
		}
	}
}

func TestInvalidationEventsMapToTheirInstruments(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	obs := func(k driver.EventKind, kind driver.InvalidationKind, err error) {
		m.ObserveCache(driver.Event{Kind: k, Cache: "product", Invalidation: kind, Err: err})
	}
	const last = "flightcache.invalidation.last_received.timestamp"
	got := collect(t, reader)
	if got[last] == nil {
		t.Fatalf("%s has no data point before the first message", last)
	}
	if v := got.value(t, last, op); v != 0 {
		t.Fatalf("%s before any message = %v, want 0", last, v)
	}
	publishErr := fmt.Errorf("publish: %w", context.DeadlineExceeded)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, publishErr)
	obs(driver.EventInvalidationSent, driver.InvalidationPrefix, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationAll, publishErr)
	before := time.Now()
	for _, k := range []driver.InvalidationKind{driver.InvalidationKey, driver.InvalidationKey, driver.InvalidationKey, driver.InvalidationPrefix, driver.InvalidationAll} {
		obs(driver.EventInvalidationReceived, k, nil)
	}
	after := time.Now()
	obs(driver.EventInvalidationApplied, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationPrefix, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationAll, nil)
	obs(driver.EventInvalidationIgnored, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationIgnored, driver.InvalidationKind(99), nil) // counted, not dropped

	got = collect(t, reader)
	kind := func(k string) attribute.KeyValue { return otelflight.AttrInvalidationKind.String(k) }
	result := func(r string) attribute.KeyValue { return otelflight.AttrResult.String(r) }
	for _, c := range []struct {
		name string
		attr []attribute.KeyValue
		want float64
	}{
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("key"), result("success")}, 2},
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("key"), result("error")}, 1},
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("prefix"), result("success")}, 1},
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("prefix"), result("error")}, 0},
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("all"), result("success")}, 0},
		{"flightcache.invalidations.sent", []attribute.KeyValue{kind("all"), result("error")}, 1},
		{"flightcache.invalidations.received", []attribute.KeyValue{kind("key")}, 3},
		{"flightcache.invalidations.received", []attribute.KeyValue{kind("prefix")}, 1},
		{"flightcache.invalidations.received", []attribute.KeyValue{kind("all")}, 1},
		{"flightcache.invalidations.applied", []attribute.KeyValue{kind("key")}, 2},
		{"flightcache.invalidations.applied", []attribute.KeyValue{kind("prefix")}, 1},
		{"flightcache.invalidations.applied", []attribute.KeyValue{kind("all")}, 1},
		{"flightcache.invalidations.ignored", []attribute.KeyValue{kind("key")}, 1},
		{"flightcache.invalidations.ignored", []attribute.KeyValue{kind("prefix")}, 0},
		{"flightcache.invalidations.ignored", []attribute.KeyValue{kind("unknown")}, 1},
	} {
		if v := got.value(t, c.name, append([]attribute.KeyValue{op}, c.attr...)...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.attr, v, c.want)
		}
	}
	ts := got.value(t, last, op)
	if lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9; ts < lo || ts > hi {
		t.Errorf("%s = %.6f, want the time of the last message, within [%.6f, %.6f]", last, ts, lo, hi)
	}
}

func TestBusChangesSetTheGaugeAndCountDisconnects(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	const state, disconnects = "flightcache.bus.state", "flightcache.bus.disconnects"
	got := collect(t, reader)
	if got[state] == nil {
		t.Fatalf("%s has no data point before the first change", state)
	}
	if v := got.value(t, state, op); v != 0 {
		t.Fatalf("%s before any change = %v, want 0 (none)", state, v)
	}
	for i, step := range []struct {
		to          driver.BusState
		gauge       float64
		disconnects float64
	}{
		{driver.BusDown, 1, 0}, // not yet connected: no disconnect
		{driver.BusUp, 2, 0},
		{driver.BusDown, 1, 1},
		{driver.BusDown, 1, 1}, // reported twice: one disconnect
		{driver.BusUp, 2, 1},
		{driver.BusDown, 1, 2},
		{driver.BusUp, 2, 2},
		{driver.BusState(9), 1, 3}, // unknown: counted as down
	} {
		m.ObserveCache(driver.Event{Kind: driver.EventBusChanged, Cache: "product", Bus: step.to})
		got := collect(t, reader)
		if v := got.value(t, state, op); v != step.gauge {
			t.Fatalf("step %d: %s after a change to %v = %v, want %v", i, state, step.to, v, step.gauge)
		}
		if v := got.value(t, disconnects, op); v != step.disconnects {
			t.Fatalf("step %d: %s after a change to %v = %v, want %v", i, disconnects, step.to, v, step.disconnects)
		}
	}
}

// A Get whose caller left is counted under its own outcome, never as a
// failed load.
func TestCallerLeftIsItsOwnOutcome(t *testing.T) {
	m, reader := newMetrics(t)
	m.ObserveCache(driver.Event{Kind: driver.EventGet, Outcome: flightcache.OutcomeCallerLeft, Duration: time.Microsecond, Err: context.Canceled})
	got := collect(t, reader)
	if v := got.value(t, "flightcache.gets", otelflight.AttrOutcome.String("caller_left")); v != 1 {
		t.Errorf("flightcache.gets{outcome=caller_left} = %v, want 1", v)
	}
	if v := got.value(t, "flightcache.gets", otelflight.AttrOutcome.String("load_failed")); v != 0 {
		t.Errorf("flightcache.gets{outcome=load_failed} = %v, want 0", v)
	}
}
