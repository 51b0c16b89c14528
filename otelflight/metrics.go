// Package otelflight adapts a single-flight engine and a flightcache.Cache to
// OpenTelemetry: Metrics records their events on the metric API, and Tracer
// implements driver.Tracer on the trace API. Both use only the API
// packages, so any SDK and exporter plugs in.
//
// Instrument names follow OpenTelemetry's naming rules: dot-separated
// namespaces (single_flight.… for the engine, flightcache.… for the
// Cache), plural nouns for counters and no .count or _total suffix, the
// unit in the instrument's unit rather than in its name; a family of
// counts is one instrument with an outcome or result attribute, as .NET's
// cache metrics count requests with an outcome attribute. There are no
// stable cache semantic conventions upstream, so the names are this
// package's own; docs/OBSERVABILITY.md lists them with the Prometheus
// equivalents that package promflight exports.
//
// Flights (single_flight.flights.started), origin calls
// (flightcache.origin.calls), answers of the failure throttle
// (flightcache.throttled) and remote waits
// (flightcache.cluster.follower.wait.duration) are separate instruments:
// in a Cache a flight may end without an origin call.
//
// Every attribute is in the flightcache namespace and bounded: the cache
// name given at construction (AttrCache), AttrResult, AttrReason,
// AttrTier, AttrOutcome, AttrBreakerState, AttrScope, AttrLeaseEvent and
// AttrInvalidationKind. No key or ID is ever an attribute; events do not
// even carry keys.
package otelflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/metriclabels"
	"github.com/flightcache/flightcache/singleflight"
)

// ScopeName is the instrumentation scope to pass to MeterProvider.Meter and
// the one NewTracer uses.
const ScopeName = "github.com/flightcache/flightcache/otelflight"

// DefaultBuckets are the bucket boundaries, in seconds, advised for the
// duration histograms: 100µs (a local hit) to 10s (the default loader
// timeout). An SDK View may override them.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// The attribute keys of the measurements, besides AttrCache (the cache or
// operation name, on every measurement) and AttrOutcome (a Get's outcome,
// or a tier lookup's: hit, miss, negative_hit). Every value is one of a
// small fixed set (docs/OBSERVABILITY.md, "Labels").
const (
	// AttrResult is how a flight, a wait, an origin call or a publish
	// ended.
	AttrResult = attribute.Key("flightcache.result")
	// AttrReason is why admission refused a call.
	AttrReason = attribute.Key("flightcache.reason")
	// AttrTier is the tier of a lookup, read or write.
	AttrTier = attribute.Key("flightcache.tier")
	// AttrBreakerState is the new state of a breaker transition.
	AttrBreakerState = attribute.Key("flightcache.breaker.state")
	// AttrScope is the new coalescing scope of a scope change.
	AttrScope = attribute.Key("flightcache.scope")
	// AttrLeaseEvent is what happened to a cluster lease.
	AttrLeaseEvent = attribute.Key("flightcache.lease.event")
	// AttrInvalidationKind is the kind of an invalidation.
	AttrInvalidationKind = attribute.Key("flightcache.invalidation.kind")
)

// ErrNilMeter is returned by NewMetrics for a nil meter.
var ErrNilMeter = errors.New("otelflight: nil metric.Meter")

// MetricsOption configures NewMetrics.
type MetricsOption func(*metricsConfig)

type metricsConfig struct {
	operation string
	attrs     []attribute.KeyValue
	buckets   []float64
}

// WithOperation sets the AttrCache attribute (flightcache.cache.name) of
// every measurement, the counterpart of promflight's "operation" label; default
// "default", the default flightcache.Options.Name. It must be a constant
// such as the cache's name, never derived from a key.
func WithOperation(name string) MetricsOption {
	return func(c *metricsConfig) { c.operation = name }
}

// WithAttributes adds constant attributes (say, region) to every
// measurement. Their values must be bounded.
func WithAttributes(kv ...attribute.KeyValue) MetricsOption {
	return func(c *metricsConfig) { c.attrs = append(c.attrs, kv...) }
}

// WithBuckets replaces DefaultBuckets as the histograms' advised boundaries.
func WithBuckets(b []float64) MetricsOption {
	return func(c *metricsConfig) { c.buckets = b }
}

// counter is an instrument bound to one precomputed attribute set. The
// option slice is built once: passing it on with opts... hands the callee
// the same backing array, where a fresh variadic argument would escape to
// the heap through the interface call on every event.
type counter struct {
	c    metric.Int64Counter
	opts []metric.AddOption
}

func (c *counter) add(ctx context.Context) { c.c.Add(ctx, 1, c.opts...) }

type histogram struct {
	h    metric.Float64Histogram
	opts []metric.RecordOption
}

func (h *histogram) record(ctx context.Context, v float64) { h.h.Record(ctx, v, h.opts...) }

// Metrics is an OpenTelemetry metrics adapter for one operation. It
// implements singleflight.Observer and driver.Observer and is safe for
// concurrent use.
type Metrics struct {
	// Every field is set in NewMetrics and read-only afterwards.
	requests         counter
	rejections       [metriclabels.NumReasons]counter
	flightsStarted   counter
	shared           counter
	flightsSucceeded counter
	flightsFailed    counter
	panics           counter
	timeouts         counter
	abandoned        counter
	lateResults      counter
	inFlight         metric.Int64UpDownCounter
	inFlightOpts     []metric.AddOption
	waiterDuration   [metriclabels.NumResults]histogram
	flightDuration   [metriclabels.NumResults]histogram

	// Origin calls (driver.EventOriginCall), by metriclabels.OriginResult.
	originCalls    [metriclabels.NumOriginResults]counter
	originDuration [metriclabels.NumOriginResults]histogram

	hits           [len(metriclabels.TierNames)]counter
	misses         [len(metriclabels.TierNames)]counter
	negativeHits   [len(metriclabels.TierNames)]counter
	writeFailures  [len(metriclabels.TierNames)]counter
	readFailures   [len(metriclabels.TierNames)]counter
	staleServed    counter
	earlyRefreshes counter
	throttled      counter
	gets           [metriclabels.NumOutcomes]counter
	getDuration    histogram
	filtered       counter
	breakerState   metric.Int64Gauge
	breakerOpts    []metric.RecordOption
	breakerChanges [len(metriclabels.BreakerStateNames)]counter

	leaseEvents  [metriclabels.NumLeaseEvents]counter
	fencedWrites counter
	followerWait [metriclabels.NumFollowerResults]histogram
	degraded     metric.Int64Gauge
	degradedOpts []metric.RecordOption
	scopeChanges [len(metriclabels.ScopeNames)]counter

	invalidationsSent     [len(metriclabels.InvalidationKindNames)][metriclabels.NumPublishResults]counter
	invalidationsReceived [len(metriclabels.InvalidationKindNames)]counter
	invalidationsApplied  [len(metriclabels.InvalidationKindNames)]counter
	invalidationsIgnored  [len(metriclabels.InvalidationKindNames)]counter
	lastReceived          metric.Float64Gauge
	lastReceivedOpts      []metric.RecordOption
	busState              metric.Int64Gauge
	busOpts               []metric.RecordOption
	busDisconnects        counter
	bus                   metriclabels.BusTracker
}

var (
	_ singleflight.Observer = (*Metrics)(nil)
	_ driver.Observer       = (*Metrics)(nil)
)

// NewMetrics creates the instruments on meter (typically
// provider.Meter(otelflight.ScopeName)).
func NewMetrics(meter metric.Meter, opts ...MetricsOption) (*Metrics, error) {
	if meter == nil {
		return nil, ErrNilMeter
	}
	cfg := metricsConfig{operation: "default", buckets: DefaultBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.operation == "" {
		return nil, errors.New("otelflight: empty operation name")
	}
	b := &instruments{meter: meter, cfg: cfg}
	m := &Metrics{}
	b.counter(&m.requests, "single_flight.requests", "{request}", "Calls that reached the single-flight engine, before admission (rejected ones included); in a Cache, the Gets that missed every tier.")
	b.counter(&m.flightsStarted, "single_flight.flights.started", "{flight}", "Flights started: executions of the engine's function, one per key however many calls share it. In a Cache a flight may end without an origin call: origin calls are flightcache.origin.calls.")
	b.counter(&m.shared, "single_flight.waiters.shared", "{request}", "Calls that joined a flight already in flight instead of starting one.")
	b.counter(&m.flightsSucceeded, "single_flight.flights.succeeded", "{flight}", "Flights whose function returned a nil error.")
	b.counter(&m.flightsFailed, "single_flight.flights.failed", "{flight}", "Flights whose function returned an error (panics apart). In a Cache this includes flights the failure throttle answered and failed waits for another instance: origin failures are flightcache.origin.calls with flightcache.result error.")
	b.counter(&m.panics, "single_flight.flights.panicked", "{flight}", "Flights whose function panicked or called runtime.Goexit.")
	b.counter(&m.timeouts, "single_flight.flights.timed_out", "{flight}", "Flights whose callers were released by the engine's hard timeout before the function returned.")
	b.counter(&m.abandoned, "single_flight.flights.abandoned", "{flight}", "Flights cancelled because every caller left.")
	b.counter(&m.lateResults, "single_flight.flights.late_results", "{result}", "Flight results dropped because a timeout, Close or abandonment completed the flight first.")
	b.counters(m.rejections[:], "single_flight.rejections", "{request}", "Calls refused by admission without starting or joining a flight, by reason.", AttrReason, metriclabels.ReasonNames[:])
	b.histograms(m.waiterDuration[:], "single_flight.waiter.duration", "How long each call waited for its result, leader included, by result.", metriclabels.ResultNames[:])
	b.histograms(m.flightDuration[:], "single_flight.flight.duration", "How long each flight ran, by result (timeout: the configured timeout); in a Cache it includes re-checks and waits for another instance, the origin's own latency is flightcache.origin.duration.", metriclabels.ResultNames[:])
	if b.err == nil {
		m.inFlight, b.err = meter.Int64UpDownCounter("single_flight.flights.active", metric.WithUnit("{flight}"), metric.WithDescription("Flights under way, one per key."))
		m.inFlightOpts = []metric.AddOption{metric.WithAttributeSet(b.set())}
	}

	b.counters(m.originCalls[:], "flightcache.origin.calls", "{call}", "Calls of the origin (a LoadFunc or BatchLoadFunc returned), by result, whoever made them (flight, early refresh, batch); throttled flights and waits for another instance are not origin calls.", AttrResult, metriclabels.OriginResultNames[:])
	b.histograms(m.originDuration[:], "flightcache.origin.duration", "How long each origin call ran, by result.", metriclabels.OriginResultNames[:])
	if lookups := b.int64Counter("flightcache.lookups", "{lookup}", "Lookups of a tier, by tier and outcome: hit (a fresh value), negative_hit (a cached \"not found\"), miss (no fresh value)."); b.err == nil {
		for i, tier := range metriclabels.TierNames {
			lookup := func(outcome string) counter {
				return counter{c: lookups, opts: []metric.AddOption{metric.WithAttributeSet(b.set(AttrTier.String(tier), AttrOutcome.String(outcome)))}}
			}
			m.hits[i], m.misses[i], m.negativeHits[i] = lookup("hit"), lookup("miss"), lookup("negative_hit")
		}
	}
	b.counters(m.writeFailures[:], "flightcache.write_failures", "{write}", "Failed write-backs to a tier (the Get still succeeded), by tier.", AttrTier, metriclabels.TierNames[:])
	b.counters(m.readFailures[:], "flightcache.read_failures", "{read}", "Failed reads of a tier, served as misses, by tier.", AttrTier, metriclabels.TierNames[:])
	b.counter(&m.staleServed, "flightcache.stale_served", "{get}", "Gets answered with a stale value because the load failed or was slow (fail-safe).")
	b.counter(&m.earlyRefreshes, "flightcache.early_refreshes", "{refresh}", "Background early refreshes started.")
	b.counter(&m.throttled, "flightcache.throttled", "{flight}", "Flights (one per key) the failure throttle answered with the key's recent origin error instead of calling the origin.")
	outcomes := make([]string, metriclabels.NumOutcomes)
	for i := range outcomes {
		outcomes[i] = flightcache.Outcome(i).String()
	}
	b.counters(m.gets[:], "flightcache.gets", "{get}", "Finished Gets, by outcome.", AttrOutcome, outcomes)
	b.histogram(&m.getDuration, "flightcache.get.duration", "Duration of a Get, whatever served it.")
	b.counter(&m.filtered, "flightcache.filtered", "{get}", "Gets the Guard answered \"cannot exist\" without a load.")
	b.counters(m.breakerChanges[:], "flightcache.shared_breaker.transitions", "{transition}", "State changes of the shared tier's circuit breaker, by new state.", AttrBreakerState, metriclabels.BreakerStateNames[:])
	if b.err == nil {
		m.breakerState, b.err = meter.Int64Gauge("flightcache.shared_breaker.state", metric.WithUnit("{state}"),
			metric.WithDescription("State of the shared tier's circuit breaker: 0 closed, 1 half-open, 2 open."))
		m.breakerOpts = []metric.RecordOption{metric.WithAttributeSet(b.set())}
	}
	if b.err == nil {
		// A breaker starts closed; recording it now gives the gauge a value
		// before the first change, as the Prometheus gauge has.
		m.breakerState.Record(context.Background(), int64(driver.BreakerClosed), m.breakerOpts...)
	}
	b.counters(m.leaseEvents[:], "flightcache.cluster.leases", "{lease}", "Cluster lease events: acquired, taken_over (after an expiry without result), lost (while loading).", AttrLeaseEvent, metriclabels.LeaseEventNames[:])
	b.counter(&m.fencedWrites, "flightcache.cluster.fenced_writes_rejected", "{write}", "Write-backs refused by the fencing token: a newer lease, Set or Delete superseded the load.")
	b.histograms(m.followerWait[:], "flightcache.cluster.follower.wait.duration", "Remote waits: how long this instance waited for another instance's load of a key (no origin call of its own), by how the wait ended (woken: the result arrived).", metriclabels.FollowerResultNames[:])
	b.counters(m.scopeChanges[:], "flightcache.cluster.scope_changes", "{change}", "Changes of the coalescing scope, by new scope (local: degraded, cluster: recovered).", AttrScope, metriclabels.ScopeNames[:])
	if b.err == nil {
		m.degraded, b.err = meter.Int64Gauge("flightcache.cluster.degraded", metric.WithUnit("{state}"),
			metric.WithDescription("1 while cluster coalescing has degraded to process-local because the coordinator failed, else 0."))
		m.degradedOpts = []metric.RecordOption{metric.WithAttributeSet(b.set())}
	}
	if b.err == nil {
		m.degraded.Record(context.Background(), 0, m.degradedOpts...)
	}
	kinds := metriclabels.InvalidationKindNames[:]
	if sent := b.int64Counter("flightcache.invalidations.sent", "{invalidation}", "Invalidations this instance published to the others, by kind and result (error: not published)."); b.err == nil {
		for i, k := range kinds {
			for j, r := range metriclabels.PublishResultNames {
				m.invalidationsSent[i][j] = counter{c: sent, opts: []metric.AddOption{metric.WithAttributeSet(b.set(AttrInvalidationKind.String(k), AttrResult.String(r)))}}
			}
		}
	}
	b.counters(m.invalidationsReceived[:], "flightcache.invalidations.received", "{invalidation}", "Invalidations received from other instances, by kind.", AttrInvalidationKind, kinds)
	b.counters(m.invalidationsApplied[:], "flightcache.invalidations.applied", "{invalidation}", "Received invalidations applied (the older local copies they cover dropped), by kind.", AttrInvalidationKind, kinds)
	b.counters(m.invalidationsIgnored[:], "flightcache.invalidations.ignored", "{invalidation}", "Received invalidations ignored as stale (late, duplicate or out of order: no newer than what was applied or held), by kind.", AttrInvalidationKind, kinds)
	if b.err == nil {
		m.lastReceived, b.err = meter.Float64Gauge("flightcache.invalidation.last_received.timestamp", metric.WithUnit("s"),
			metric.WithDescription("Unix time at which the last invalidation from another instance arrived; 0 before the first."))
		m.lastReceivedOpts = []metric.RecordOption{metric.WithAttributeSet(b.set())}
	}
	if b.err == nil {
		m.lastReceived.Record(context.Background(), 0, m.lastReceivedOpts...)
	}
	if b.err == nil {
		m.busState, b.err = meter.Int64Gauge("flightcache.bus.state", metric.WithUnit("{state}"),
			metric.WithDescription("State of the invalidation bus subscription: 0 none (no Bus), 1 down, 2 up."))
		m.busOpts = []metric.RecordOption{metric.WithAttributeSet(b.set())}
	}
	if b.err == nil {
		m.busState.Record(context.Background(), int64(driver.BusNone), m.busOpts...)
	}
	b.counter(&m.busDisconnects, "flightcache.bus.disconnects", "{disconnect}", "Changes of the invalidation bus subscription from up to down: invalidations may have been missed.")
	if b.err != nil {
		return nil, fmt.Errorf("otelflight: create instruments of operation %q: %w", cfg.operation, b.err)
	}
	return m, nil
}

// instruments creates instruments and their attribute sets, keeping the first
// error so NewMetrics reads as a list.
type instruments struct {
	meter metric.Meter
	cfg   metricsConfig
	err   error
}

func (b *instruments) set(extra ...attribute.KeyValue) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 1+len(b.cfg.attrs)+len(extra))
	kv = append(kv, AttrCache.String(b.cfg.operation))
	kv = append(kv, b.cfg.attrs...)
	kv = append(kv, extra...)
	return attribute.NewSet(kv...)
}

func (b *instruments) int64Counter(name, unit, desc string) metric.Int64Counter {
	if b.err != nil {
		return nil
	}
	c, err := b.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.err = err
	return c
}

func (b *instruments) counter(dst *counter, name, unit, desc string) {
	if c := b.int64Counter(name, unit, desc); b.err == nil {
		*dst = counter{c: c, opts: []metric.AddOption{metric.WithAttributeSet(b.set())}}
	}
}

func (b *instruments) counters(dst []counter, name, unit, desc string, key attribute.Key, values []string) {
	c := b.int64Counter(name, unit, desc)
	if b.err != nil {
		return
	}
	for i, v := range values {
		dst[i] = counter{c: c, opts: []metric.AddOption{metric.WithAttributeSet(b.set(key.String(v)))}}
	}
}

func (b *instruments) float64Histogram(name, desc string) metric.Float64Histogram {
	if b.err != nil {
		return nil
	}
	h, err := b.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(b.cfg.buckets...))
	b.err = err
	return h
}

func (b *instruments) histogram(dst *histogram, name, desc string) {
	if h := b.float64Histogram(name, desc); b.err == nil {
		*dst = histogram{h: h, opts: []metric.RecordOption{metric.WithAttributeSet(b.set())}}
	}
}

func (b *instruments) histograms(dst []histogram, name, desc string, results []string) {
	h := b.float64Histogram(name, desc)
	if b.err != nil {
		return
	}
	for i, r := range results {
		dst[i] = histogram{h: h, opts: []metric.RecordOption{metric.WithAttributeSet(b.set(AttrResult.String(r)))}}
	}
}

// ObserveFlight records an engine event.
func (m *Metrics) ObserveFlight(e singleflight.Event) {
	ctx := e.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	switch e.Kind {
	case singleflight.EventRequest:
		m.requests.add(ctx)
	case singleflight.EventRejected:
		m.rejections[metriclabels.RejectReason(e.Err)].add(ctx)
	case singleflight.EventLoaderStarted:
		m.flightsStarted.add(ctx)
	case singleflight.EventShared:
		m.shared.add(ctx)
	case singleflight.EventLoaderSucceeded:
		m.flightsSucceeded.add(ctx)
		m.flightDuration[metriclabels.ResultSuccess].record(ctx, e.Duration.Seconds())
	case singleflight.EventLoaderFailed:
		m.flightsFailed.add(ctx)
		m.flightDuration[metriclabels.ResultError].record(ctx, e.Duration.Seconds())
	case singleflight.EventLoaderPanicked:
		m.panics.add(ctx)
		m.flightDuration[metriclabels.ResultPanic].record(ctx, e.Duration.Seconds())
	case singleflight.EventTimeout:
		m.timeouts.add(ctx)
		m.flightDuration[metriclabels.ResultTimeout].record(ctx, e.Duration.Seconds())
	case singleflight.EventAbandoned:
		m.abandoned.add(ctx)
	case singleflight.EventLateResult:
		m.lateResults.add(ctx)
	case singleflight.EventInFlight:
		m.inFlight.Add(ctx, int64(e.InFlightDelta), m.inFlightOpts...)
	case singleflight.EventWaitDone:
		m.waiterDuration[metriclabels.ResultOf(e.Err)].record(ctx, e.Duration.Seconds())
	}
}

// ObserveCache records a cache event.
func (m *Metrics) ObserveCache(e driver.Event) {
	ctx := e.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	t := int(e.Tier)
	if t >= len(metriclabels.TierNames) {
		t = int(driver.TierNone)
	}
	switch e.Kind {
	case driver.EventHit:
		m.hits[t].add(ctx)
	case driver.EventMiss:
		m.misses[t].add(ctx)
	case driver.EventNegativeHit:
		m.negativeHits[t].add(ctx)
	case driver.EventStaleServed:
		m.staleServed.add(ctx)
	case driver.EventEarlyRefresh:
		m.earlyRefreshes.add(ctx)
	case driver.EventWriteFailed:
		m.writeFailures[t].add(ctx)
	case driver.EventReadFailed:
		m.readFailures[t].add(ctx)
	case driver.EventThrottled:
		m.throttled.add(ctx)
	case driver.EventOriginCall:
		r := metriclabels.OriginResult(e.Err)
		m.originCalls[r].add(ctx)
		m.originDuration[r].record(ctx, e.Duration.Seconds())
	case driver.EventFiltered:
		m.filtered.add(ctx)
	case driver.EventBreakerChanged:
		st := metriclabels.BreakerStateIndex(e.Breaker)
		m.breakerState.Record(ctx, int64(st), m.breakerOpts...)
		m.breakerChanges[st].add(ctx)
	case driver.EventLeaseAcquired, driver.EventLeaseTakenOver, driver.EventLeaseLost:
		i, _ := metriclabels.LeaseEvent(e.Kind)
		m.leaseEvents[i].add(ctx)
	case driver.EventFencedWriteRejected:
		m.fencedWrites.add(ctx)
	case driver.EventFollowerWoken:
		m.followerWait[metriclabels.FollowerResult(e.Err)].record(ctx, e.Duration.Seconds())
	case driver.EventScopeChanged:
		m.scopeChanges[metriclabels.ScopeIndex(e.Scope)].add(ctx)
		var v int64
		if e.Scope == flightcache.ScopeLocal {
			v = 1
		}
		m.degraded.Record(ctx, v, m.degradedOpts...)
	case driver.EventInvalidationSent:
		m.invalidationsSent[metriclabels.InvalidationKindIndex(e.Invalidation)][metriclabels.PublishResult(e.Err)].add(ctx)
	case driver.EventInvalidationReceived:
		m.invalidationsReceived[metriclabels.InvalidationKindIndex(e.Invalidation)].add(ctx)
		m.lastReceived.Record(ctx, float64(time.Now().UnixNano())/1e9, m.lastReceivedOpts...)
	case driver.EventInvalidationApplied:
		m.invalidationsApplied[metriclabels.InvalidationKindIndex(e.Invalidation)].add(ctx)
	case driver.EventInvalidationIgnored:
		m.invalidationsIgnored[metriclabels.InvalidationKindIndex(e.Invalidation)].add(ctx)
	case driver.EventBusChanged:
		m.busState.Record(ctx, int64(metriclabels.BusStateIndex(e.Bus)), m.busOpts...)
		if m.bus.Changed(e.Bus) {
			m.busDisconnects.add(ctx)
		}
	case driver.EventGet:
		o := int(e.Outcome)
		if o >= metriclabels.NumOutcomes {
			o = int(flightcache.OutcomeUnknown)
		}
		m.gets[o].add(ctx)
		m.getDuration.record(ctx, e.Duration.Seconds())
	}
}
