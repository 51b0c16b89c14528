// Package promflight exports the events of a single-flight engine and of a
// flightcache.Cache as Prometheus metrics.
//
// One Metrics serves one operation (one Cache or one singleflight.Group): its
// name becomes the constant label "operation", so several Metrics with
// different names can share a registry. A Metrics implements both
// singleflight.Observer and driver.Observer; passing it as
// flightcache.Options.Observer wires both layers at once.
//
// Every label child is created in New, so observing an event is a few atomic
// additions: no map lookup, no allocation. The only labels are bounded ones
// (operation, result, reason, tier, outcome, to, event, kind). No key or ID ever becomes a
// label value; events do not even carry keys.
//
// Four series that an outage dashboard must not confuse are kept apart:
// flights (single_flight_flights_started_total, one per key per engine
// execution), origin calls (flightcache_origin_calls_total, one per call
// of the LoadFunc or BatchLoadFunc), answers of the failure throttle
// (flightcache_throttled_total, flights that did not call the origin) and
// remote waits (flightcache_cluster_follower_wait_seconds_count, waits for
// another instance's load). In a Cache, flights >= origin calls; for a
// bare singleflight.Group the flights are the origin calls and the
// flightcache_* series stay at 0.
//
// See docs/OBSERVABILITY.md for the meaning of each metric, the derived
// ratios and ready PromQL.
package promflight

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/metriclabels"
	"github.com/flightcache/flightcache/singleflight"
)

// DefaultBuckets are the latency buckets, in seconds, of both duration
// histograms: 100µs (a local hit) to 10s (the default loader timeout).
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// ErrNilRegisterer is returned by New when reg is nil: metrics that are
// registered nowhere are a configuration mistake, not a default.
var ErrNilRegisterer = errors.New("promflight: nil prometheus.Registerer")

// Option configures New.
type Option func(*config)

type config struct {
	operation   string
	namespace   string
	constLabels prometheus.Labels
	buckets     []float64
}

// WithOperation sets the "operation" label of every metric; default
// "default", the default flightcache.Options.Name. It must be a constant
// such as the cache's name, never derived from a key.
func WithOperation(name string) Option {
	return func(c *config) { c.operation = name }
}

// WithNamespace prefixes every metric name with ns + "_". The shipped Grafana
// dashboard assumes no namespace.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithConstLabels adds constant labels (say, region) to every metric. They
// must have bounded values and must not be named operation, result, reason,
// tier, outcome, to, event or kind.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = l }
}

// WithBuckets replaces DefaultBuckets for both duration histograms.
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = b }
}

// Metrics is a Prometheus adapter for one operation. It is safe for
// concurrent use; its methods never block and never allocate.
type Metrics struct {
	// Every field is set in New and read-only afterwards.
	requests         prometheus.Counter
	rejections       [metriclabels.NumReasons]prometheus.Counter
	flightsStarted   prometheus.Counter
	shared           prometheus.Counter
	flightsSucceeded prometheus.Counter
	flightsFailed    prometheus.Counter
	panics           prometheus.Counter
	timeouts         prometheus.Counter
	abandoned        prometheus.Counter
	lateResults      prometheus.Counter
	inFlight         prometheus.Gauge
	waiterDuration   [metriclabels.NumResults]*durationCounts
	flightDuration   [metriclabels.NumResults]*durationCounts

	// Origin calls (driver.EventOriginCall), by metriclabels.OriginResult.
	originCalls    [metriclabels.NumOriginResults]prometheus.Counter
	originDuration [metriclabels.NumOriginResults]*durationCounts

	hits           [len(metriclabels.TierNames)]prometheus.Counter
	misses         [len(metriclabels.TierNames)]prometheus.Counter
	negativeHits   [len(metriclabels.TierNames)]prometheus.Counter
	writeFailures  [len(metriclabels.TierNames)]prometheus.Counter
	readFailures   [len(metriclabels.TierNames)]prometheus.Counter
	staleServed    prometheus.Counter
	earlyRefreshes prometheus.Counter
	throttled      prometheus.Counter
	gets           [metriclabels.NumOutcomes]prometheus.Counter
	getDuration    *durationCounts
	filtered       prometheus.Counter
	breakerState   prometheus.Gauge
	breakerChanges [len(metriclabels.BreakerStateNames)]prometheus.Counter

	leaseEvents  [metriclabels.NumLeaseEvents]prometheus.Counter
	fencedWrites prometheus.Counter
	followerWait [metriclabels.NumFollowerResults]*durationCounts
	degraded     prometheus.Gauge
	scopeChanges [len(metriclabels.ScopeNames)]prometheus.Counter

	invalidationsSent     [len(metriclabels.InvalidationKindNames)][metriclabels.NumPublishResults]prometheus.Counter
	invalidationsReceived [len(metriclabels.InvalidationKindNames)]prometheus.Counter
	invalidationsApplied  [len(metriclabels.InvalidationKindNames)]prometheus.Counter
	invalidationsIgnored  [len(metriclabels.InvalidationKindNames)]prometheus.Counter
	lastReceived          prometheus.Gauge
	busState              prometheus.Gauge
	busDisconnects        prometheus.Counter
	bus                   metriclabels.BusTracker
}

var (
	_ singleflight.Observer = (*Metrics)(nil)
	_ driver.Observer       = (*Metrics)(nil)
)

// New creates the metrics and registers them with reg. It returns an error
// when reg is nil or refuses a collector (a name clash, or a Metrics with the
// same operation already registered); then nothing stays registered.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	cfg := config{operation: "default", buckets: DefaultBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.operation == "" {
		return nil, errors.New("promflight: empty operation name")
	}
	if err := validateBuckets(cfg.buckets); err != nil {
		return nil, err
	}
	constLabels := prometheus.Labels{"operation": cfg.operation}
	for k, v := range cfg.constLabels {
		if _, dup := constLabels[k]; dup {
			return nil, fmt.Errorf("promflight: const label %q clashes with a label of the adapter", k)
		}
		constLabels[k] = v
	}

	b := builder{cfg: cfg, labels: constLabels}
	m := &Metrics{
		requests:         b.counter("single_flight", "requests_total", "Calls that reached the single-flight engine, before admission (rejected ones included); in a Cache, the Gets that missed every tier."),
		flightsStarted:   b.counter("single_flight", "flights_started_total", "Flights started: executions of the engine's function, one per key however many calls share it. In a Cache a flight may end without an origin call (value found on the re-check, failure throttle, another instance's load): origin calls are flightcache_origin_calls_total."),
		shared:           b.counter("single_flight", "waiter_shared_total", "Calls that joined a flight already in flight instead of starting one."),
		flightsSucceeded: b.counter("single_flight", "flights_succeeded_total", "Flights whose function returned a nil error."),
		flightsFailed:    b.counter("single_flight", "flights_failed_total", "Flights whose function returned an error (panics apart). In a Cache this includes flights the failure throttle answered and failed waits for another instance: origin failures are flightcache_origin_calls_total{result=\"error\"}."),
		panics:           b.counter("single_flight", "flights_panicked_total", "Flights whose function panicked or called runtime.Goexit."),
		timeouts:         b.counter("single_flight", "flights_timed_out_total", "Flights whose callers were released by the engine's hard timeout before the function returned."),
		abandoned:        b.counter("single_flight", "flights_abandoned_total", "Flights cancelled because every caller left."),
		lateResults:      b.counter("single_flight", "flight_late_results_total", "Flight results dropped because a timeout, Close or abandonment completed the flight first."),
		inFlight:         b.gauge("single_flight", "in_flight", "Keys with a flight under way."),
		staleServed:      b.counter("flightcache", "stale_served_total", "Gets answered with a stale value because the load failed or was slow (fail-safe)."),
		earlyRefreshes:   b.counter("flightcache", "early_refreshes_total", "Background early refreshes started."),
		throttled:        b.counter("flightcache", "throttled_total", "Flights (one per key) the failure throttle answered with the key's recent origin error instead of calling the origin."),
		filtered:         b.counter("flightcache", "filtered_total", "Gets the Guard answered \"cannot exist\" without a load."),
		breakerState:     b.gauge("flightcache", "shared_breaker_state", "State of the shared tier's circuit breaker: 0 closed, 1 half-open, 2 open."),
		fencedWrites:     b.counter("flightcache", "cluster_fenced_writes_rejected_total", "Write-backs refused by the fencing token: a newer lease, Set or Delete superseded the load."),
		degraded:         b.gauge("flightcache", "cluster_degraded", "1 while cluster coalescing has degraded to process-local because the coordinator failed, else 0."),
		lastReceived:     b.gauge("flightcache", "invalidation_last_received_timestamp_seconds", "Unix time at which the last invalidation from another instance arrived; 0 before the first."),
		busState:         b.gauge("flightcache", "bus_state", "State of the invalidation bus subscription: 0 none (no Bus), 1 down, 2 up."),
		busDisconnects:   b.counter("flightcache", "bus_disconnects_total", "Changes of the invalidation bus subscription from up to down: invalidations may have been missed."),
	}
	rejections := b.counterVec("single_flight", "rejections_total", "Calls refused by admission without starting or joining a flight, by reason.", "reason")
	for i, r := range metriclabels.ReasonNames {
		m.rejections[i] = rejections.WithLabelValues(r)
	}
	m.getDuration = b.histogram("flightcache", "get_duration_seconds", "Duration of a Get, whatever served it.", "", nil)[0]
	waiter := b.histogram("single_flight", "waiter_duration_seconds", "How long each call waited for its result, leader included, by result.", "result", metriclabels.ResultNames[:])
	flight := b.histogram("single_flight", "flight_duration_seconds", "How long each flight ran, by result (timeout: the configured timeout); in a Cache it includes re-checks and waits for another instance, the origin's own latency is flightcache_origin_call_duration_seconds.", "result", metriclabels.ResultNames[:])
	copy(m.waiterDuration[:], waiter)
	copy(m.flightDuration[:], flight)
	origin := b.counterVec("flightcache", "origin_calls_total", "Calls of the origin (a LoadFunc or BatchLoadFunc returned), by result, whoever made them (flight, early refresh, batch); throttled flights and waits for another instance are not origin calls.", "result")
	for i, r := range metriclabels.OriginResultNames {
		m.originCalls[i] = origin.WithLabelValues(r)
	}
	copy(m.originDuration[:], b.histogram("flightcache", "origin_call_duration_seconds", "How long each origin call ran, by result.", "result", metriclabels.OriginResultNames[:]))
	hits := b.counterVec("flightcache", "hits_total", "Fresh values found, by tier.", "tier")
	misses := b.counterVec("flightcache", "misses_total", "Lookups that found no fresh value, by tier.", "tier")
	negative := b.counterVec("flightcache", "negative_hits_total", "Cached \"not found\" answers, by tier.", "tier")
	writes := b.counterVec("flightcache", "write_failures_total", "Failed write-backs to a tier (the Get still succeeded), by tier.", "tier")
	reads := b.counterVec("flightcache", "read_failures_total", "Failed reads of a tier, served as misses, by tier.", "tier")
	for i, t := range metriclabels.TierNames {
		m.hits[i] = hits.WithLabelValues(t)
		m.misses[i] = misses.WithLabelValues(t)
		m.negativeHits[i] = negative.WithLabelValues(t)
		m.writeFailures[i] = writes.WithLabelValues(t)
		m.readFailures[i] = reads.WithLabelValues(t)
	}
	changes := b.counterVec("flightcache", "shared_breaker_transitions_total", "State changes of the shared tier's circuit breaker, by new state.", "to")
	for i, st := range metriclabels.BreakerStateNames {
		m.breakerChanges[i] = changes.WithLabelValues(st)
	}
	leases := b.counterVec("flightcache", "cluster_leases_total", "Cluster lease events: acquired, taken_over (after an expiry without result), lost (while loading).", "event")
	for i, e := range metriclabels.LeaseEventNames {
		m.leaseEvents[i] = leases.WithLabelValues(e)
	}
	copy(m.followerWait[:], b.histogram("flightcache", "cluster_follower_wait_seconds", "Remote waits: how long this instance waited for another instance's load of a key (no origin call of its own), by how the wait ended (woken: the result arrived).", "result", metriclabels.FollowerResultNames[:]))
	scopes := b.counterVec("flightcache", "cluster_scope_changes_total", "Changes of the coalescing scope, by new scope (local: degraded, cluster: recovered).", "to")
	for i, s := range metriclabels.ScopeNames {
		m.scopeChanges[i] = scopes.WithLabelValues(s)
	}
	sent := b.counterVec2("flightcache", "invalidations_sent_total", "Invalidations this instance published to the others, by kind and result (error: not published).", "kind", "result")
	received := b.counterVec("flightcache", "invalidations_received_total", "Invalidations received from other instances, by kind.", "kind")
	applied := b.counterVec("flightcache", "invalidations_applied_total", "Received invalidations applied (the older local copies they cover dropped), by kind.", "kind")
	ignored := b.counterVec("flightcache", "invalidations_ignored_total", "Received invalidations ignored as stale (late, duplicate or out of order: no newer than what was applied or held), by kind.", "kind")
	for i, k := range metriclabels.InvalidationKindNames {
		for j, r := range metriclabels.PublishResultNames {
			m.invalidationsSent[i][j] = sent.WithLabelValues(k, r)
		}
		m.invalidationsReceived[i] = received.WithLabelValues(k)
		m.invalidationsApplied[i] = applied.WithLabelValues(k)
		m.invalidationsIgnored[i] = ignored.WithLabelValues(k)
	}
	gets := b.counterVec("flightcache", "gets_total", "Finished Gets, by outcome.", "outcome")
	for i := range m.gets {
		m.gets[i] = gets.WithLabelValues(flightcache.Outcome(i).String())
	}

	for i, c := range b.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range b.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("promflight: register metrics of operation %q: %w", cfg.operation, err)
		}
	}
	return m, nil
}

// builder creates collectors with the shared options and remembers them for
// registration.
type builder struct {
	cfg        config
	labels     prometheus.Labels
	collectors []prometheus.Collector
}

func (b *builder) opts(subsystem, name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: b.cfg.namespace, Subsystem: subsystem, Name: name, Help: help, ConstLabels: b.labels}
}

func (b *builder) counter(subsystem, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts(b.opts(subsystem, name, help)))
	b.collectors = append(b.collectors, c)
	return c
}

func (b *builder) counterVec(subsystem, name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts(b.opts(subsystem, name, help)), []string{label})
	b.collectors = append(b.collectors, c)
	return c
}

func (b *builder) counterVec2(subsystem, name, help, label1, label2 string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts(b.opts(subsystem, name, help)), []string{label1, label2})
	b.collectors = append(b.collectors, c)
	return c
}

func (b *builder) gauge(subsystem, name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts(b.opts(subsystem, name, help)))
	b.collectors = append(b.collectors, g)
	return g
}

// histogram creates a duration histogram with one child per value of label
// (one child when label is empty) and returns the children in order.
func (b *builder) histogram(subsystem, name, help, label string, values []string) []*durationCounts {
	h := newDurationHistogram(prometheus.BuildFQName(b.cfg.namespace, subsystem, name), help, b.labels, b.cfg.buckets, label, values)
	b.collectors = append(b.collectors, h)
	return h.children
}

// ObserveFlight records an engine event.
func (m *Metrics) ObserveFlight(e singleflight.Event) {
	switch e.Kind {
	case singleflight.EventRequest:
		m.requests.Inc()
	case singleflight.EventRejected:
		m.rejections[metriclabels.RejectReason(e.Err)].Inc()
	case singleflight.EventLoaderStarted:
		m.flightsStarted.Inc()
	case singleflight.EventShared:
		m.shared.Inc()
	case singleflight.EventLoaderSucceeded:
		m.flightsSucceeded.Inc()
		m.flightDuration[metriclabels.ResultSuccess].observe(e.Duration)
	case singleflight.EventLoaderFailed:
		m.flightsFailed.Inc()
		m.flightDuration[metriclabels.ResultError].observe(e.Duration)
	case singleflight.EventLoaderPanicked:
		m.panics.Inc()
		m.flightDuration[metriclabels.ResultPanic].observe(e.Duration)
	case singleflight.EventTimeout:
		m.timeouts.Inc()
		m.flightDuration[metriclabels.ResultTimeout].observe(e.Duration)
	case singleflight.EventAbandoned:
		m.abandoned.Inc()
	case singleflight.EventLateResult:
		m.lateResults.Inc()
	case singleflight.EventInFlight:
		m.inFlight.Add(float64(e.InFlightDelta))
	case singleflight.EventWaitDone:
		m.waiterDuration[metriclabels.ResultOf(e.Err)].observe(e.Duration)
	}
}

// ObserveCache records a cache event.
func (m *Metrics) ObserveCache(e driver.Event) {
	t := metriclabels.TierIndex(e.Tier)
	switch e.Kind {
	case driver.EventHit:
		m.hits[t].Inc()
	case driver.EventMiss:
		m.misses[t].Inc()
	case driver.EventNegativeHit:
		m.negativeHits[t].Inc()
	case driver.EventStaleServed:
		m.staleServed.Inc()
	case driver.EventEarlyRefresh:
		m.earlyRefreshes.Inc()
	case driver.EventWriteFailed:
		m.writeFailures[t].Inc()
	case driver.EventReadFailed:
		m.readFailures[t].Inc()
	case driver.EventThrottled:
		m.throttled.Inc()
	case driver.EventOriginCall:
		r := metriclabels.OriginResult(e.Err)
		m.originCalls[r].Inc()
		m.originDuration[r].observe(e.Duration)
	case driver.EventFiltered:
		m.filtered.Inc()
	case driver.EventBreakerChanged:
		st := metriclabels.BreakerStateIndex(e.Breaker)
		m.breakerState.Set(float64(st))
		m.breakerChanges[st].Inc()
	case driver.EventLeaseAcquired, driver.EventLeaseTakenOver, driver.EventLeaseLost:
		i, _ := metriclabels.LeaseEvent(e.Kind)
		m.leaseEvents[i].Inc()
	case driver.EventFencedWriteRejected:
		m.fencedWrites.Inc()
	case driver.EventFollowerWoken:
		m.followerWait[metriclabels.FollowerResult(e.Err)].observe(e.Duration)
	case driver.EventScopeChanged:
		s := metriclabels.ScopeIndex(e.Scope)
		m.scopeChanges[s].Inc()
		if e.Scope == flightcache.ScopeLocal {
			m.degraded.Set(1)
		} else {
			m.degraded.Set(0)
		}
	case driver.EventInvalidationSent:
		m.invalidationsSent[metriclabels.InvalidationKindIndex(e.Invalidation)][metriclabels.PublishResult(e.Err)].Inc()
	case driver.EventInvalidationReceived:
		m.invalidationsReceived[metriclabels.InvalidationKindIndex(e.Invalidation)].Inc()
		m.lastReceived.Set(float64(time.Now().UnixNano()) / 1e9)
	case driver.EventInvalidationApplied:
		m.invalidationsApplied[metriclabels.InvalidationKindIndex(e.Invalidation)].Inc()
	case driver.EventInvalidationIgnored:
		m.invalidationsIgnored[metriclabels.InvalidationKindIndex(e.Invalidation)].Inc()
	case driver.EventBusChanged:
		m.busState.Set(float64(metriclabels.BusStateIndex(e.Bus)))
		if m.bus.Changed(e.Bus) {
			m.busDisconnects.Inc()
		}
	case driver.EventGet:
		if o := int(e.Outcome); o < metriclabels.NumOutcomes {
			m.gets[o].Inc()
		} else {
			m.gets[flightcache.OutcomeUnknown].Inc()
		}
		m.getDuration.observe(e.Duration)
	}
}
