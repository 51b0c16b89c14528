// Package flightstats counts the events of a single-flight engine and of a
// flightcache.Cache with atomic counters, for programs that have no metrics
// stack: a Recorder is an observer for both layers, and Snapshot gives the
// totals and the derived ratios with their exact formulas.
//
//	stats := flightstats.New()
//	c, _ := flightcache.New(flightcache.Options[*Product]{Name: "product", Local: local, Observer: stats})
//	…
//	s := stats.Snapshot()
//	log.Printf("requests per origin call %.1f, suppression %.1f%%", s.RequestsPerOriginCall(), 100*s.SuppressionRatio())
package flightstats

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// Stats is a snapshot of a Recorder's counters. Every count is a total since
// the Recorder was created, except InFlight.
type Stats struct {
	// Engine. A flight is one execution of the engine's function for a
	// key, however many calls share it. In a Cache a flight re-checks the
	// tiers, consults the failure throttle and may wait for another
	// instance before it calls the origin, if it does: origin calls are
	// OriginCalls. For a bare singleflight.Group the flights are the
	// origin calls.
	Requests         uint64 // calls that reached the engine, rejected ones included
	FlightsStarted   uint64 // flights started
	Shared           uint64 // calls that joined a flight in flight
	FlightsSucceeded uint64 // flights whose function returned a nil error
	FlightsFailed    uint64 // flights whose function returned an error (throttled answers and failed remote waits included)
	FlightsPanicked  uint64 // flights whose function panicked or called runtime.Goexit
	Timeouts         uint64 // flights ended by the engine's hard timeout
	Abandoned        uint64 // flights cancelled because every caller left
	LateResults      uint64 // flight results dropped after a timeout, Close or abandonment
	Rejected         Rejections
	InFlight         int // keys in flight at the last change

	// Deprecated: LoaderStarted counts flights, not origin calls; it
	// equals FlightsStarted. Use FlightsStarted, or OriginCalls.
	LoaderStarted uint64
	// Deprecated: LoaderSucceeded equals FlightsSucceeded.
	LoaderSucceeded uint64
	// Deprecated: LoaderFailed counts failed flights (throttled answers
	// and failed remote waits included), not origin failures; it equals
	// FlightsFailed. Use FlightsFailed, or OriginFailures.
	LoaderFailed uint64
	// Deprecated: LoaderPanicked equals FlightsPanicked.
	LoaderPanicked uint64

	// Origin calls (driver.EventOriginCall): calls of a LoadFunc or a
	// BatchLoadFunc, whoever made them (a flight, an early refresh, a
	// batch). A flight that found a value on its re-check, that the
	// failure throttle answered (Throttled) or that waited for another
	// instance (FollowerWaits) made none.
	OriginCalls     uint64        // every call, whatever it returned
	OriginNotFound  uint64        // calls that answered "not found" (flightcache.ErrNotFound)
	OriginFailures  uint64        // calls that returned another error, timed out or panicked
	OriginCallTotal time.Duration // summed duration of OriginCalls

	// Cache.
	Gets           uint64 // finished Gets
	LocalHits      uint64
	LocalMisses    uint64
	SharedHits     uint64
	SharedMisses   uint64
	NegativeHits   uint64
	StaleServed    uint64
	EarlyRefreshes uint64
	WriteFailures  uint64
	ReadFailures   uint64
	Throttled      uint64 // flights the failure throttle answered instead of calling the origin
	Filtered       uint64 // Gets the Guard turned away without a load
	// CallersLeft counts Gets whose caller left (its ctx ended) before
	// the answer was ready (OutcomeCallerLeft): not failures, and the
	// load they waited for goes on for the others.
	CallersLeft uint64

	// Breaker is the shared tier's circuit breaker state at its last change
	// (closed until the first).
	Breaker driver.BreakerState
	// BreakerTransitions counts the breaker's changes by new state.
	BreakerTransitions BreakerTransitions

	// Cluster coalescing.
	LeasesAcquired       uint64        // loads this instance led for the cluster
	LeasesTakenOver      uint64        // leases taken over after an expiry without result
	LeasesLost           uint64        // leases that could not be extended while loading
	FencedWritesRejected uint64        // write-backs refused by the fencing token
	FollowersWoken       uint64        // remote waits (for another instance's load) that ended with its result
	FollowerWaits        uint64        // remote waits, however they ended; never origin calls
	FollowerWaitTotal    time.Duration // summed duration of FollowerWaits
	ScopeChanges         uint64        // changes of the coalescing scope
	// Degraded is true when the last scope change was to process-local.
	Degraded bool

	// Cross-instance invalidation (flightcache.Options.Bus), by kind.
	InvalidationsSent       InvalidationCounts // published to the other instances
	InvalidationsSendFailed InvalidationCounts // not published: the write took effect on this instance only
	InvalidationsReceived   InvalidationCounts // from other instances; each then applied or ignored
	InvalidationsApplied    InvalidationCounts // received and applied: older local copies dropped
	InvalidationsIgnored    InvalidationCounts // received late, twice or out of order: changed nothing
	// LastInvalidationReceived is when the last invalidation from another
	// instance arrived, by this process's clock; zero before the first.
	// time.Since of it is how long the Bus has been silent.
	LastInvalidationReceived time.Time
	// Bus is the state of the Bus subscription at its last change
	// (BusNone until the first).
	Bus driver.BusState
	// BusDisconnects counts changes of the Bus subscription from up to
	// down, after which invalidations may have been missed. The report of
	// a Bus that has not connected yet, or a repeated report of down, is
	// not one.
	BusDisconnects uint64
}

// InvalidationCounts counts invalidations by driver.InvalidationKind.
type InvalidationCounts struct {
	Key    uint64 // driver.InvalidationKey
	Prefix uint64 // driver.InvalidationPrefix
	All    uint64 // driver.InvalidationAll
	// Tag counts InvalidationTag, TagExpire InvalidationTagExpire.
	Tag, TagExpire uint64
	Other          uint64 // a kind this package does not know; the Cache reports none
}

// Total is the sum over every kind.
func (c InvalidationCounts) Total() uint64 {
	return c.Key + c.Prefix + c.All + c.Tag + c.TagExpire + c.Other
}

// BreakerTransitions counts circuit breaker state changes by new state.
type BreakerTransitions struct {
	ToClosed   uint64 // recoveries: a probe succeeded
	ToHalfOpen uint64 // cool-downs that ended with a probe
	ToOpen     uint64 // trips, first ones and failed probes alike
}

// Rejections counts admission refusals by reason.
type Rejections struct {
	TooManyInFlight uint64
	TooManyWaiters  uint64
	Closed          uint64
	NilFunc         uint64
	Other           uint64
}

// Total is the sum over every reason.
func (r Rejections) Total() uint64 {
	return r.TooManyInFlight + r.TooManyWaiters + r.Closed + r.NilFunc + r.Other
}

// RequestsPerFlight is requests / flights started: how many calls one
// flight served on average (20 means 1,000 requests started 50 flights).
// It is 0 before the first flight, when the ratio is undefined.
func (s Stats) RequestsPerFlight() float64 {
	if s.FlightsStarted == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.FlightsStarted)
}

// RequestsPerLoader is RequestsPerFlight.
//
// Deprecated: it divides by flights, not origin calls. Use
// RequestsPerFlight, or RequestsPerOriginCall.
func (s Stats) RequestsPerLoader() float64 { return s.RequestsPerFlight() }

// RequestsPerOriginCall is requests / origin calls: how many calls that
// reached the engine one origin call served on average. It is 0 before
// the first origin call. It is only meaningful for a Cache (a bare
// singleflight.Group reports no origin calls: use RequestsPerFlight).
func (s Stats) RequestsPerOriginCall() float64 {
	if s.OriginCalls == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.OriginCalls)
}

// SuppressionRatio is 1 − flights started / requests: the fraction of
// requests that joined another caller's flight instead of starting one
// (0.95 means 95% did). For a bare singleflight.Group that is the
// fraction that did not call the origin; a Cache's flights may call it
// less (see OriginCalls). It is 0 before the first request.
func (s Stats) SuppressionRatio() float64 {
	if s.Requests == 0 {
		return 0
	}
	return 1 - float64(s.FlightsStarted)/float64(s.Requests)
}

// HitRatio is hits / (hits + misses) of tier: the fraction of lookups in
// that tier that found a fresh value. It is 0 before the first lookup.
func (s Stats) HitRatio(tier driver.Tier) float64 {
	var hits, misses uint64
	switch tier {
	case driver.TierLocal:
		hits, misses = s.LocalHits, s.LocalMisses
	case driver.TierShared:
		hits, misses = s.SharedHits, s.SharedMisses
	}
	if hits+misses == 0 {
		return 0
	}
	return float64(hits) / float64(hits+misses)
}

// Recorder counts events. It implements singleflight.Observer and
// driver.Observer, is safe for concurrent use, and costs one atomic
// addition per event (and a clock read per invalidation received). The
// zero value is ready to use.
type Recorder struct {
	requests, loaderStarted, shared                  atomic.Uint64
	loaderSucceeded, loaderFailed, loaderPanicked    atomic.Uint64
	timeouts, abandoned, lateResults                 atomic.Uint64
	tooManyInFlight, tooManyWaiters, closed, nilFunc atomic.Uint64
	otherRejections                                  atomic.Uint64
	inFlight                                         atomic.Int64

	originCalls, originNotFound, originFailures atomic.Uint64
	originNanos                                 atomic.Int64

	gets, localHits, localMisses, sharedHits, sharedMisses atomic.Uint64
	negativeHits, staleServed, earlyRefreshes              atomic.Uint64
	writeFailures, readFailures, throttled, filtered       atomic.Uint64
	callersLeft                                            atomic.Uint64

	// breaker holds the last driver.BreakerState reported.
	breaker        atomic.Uint32
	breakerChanges [3]atomic.Uint64 // indexed by driver.BreakerState

	leasesAcquired, leasesTakenOver, leasesLost, fencedWrites atomic.Uint64
	followersWoken, followerWaits, scopeChanges               atomic.Uint64
	followerWaitNanos                                         atomic.Int64
	degraded                                                  atomic.Bool

	// Invalidations by kind (index: driver.InvalidationKind, 0 for an
	// unknown one).
	invSent, invSendFailed, invReceived invalidationCounters
	invApplied, invIgnored              invalidationCounters
	lastReceivedNanos                   atomic.Int64  // Unix nanoseconds; 0 before the first
	bus                                 atomic.Uint32 // the last driver.BusState reported
	busDisconnects                      atomic.Uint64
}

type invalidationCounters [driver.InvalidationTagExpire + 1]atomic.Uint64

func (c *invalidationCounters) add(k driver.InvalidationKind) {
	if int(k) >= len(c) {
		k = 0
	}
	c[k].Add(1)
}

func (c *invalidationCounters) load() InvalidationCounts {
	return InvalidationCounts{
		Key:       c[driver.InvalidationKey].Load(),
		Prefix:    c[driver.InvalidationPrefix].Load(),
		All:       c[driver.InvalidationAll].Load(),
		Tag:       c[driver.InvalidationTag].Load(),
		TagExpire: c[driver.InvalidationTagExpire].Load(),
		Other:     c[0].Load(),
	}
}

var (
	_ singleflight.Observer = (*Recorder)(nil)
	_ driver.Observer       = (*Recorder)(nil)
)

// New returns an empty Recorder.
func New() *Recorder { return new(Recorder) }

// ObserveFlight counts an engine event.
func (r *Recorder) ObserveFlight(e singleflight.Event) {
	switch e.Kind {
	case singleflight.EventRequest:
		r.requests.Add(1)
	case singleflight.EventRejected:
		switch {
		case errors.Is(e.Err, singleflight.ErrTooManyInFlight):
			r.tooManyInFlight.Add(1)
		case errors.Is(e.Err, singleflight.ErrTooManyWaiters):
			r.tooManyWaiters.Add(1)
		case errors.Is(e.Err, singleflight.ErrClosed):
			r.closed.Add(1)
		case errors.Is(e.Err, singleflight.ErrNilFunc):
			r.nilFunc.Add(1)
		default:
			r.otherRejections.Add(1)
		}
	case singleflight.EventLoaderStarted:
		r.loaderStarted.Add(1)
	case singleflight.EventShared:
		r.shared.Add(1)
	case singleflight.EventLoaderSucceeded:
		r.loaderSucceeded.Add(1)
	case singleflight.EventLoaderFailed:
		r.loaderFailed.Add(1)
	case singleflight.EventLoaderPanicked:
		r.loaderPanicked.Add(1)
	case singleflight.EventTimeout:
		r.timeouts.Add(1)
	case singleflight.EventAbandoned:
		r.abandoned.Add(1)
	case singleflight.EventLateResult:
		r.lateResults.Add(1)
	case singleflight.EventInFlight:
		r.inFlight.Add(int64(e.InFlightDelta))
	}
}

// ObserveCache counts a cache event.
func (r *Recorder) ObserveCache(e driver.Event) {
	switch e.Kind {
	case driver.EventHit:
		perTier(e.Tier, &r.localHits, &r.sharedHits)
	case driver.EventMiss:
		perTier(e.Tier, &r.localMisses, &r.sharedMisses)
	case driver.EventNegativeHit:
		r.negativeHits.Add(1)
	case driver.EventStaleServed:
		r.staleServed.Add(1)
	case driver.EventEarlyRefresh:
		r.earlyRefreshes.Add(1)
	case driver.EventWriteFailed:
		r.writeFailures.Add(1)
	case driver.EventReadFailed:
		r.readFailures.Add(1)
	case driver.EventThrottled:
		r.throttled.Add(1)
	case driver.EventOriginCall:
		r.originCalls.Add(1)
		r.originNanos.Add(int64(e.Duration))
		switch {
		case e.Err == nil:
		case errors.Is(e.Err, flightcache.ErrNotFound):
			r.originNotFound.Add(1)
		default:
			r.originFailures.Add(1)
		}
	case driver.EventFiltered:
		r.filtered.Add(1)
	case driver.EventBreakerChanged:
		r.breaker.Store(uint32(e.Breaker))
		if int(e.Breaker) < len(r.breakerChanges) {
			r.breakerChanges[e.Breaker].Add(1)
		}
	case driver.EventLeaseAcquired:
		r.leasesAcquired.Add(1)
	case driver.EventLeaseTakenOver:
		r.leasesTakenOver.Add(1)
	case driver.EventLeaseLost:
		r.leasesLost.Add(1)
	case driver.EventFencedWriteRejected:
		r.fencedWrites.Add(1)
	case driver.EventFollowerWoken:
		if e.Err == nil {
			r.followersWoken.Add(1)
		}
		r.followerWaits.Add(1)
		r.followerWaitNanos.Add(int64(e.Duration))
	case driver.EventScopeChanged:
		r.scopeChanges.Add(1)
		r.degraded.Store(e.Scope == flightcache.ScopeLocal)
	case driver.EventInvalidationSent:
		if e.Err != nil {
			r.invSendFailed.add(e.Invalidation)
		} else {
			r.invSent.add(e.Invalidation)
		}
	case driver.EventInvalidationReceived:
		r.invReceived.add(e.Invalidation)
		r.lastReceivedNanos.Store(time.Now().UnixNano())
	case driver.EventInvalidationApplied:
		r.invApplied.add(e.Invalidation)
	case driver.EventInvalidationIgnored:
		r.invIgnored.add(e.Invalidation)
	case driver.EventBusChanged:
		prev := driver.BusState(r.bus.Swap(uint32(e.Bus)))
		if prev == driver.BusUp && e.Bus != driver.BusUp && e.Bus != driver.BusNone {
			r.busDisconnects.Add(1)
		}
	case driver.EventGet:
		r.gets.Add(1)
		if e.Outcome == driver.OutcomeCallerLeft {
			r.callersLeft.Add(1)
		}
	}
}

func perTier(t driver.Tier, local, shared *atomic.Uint64) {
	switch t {
	case driver.TierLocal:
		local.Add(1)
	case driver.TierShared:
		shared.Add(1)
	}
}

// Snapshot reads every counter. The counters are read one by one while
// events may still arrive, so under load two fields can be a few events
// apart; each field on its own is exact.
func (r *Recorder) Snapshot() Stats {
	s := Stats{
		Requests:         r.requests.Load(),
		FlightsStarted:   r.loaderStarted.Load(),
		Shared:           r.shared.Load(),
		FlightsSucceeded: r.loaderSucceeded.Load(),
		FlightsFailed:    r.loaderFailed.Load(),
		FlightsPanicked:  r.loaderPanicked.Load(),
		OriginCalls:      r.originCalls.Load(),
		OriginNotFound:   r.originNotFound.Load(),
		OriginFailures:   r.originFailures.Load(),
		OriginCallTotal:  time.Duration(r.originNanos.Load()),
		Timeouts:         r.timeouts.Load(),
		Abandoned:        r.abandoned.Load(),
		LateResults:      r.lateResults.Load(),
		Rejected: Rejections{
			TooManyInFlight: r.tooManyInFlight.Load(),
			TooManyWaiters:  r.tooManyWaiters.Load(),
			Closed:          r.closed.Load(),
			NilFunc:         r.nilFunc.Load(),
			Other:           r.otherRejections.Load(),
		},
		InFlight:       int(r.inFlight.Load()),
		Gets:           r.gets.Load(),
		LocalHits:      r.localHits.Load(),
		LocalMisses:    r.localMisses.Load(),
		SharedHits:     r.sharedHits.Load(),
		SharedMisses:   r.sharedMisses.Load(),
		NegativeHits:   r.negativeHits.Load(),
		StaleServed:    r.staleServed.Load(),
		EarlyRefreshes: r.earlyRefreshes.Load(),
		WriteFailures:  r.writeFailures.Load(),
		ReadFailures:   r.readFailures.Load(),
		Throttled:      r.throttled.Load(),
		Filtered:       r.filtered.Load(),
		CallersLeft:    r.callersLeft.Load(),
		Breaker:        driver.BreakerState(r.breaker.Load()),
		BreakerTransitions: BreakerTransitions{
			ToClosed:   r.breakerChanges[driver.BreakerClosed].Load(),
			ToHalfOpen: r.breakerChanges[driver.BreakerHalfOpen].Load(),
			ToOpen:     r.breakerChanges[driver.BreakerOpen].Load(),
		},
		LeasesAcquired:       r.leasesAcquired.Load(),
		LeasesTakenOver:      r.leasesTakenOver.Load(),
		LeasesLost:           r.leasesLost.Load(),
		FencedWritesRejected: r.fencedWrites.Load(),
		FollowersWoken:       r.followersWoken.Load(),
		FollowerWaits:        r.followerWaits.Load(),
		FollowerWaitTotal:    time.Duration(r.followerWaitNanos.Load()),
		ScopeChanges:         r.scopeChanges.Load(),
		Degraded:             r.degraded.Load(),

		InvalidationsSent:        r.invSent.load(),
		InvalidationsSendFailed:  r.invSendFailed.load(),
		InvalidationsReceived:    r.invReceived.load(),
		InvalidationsApplied:     r.invApplied.load(),
		InvalidationsIgnored:     r.invIgnored.load(),
		LastInvalidationReceived: r.lastReceived(),
		Bus:                      driver.BusState(r.bus.Load()),
		BusDisconnects:           r.busDisconnects.Load(),
	}
	s.LoaderStarted, s.LoaderSucceeded, s.LoaderFailed, s.LoaderPanicked = s.FlightsStarted, s.FlightsSucceeded, s.FlightsFailed, s.FlightsPanicked
	return s
}

func (r *Recorder) lastReceived() time.Time {
	if n := r.lastReceivedNanos.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}
