package promflight_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/metriclabels"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/promflight"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// tee forwards every event to the adapter under test and then to hook, so a
// test can synchronise on the event stream instead of sleeping.
type tee struct {
	*promflight.Metrics
	hook func(singleflight.Event)
}

func (t tee) ObserveFlight(e singleflight.Event) {
	t.Metrics.ObserveFlight(e)
	if t.hook != nil {
		t.hook(e)
	}
}

// sample is one gathered series: counter or gauge value, or a histogram's
// sample count.
type gathered map[string]float64

func gather(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	g := gathered{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			g[seriesID(mf.GetName(), m.GetLabel())] = v
		}
	}
	return g
}

func seriesID(name string, labels []*dto.LabelPair) string {
	var parts []string
	for _, l := range labels {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// get returns the value of the series name with the operation label op plus
// the extra labels (name=value pairs); a missing series fails the test.
func (g gathered) get(t *testing.T, name, op string, extra ...string) float64 {
	t.Helper()
	parts := append([]string{"operation=" + op}, extra...)
	sort.Strings(parts)
	id := name + "{" + strings.Join(parts, ",") + "}"
	v, ok := g[id]
	if !ok {
		t.Fatalf("series %s not gathered", id)
	}
	return v
}

// stampede is the scripted scenario: hot callers on one key,
// all attached before its loader is released, then distinct keys one after
// another. It returns once every call has returned.
func stampede(t *testing.T, g *singleflight.Group[string, int], attached <-chan struct{}, hot, distinct int, marker string) {
	t.Helper()
	release := make(chan struct{})
	var loads atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, hot)
	for range hot {
		wg.Go(func() {
			v, _, err := g.Do(context.Background(), marker+"hot", func(context.Context) (int, error) {
				loads.Add(1)
				<-release
				return 42, nil
			})
			if err != nil || v != 42 {
				errs <- fmt.Errorf("hot Do = %d, %v", v, err)
			}
		})
	}
	<-attached // hot-1 callers joined the loader that is still blocked
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("hot key loaded %d times, want 1", n)
	}
	for i := range distinct {
		if _, _, err := g.Do(context.Background(), fmt.Sprintf("%sdistinct-%d", marker, i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatalf("distinct Do: %v", err)
		}
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

func TestStampedeCountsExactly(t *testing.T) {
	const hot, distinct = 1000, 10
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	hook, attached := sharedBarrier(hot - 1)
	g := singleflight.New[string, int](singleflight.WithObserver(tee{m, hook}))
	stampede(t, g, attached, hot, distinct, "k")

	got := gather(t, reg)
	want := []struct {
		name  string
		extra []string
		v     float64
	}{
		{"single_flight_requests_total", nil, hot + distinct},
		{"single_flight_flights_started_total", nil, 1 + distinct},
		{"single_flight_waiter_shared_total", nil, hot - 1},
		{"single_flight_flights_succeeded_total", nil, 1 + distinct},
		{"single_flight_flights_failed_total", nil, 0},
		{"single_flight_flights_panicked_total", nil, 0},
		{"single_flight_in_flight", nil, 0},
		{"single_flight_waiter_duration_seconds", []string{"result=success"}, hot + distinct},
		{"single_flight_flight_duration_seconds", []string{"result=success"}, 1 + distinct},
	}
	for _, w := range want {
		if v := got.get(t, w.name, "product", w.extra...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.extra, v, w.v)
		}
	}
	requests := got.get(t, "single_flight_requests_total", "product")
	loaders := got.get(t, "single_flight_flights_started_total", "product")
	if ratio, want := 1-loaders/requests, 1-11.0/1010; math.Abs(ratio-want) > 1e-12 {
		t.Errorf("suppression ratio = %v, want 1 - 11/1010 = %v", ratio, want)
	}
	if rpl := requests / loaders; math.Abs(rpl-1010.0/11) > 1e-12 {
		t.Errorf("requests per loader = %v, want 1010/11", rpl)
	}
}

func TestInFlightGaugeFollowsRegisteredKeys(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	g := singleflight.New[string, int](singleflight.WithObserver(m))
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Do(context.Background(), "a", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started // the in_flight event precedes loader_started, which precedes fn
	if v := gather(t, reg).get(t, "single_flight_in_flight", "default"); v != 1 {
		t.Errorf("in_flight while loading = %v, want 1", v)
	}
	close(release)
	<-done
	if v := gather(t, reg).get(t, "single_flight_in_flight", "default"); v != 0 {
		t.Errorf("in_flight after = %v, want 0", v)
	}
}

func TestRejectionsCarryTheirReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("limits"))
	if err != nil {
		t.Fatal(err)
	}
	g := singleflight.New[string, int](singleflight.WithObserver(m), singleflight.WithMaxInFlight(1), singleflight.WithMaxWaiters(1))
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
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
		t.Fatalf("second key: %v, want ErrTooManyInFlight", err)
	}
	if _, _, err := g.Do(context.Background(), "a", noop); !errors.Is(err, singleflight.ErrTooManyWaiters) {
		t.Fatalf("second waiter: %v, want ErrTooManyWaiters", err)
	}
	if _, _, err := g.Do(context.Background(), "c", nil); !errors.Is(err, singleflight.ErrNilFunc) {
		t.Fatalf("nil fn: %v, want ErrNilFunc", err)
	}
	close(release)
	<-done
	g.Close()
	if _, _, err := g.Do(context.Background(), "a", noop); !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}

	got := gather(t, reg)
	for _, reason := range []string{"too_many_in_flight", "too_many_waiters", "nil_func", "closed"} {
		if v := got.get(t, "single_flight_rejections_total", "limits", "reason="+reason); v != 1 {
			t.Errorf("rejections{reason=%q} = %v, want 1", reason, v)
		}
	}
	if v := got.get(t, "single_flight_rejections_total", "limits", "reason=other"); v != 0 {
		t.Errorf("rejections{reason=other} = %v, want 0", v)
	}
	if v := got.get(t, "single_flight_requests_total", "limits"); v != 5 {
		t.Errorf("requests = %v, want 5 (rejected calls are requests too)", v)
	}
}

func TestPanicIsCountedAsPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	g := singleflight.New[string, int](singleflight.WithObserver(m))
	_, _, err = g.Do(context.Background(), "p", func(context.Context) (int, error) { panic("boom") })
	var pe *singleflight.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Do = %v, want *PanicError", err)
	}
	got := gather(t, reg)
	for _, c := range []struct {
		name  string
		extra []string
		v     float64
	}{
		{"single_flight_flights_panicked_total", nil, 1},
		{"single_flight_flights_failed_total", nil, 0},
		{"single_flight_flights_succeeded_total", nil, 0},
		{"single_flight_flight_duration_seconds", []string{"result=panic"}, 1},
		{"single_flight_waiter_duration_seconds", []string{"result=panic"}, 1},
	} {
		if v := got.get(t, c.name, "default", c.extra...); v != c.v {
			t.Errorf("%s%v = %v, want %v", c.name, c.extra, v, c.v)
		}
	}
}

func TestTimeoutAndLateResultAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// The timeout and the late result are reported from the timer and the
	// loader goroutines, possibly after Do returned: wait for both.
	late := make(chan struct{})
	var seen atomic.Int32
	g := singleflight.New[string, int](singleflight.WithLoaderTimeout(time.Millisecond), singleflight.WithObserver(tee{m, func(e singleflight.Event) {
		if (e.Kind == singleflight.EventLateResult || e.Kind == singleflight.EventTimeout) && seen.Add(1) == 2 {
			close(late)
		}
	}}))
	_, _, err = g.Do(context.Background(), "slow", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want DeadlineExceeded", err)
	}
	<-late
	got := gather(t, reg)
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"single_flight_flights_timed_out_total", nil},
		{"single_flight_flight_late_results_total", nil},
		{"single_flight_flight_duration_seconds", []string{"result=timeout"}},
		{"single_flight_waiter_duration_seconds", []string{"result=timeout"}},
	} {
		if v := got.get(t, c.name, "default", c.extra...); v != 1 {
			t.Errorf("%s%v = %v, want 1", c.name, c.extra, v)
		}
	}
}

// TestNoLabelValueDerivesFromAKey pins the cardinality rule: whatever the
// keys, no label value of any gathered series contains a key's text.
func TestNoLabelValueDerivesFromAKey(t *testing.T) {
	const marker = "KEYMARKER-7f3a9c-"
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	hook, attached := sharedBarrier(9)
	g := singleflight.New[string, int](singleflight.WithObserver(tee{m, hook}))
	stampede(t, g, attached, 10, 50, marker)

	c := newCache(t, m, "product")
	for i := range 20 {
		key := fmt.Sprintf("%suser-%d", marker, i)
		if _, err := c.Get(context.Background(), key, func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(context.Background(), key, nil); err != nil {
			t.Fatal(err)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]bool{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.Contains(l.GetValue(), "KEYMARKER") || strings.Contains(l.GetName(), "KEYMARKER") {
					t.Errorf("%s has key-derived label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
				values[l.GetName()+"="+l.GetValue()] = true
			}
		}
	}
	// 70 engine keys and 20 cache keys went through; the label values stay
	// the fixed, bounded vocabulary: the operation and every value of
	// result, reason, tier, outcome, to, event and kind.
	vocabulary := 1 + metriclabels.NumResults + metriclabels.NumReasons + len(metriclabels.TierNames) +
		metriclabels.NumOutcomes + len(metriclabels.BreakerStateNames) +
		metriclabels.NumLeaseEvents + metriclabels.NumFollowerResults + len(metriclabels.ScopeNames) +
		len(metriclabels.InvalidationKindNames)
	if len(values) > vocabulary {
		t.Errorf("%d distinct label pairs, want a small bounded set: %v", len(values), values)
	}
}

func newCache(t *testing.T, obs driver.Observer, name string) *flightcache.Cache[int] {
	t.Helper()
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[int]{Name: name, Local: local, TTL: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCacheStampedeThroughRealCache drives both layers through one adapter:
// the Cache hands it to its engine because it implements both observers.
func TestCacheStampedeThroughRealCache(t *testing.T) {
	const hot, distinct = 1000, 10
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	hook, attached := sharedBarrier(hot - 1)
	c := newCache(t, tee{m, hook}, "product")

	release := make(chan struct{})
	var wg sync.WaitGroup
	for range hot {
		wg.Go(func() {
			if v, err := c.Get(context.Background(), "hot", func(context.Context) (int, error) { <-release; return 7, nil }); err != nil || v != 7 {
				t.Errorf("Get = %d, %v", v, err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	for i := range distinct {
		if _, err := c.Get(context.Background(), fmt.Sprint("d", i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(context.Background(), "hot", nil); err != nil { // a local hit now
		t.Fatal(err)
	}

	got := gather(t, reg)
	for _, w := range []struct {
		name  string
		extra []string
		v     float64
	}{
		{"single_flight_requests_total", nil, hot + distinct},
		{"single_flight_flights_started_total", nil, 1 + distinct},
		{"single_flight_waiter_shared_total", nil, hot - 1},
		{"flightcache_origin_calls_total", []string{"result=success"}, 1 + distinct},
		{"flightcache_origin_call_duration_seconds", []string{"result=success"}, 1 + distinct},
		{"flightcache_misses_total", []string{"tier=local"}, hot + distinct},
		{"flightcache_hits_total", []string{"tier=local"}, 1},
		{"flightcache_gets_total", []string{"outcome=loaded"}, 1 + distinct},
		{"flightcache_gets_total", []string{"outcome=coalesced"}, hot - 1},
		{"flightcache_gets_total", []string{"outcome=hit_local"}, 1},
		{"flightcache_get_duration_seconds", nil, hot + distinct + 1},
	} {
		if v := got.get(t, w.name, "product", w.extra...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.extra, v, w.v)
		}
	}
}

func TestCacheEventsMapToTheirCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	errStore := errors.New("store down")
	events := []driver.Event{
		{Kind: driver.EventHit, Tier: driver.TierShared},
		{Kind: driver.EventMiss, Tier: driver.TierShared},
		{Kind: driver.EventNegativeHit, Tier: driver.TierLocal},
		{Kind: driver.EventStaleServed, Err: errStore},
		{Kind: driver.EventEarlyRefresh},
		{Kind: driver.EventWriteFailed, Tier: driver.TierShared, Err: errStore},
		{Kind: driver.EventReadFailed, Tier: driver.TierShared, Err: errStore},
		{Kind: driver.EventThrottled, Err: errStore},
		{Kind: driver.EventOriginCall, Err: errStore, Duration: time.Millisecond},
		{Kind: driver.EventGet, Outcome: flightcache.OutcomeStale, Duration: time.Millisecond},
	}
	for _, e := range events {
		m.ObserveCache(e)
	}
	got := gather(t, reg)
	for _, w := range []struct {
		name  string
		extra []string
	}{
		{"flightcache_hits_total", []string{"tier=shared"}},
		{"flightcache_misses_total", []string{"tier=shared"}},
		{"flightcache_negative_hits_total", []string{"tier=local"}},
		{"flightcache_stale_served_total", nil},
		{"flightcache_early_refreshes_total", nil},
		{"flightcache_write_failures_total", []string{"tier=shared"}},
		{"flightcache_read_failures_total", []string{"tier=shared"}},
		{"flightcache_throttled_total", nil},
		{"flightcache_origin_calls_total", []string{"result=error"}},
		{"flightcache_origin_call_duration_seconds", []string{"result=error"}},
		{"flightcache_gets_total", []string{"outcome=stale"}},
		{"flightcache_get_duration_seconds", nil},
	} {
		if v := got.get(t, w.name, "default", w.extra...); v != 1 {
			t.Errorf("%s%v = %v, want 1", w.name, w.extra, v)
		}
	}
	if v := got.get(t, "flightcache_hits_total", "default", "tier=local"); v != 0 {
		t.Errorf("local hits = %v, want 0", v)
	}
}

// The breaker gauge follows the last change, the transitions count every
// change by new state, and both exist (at 0 and closed) before the first
// change, so a dashboard shows "closed" rather than no data.
func TestBreakerChangesSetTheGaugeAndCountTransitions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	const state, changes = "flightcache_shared_breaker_state", "flightcache_shared_breaker_transitions_total"
	got := gather(t, reg)
	if v := got.get(t, state, "product"); v != 0 {
		t.Fatalf("breaker state before any change = %v, want 0 (closed)", v)
	}
	changed := func(s driver.BreakerState) {
		m.ObserveCache(driver.Event{Kind: driver.EventBreakerChanged, Cache: "product", Tier: driver.TierShared, Breaker: s})
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
		changed(step.to)
		if v := gather(t, reg).get(t, state, "product"); v != step.gauge {
			t.Fatalf("breaker state after a change to %v = %v, want %v", step.to, v, step.gauge)
		}
	}
	got = gather(t, reg)
	for to, want := range map[string]float64{"open": 2, "half_open": 2, "closed": 1} {
		if v := got.get(t, changes, "product", "to="+to); v != want {
			t.Errorf("%s{to=%s} = %v, want %v", changes, to, v, want)
		}
	}
}

func TestFilteredEventsAndOutcomeAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m.ObserveCache(driver.Event{Kind: driver.EventFiltered})
		m.ObserveCache(driver.Event{Kind: driver.EventGet, Outcome: flightcache.OutcomeFiltered, Duration: time.Microsecond})
	}
	got := gather(t, reg)
	if v := got.get(t, "flightcache_filtered_total", "default"); v != 3 {
		t.Errorf("flightcache_filtered_total = %v, want 3", v)
	}
	if v := got.get(t, "flightcache_gets_total", "default", "outcome=filtered"); v != 3 {
		t.Errorf("flightcache_gets_total{outcome=filtered} = %v, want 3", v)
	}
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := promflight.New(nil); !errors.Is(err, promflight.ErrNilRegisterer) {
		t.Errorf("New(nil) = %v, want ErrNilRegisterer", err)
	}
	if _, err := promflight.New(reg, promflight.WithOperation("")); err == nil {
		t.Error("empty operation accepted")
	}
	if _, err := promflight.New(reg, promflight.WithConstLabels(prometheus.Labels{"operation": "x"})); err == nil {
		t.Error("const label clashing with operation accepted")
	}
	if _, err := promflight.New(reg, promflight.WithOperation("a")); err != nil {
		t.Fatal(err)
	}
	// A second operation shares the registry; the same one twice does not.
	if _, err := promflight.New(reg, promflight.WithOperation("b")); err != nil {
		t.Errorf("second operation: %v", err)
	}
	_, err := promflight.New(reg, promflight.WithOperation("a"))
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("duplicate operation: %v, want AlreadyRegisteredError", err)
	}
	// A clash half-way through registration leaves nothing behind: once the
	// blocker is gone, the same operation registers every collector.
	reg = prometheus.NewRegistry()
	blocker := prometheus.NewCounter(prometheus.CounterOpts{Name: "single_flight_in_flight", Help: "Keys with a flight under way.", ConstLabels: prometheus.Labels{"operation": "c"}})
	reg.MustRegister(blocker)
	if _, err := promflight.New(reg, promflight.WithOperation("c")); err == nil {
		t.Fatal("clash with a foreign collector accepted")
	}
	reg.Unregister(blocker)
	if _, err := promflight.New(reg, promflight.WithOperation("c")); err != nil {
		t.Errorf("after a failed New: %v", err)
	}
}

// TestDurationHistogramBuckets pins the hand-rolled histogram to Prometheus'
// semantics: "le" buckets are inclusive upper bounds, cumulative, and the
// sum is in seconds.
func TestDurationHistogramBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithBuckets([]float64{0.001, 0.01}))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, time.Second} {
		m.ObserveFlight(singleflight.Event{Kind: singleflight.EventLoaderSucceeded, Duration: d})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() != "single_flight_flight_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "success" {
					h = s.GetHistogram()
				}
			}
		}
	}
	if h == nil {
		t.Fatal("no loader duration histogram for result=success")
	}
	if h.GetSampleCount() != 4 {
		t.Errorf("count = %d, want 4", h.GetSampleCount())
	}
	if got, want := h.GetSampleSum(), 1.013; math.Abs(got-want) > 1e-9 {
		t.Errorf("sum = %v, want %v", got, want)
	}
	want := map[float64]uint64{0.001: 1, 0.01: 3}
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() != want[b.GetUpperBound()] {
			t.Errorf("bucket le=%v = %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want[b.GetUpperBound()])
		}
	}
	if len(h.GetBucket()) != 2 {
		t.Errorf("%d buckets, want 2", len(h.GetBucket()))
	}
}

func TestBadBucketsAreAnErrorNotAPanic(t *testing.T) {
	for _, b := range [][]float64{nil, {0.1, 0.1}, {0.2, 0.1}, {math.NaN()}, {-1}, {math.Inf(1)}} {
		if _, err := promflight.New(prometheus.NewRegistry(), promflight.WithBuckets(b)); err == nil {
			t.Errorf("buckets %v accepted", b)
		}
	}
}

func TestClusterEventsMapToTheirSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	obs := func(e driver.Event) { e.Cache = "product"; m.ObserveCache(e) }
	obs(driver.Event{Kind: driver.EventLeaseAcquired})
	obs(driver.Event{Kind: driver.EventLeaseAcquired})
	obs(driver.Event{Kind: driver.EventLeaseTakenOver})
	obs(driver.Event{Kind: driver.EventLeaseLost})
	obs(driver.Event{Kind: driver.EventFencedWriteRejected})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Millisecond})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Millisecond})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Millisecond, Err: fmt.Errorf("x: %w", flightcache.ErrLeaderFailed)})
	obs(driver.Event{Kind: driver.EventFollowerWoken, Duration: time.Second, Err: flightcache.ErrCoalesceTimeout})
	if v := gather(t, reg).get(t, "flightcache_cluster_degraded", "product"); v != 0 {
		t.Fatalf("degraded before any scope change = %v, want 0", v)
	}
	obs(driver.Event{Kind: driver.EventScopeChanged, Scope: flightcache.ScopeLocal})
	if v := gather(t, reg).get(t, "flightcache_cluster_degraded", "product"); v != 1 {
		t.Fatalf("degraded after a change to local = %v, want 1", v)
	}
	obs(driver.Event{Kind: driver.EventScopeChanged, Scope: flightcache.ScopeCluster})
	got := gather(t, reg)
	for _, c := range []struct {
		name  string
		label string
		want  float64
	}{
		{"flightcache_cluster_leases_total", "event=acquired", 2},
		{"flightcache_cluster_leases_total", "event=taken_over", 1},
		{"flightcache_cluster_leases_total", "event=lost", 1},
		{"flightcache_cluster_fenced_writes_rejected_total", "", 1},
		{"flightcache_cluster_follower_wait_seconds", "result=woken", 2},
		{"flightcache_cluster_follower_wait_seconds", "result=leader_failed", 1},
		{"flightcache_cluster_follower_wait_seconds", "result=timeout", 1},
		{"flightcache_cluster_scope_changes_total", "to=local", 1},
		{"flightcache_cluster_scope_changes_total", "to=cluster", 1},
		{"flightcache_cluster_degraded", "", 0},
	} {
		var extra []string
		if c.label != "" {
			extra = append(extra, c.label)
		}
		if v := got.get(t, c.name, "product", extra...); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, v, c.want)
		}
	}
}

func TestInvalidationEventsMapToTheirSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	obs := func(k driver.EventKind, kind driver.InvalidationKind, err error) {
		m.ObserveCache(driver.Event{Kind: k, Cache: "product", Invalidation: kind, Err: err})
	}
	const last = "flightcache_invalidation_last_received_timestamp_seconds"
	if v := gather(t, reg).get(t, last, "product"); v != 0 {
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

	got := gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"flightcache_invalidations_sent_total", []string{"kind=key", "result=success"}, 2},
		{"flightcache_invalidations_sent_total", []string{"kind=prefix", "result=success"}, 1},
		{"flightcache_invalidations_sent_total", []string{"kind=prefix", "result=error"}, 0},
		{"flightcache_invalidations_sent_total", []string{"kind=all", "result=success"}, 0},
		{"flightcache_invalidations_sent_total", []string{"kind=all", "result=error"}, 1},
		{"flightcache_invalidations_received_total", []string{"kind=key"}, 3},
		{"flightcache_invalidations_received_total", []string{"kind=prefix"}, 1},
		{"flightcache_invalidations_received_total", []string{"kind=all"}, 1},
		{"flightcache_invalidations_applied_total", []string{"kind=key"}, 2},
		{"flightcache_invalidations_applied_total", []string{"kind=prefix"}, 1},
		{"flightcache_invalidations_applied_total", []string{"kind=all"}, 1},
		{"flightcache_invalidations_ignored_total", []string{"kind=key"}, 1},
		{"flightcache_invalidations_ignored_total", []string{"kind=prefix"}, 0},
		{"flightcache_invalidations_ignored_total", []string{"kind=unknown"}, 1},
	} {
		if v := got.get(t, c.name, "product", c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	ts := got.get(t, last, "product")
	if lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9; ts < lo || ts > hi {
		t.Errorf("%s = %.6f, want the time of the last message, within [%.6f, %.6f]", last, ts, lo, hi)
	}
}

func TestBusChangesSetTheGaugeAndCountDisconnects(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	const state, disconnects = "flightcache_bus_state", "flightcache_bus_disconnects_total"
	if v := gather(t, reg).get(t, state, "product"); v != 0 {
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
		{driver.BusUp, 2, 1},
		{driver.BusDown, 1, 2},
		{driver.BusState(9), 1, 2}, // unknown: counted as down, but it was down already
		{driver.BusUp, 2, 2},
		{driver.BusState(9), 1, 3},
	} {
		m.ObserveCache(driver.Event{Kind: driver.EventBusChanged, Cache: "product", Bus: step.to})
		got := gather(t, reg)
		if v := got.get(t, state, "product"); v != step.gauge {
			t.Fatalf("step %d: %s after a change to %v = %v, want %v", i, state, step.to, v, step.gauge)
		}
		if v := got.get(t, disconnects, "product"); v != step.disconnects {
			t.Fatalf("step %d: %s after a change to %v = %v, want %v", i, disconnects, step.to, v, step.disconnects)
		}
	}
}

// stubBus is a Bus whose subscriber the test drives by hand, as if other
// instances published; Publish fails with err when set.
type stubBus struct {
	mu  sync.Mutex
	h   driver.BusHandler
	err error
}

func (b *stubBus) Publish(context.Context, string, driver.Invalidation) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *stubBus) Subscribe(_ string, h driver.BusHandler) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h = h
	return func() {}, nil
}

func (b *stubBus) handler() driver.BusHandler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h
}

func (b *stubBus) failWith(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

// TestInvalidationEventsThroughRealCache drives a Cache with a Bus (and a
// memstore local tier, which ranges for bulk invalidation) and checks the
// series, and that no key, prefix or ID reaches a label.
func TestInvalidationEventsThroughRealCache(t *testing.T) {
	const marker = "KEYMARKER-b05-"
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	bus := &stubBus{}
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Local: local, Bus: bus, TTL: time.Minute, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := bus.handler()
	if h == nil {
		t.Fatal("New did not subscribe to the Bus")
	}
	ctx := context.Background()
	h.BusChanged(driver.BusUp)

	for i := range 3 {
		if err := c.Set(ctx, fmt.Sprintf("%s%d", marker, i), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.InvalidatePrefix(ctx, marker); err != nil {
		t.Fatal(err)
	}
	bus.failWith(errors.New("bus unreachable"))
	if err := c.Delete(ctx, marker+"0"); !errors.Is(err, flightcache.ErrNotPublished) {
		t.Fatalf("Delete with a failing Bus = %v, want ErrNotPublished", err)
	}
	bus.failWith(nil)

	if err := c.Set(ctx, marker+"held", 1); err != nil {
		t.Fatal(err)
	}
	// That successful publish made the Cache redo the Delete's (one more
	// key invalidation sent), in the background.
	for deadline := time.Now().Add(10 * time.Second); c.PendingInvalidations() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the Delete whose invalidation failed was not redone")
		}
		runtime.Gosched()
	}
	inv := driver.Invalidation{Kind: driver.InvalidationKey, Target: marker + "held", Version: time.Now()}
	before := time.Now()
	h.Invalidated(inv) // newer than the Set: applied
	h.Invalidated(inv) // the same again: ignored
	h.Invalidated(driver.Invalidation{Kind: driver.InvalidationPrefix, Target: marker, Version: time.Now()})
	after := time.Now()
	if _, ok := local.Get(marker + "held"); ok {
		t.Fatal("the local copy survived an invalidation newer than it")
	}
	h.BusChanged(driver.BusDown)
	h.BusChanged(driver.BusUp)

	got := gather(t, reg)
	for _, w := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"flightcache_invalidations_sent_total", []string{"kind=key", "result=success"}, 5},
		{"flightcache_invalidations_sent_total", []string{"kind=prefix", "result=success"}, 1},
		{"flightcache_invalidations_received_total", []string{"kind=key"}, 2},
		{"flightcache_invalidations_received_total", []string{"kind=prefix"}, 1},
		{"flightcache_invalidations_applied_total", []string{"kind=key"}, 1},
		{"flightcache_invalidations_ignored_total", []string{"kind=key"}, 1},
		{"flightcache_invalidations_applied_total", []string{"kind=prefix"}, 1},
		{"flightcache_bus_state", nil, 2},
		{"flightcache_bus_disconnects_total", nil, 1},
	} {
		if v := got.get(t, w.name, "product", w.labels...); v != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, v, w.want)
		}
	}
	// The Delete's publish failed, and its redo starts at once: it may
	// try again, and fail again, before the Bus recovers. Every try is
	// counted, so there is at least the Delete's own.
	if v := got.get(t, "flightcache_invalidations_sent_total", "product", "kind=key", "result=error"); v < 1 {
		t.Errorf("flightcache_invalidations_sent_total[kind=key result=error] = %v, want at least 1", v)
	}
	ts := got.get(t, "flightcache_invalidation_last_received_timestamp_seconds", "product")
	if lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9; ts < lo || ts > hi {
		t.Errorf("last received = %.6f, want within [%.6f, %.6f]", ts, lo, hi)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.Contains(l.GetValue(), "KEYMARKER") {
					t.Errorf("%s has key-derived label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// A Get whose caller left is counted under its own outcome, never as a
// failed load.
func TestCallerLeftIsItsOwnOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCache(driver.Event{Kind: driver.EventGet, Outcome: flightcache.OutcomeCallerLeft, Duration: time.Microsecond, Err: context.Canceled})
	got := gather(t, reg)
	if v := got.get(t, "flightcache_gets_total", "default", "outcome=caller_left"); v != 1 {
		t.Errorf("flightcache_gets_total{outcome=caller_left} = %v, want 1", v)
	}
	if v := got.get(t, "flightcache_gets_total", "default", "outcome=load_failed"); v != 0 {
		t.Errorf("flightcache_gets_total{outcome=load_failed} = %v, want 0", v)
	}
}
