package driver

import (
	"context"
	"time"
)

// Tier names a cache tier in events and metrics.
type Tier uint8

// The tiers.
const (
	TierNone   Tier = iota // not tied to a tier
	TierLocal              // the in-process LocalStore
	TierShared             // the SharedStore (Redis)
)

// String returns "local", "shared" or "none".
func (t Tier) String() string {
	switch t {
	case TierLocal:
		return "local"
	case TierShared:
		return "shared"
	}
	return "none"
}

// EventKind says what happened in a Cache.
type EventKind uint8

// The events a Cache reports. Engine-level events (requests, loader
// executions, shared waiters, rejections, timeouts, panics) come from the
// single-flight engine through singleflight.Observer instead.
const (
	// EventHit: a fresh value was found in Tier.
	EventHit EventKind = iota + 1
	// EventMiss: Tier had no usable fresh value.
	EventMiss
	// EventNegativeHit: a tombstone was found in Tier.
	EventNegativeHit
	// EventStaleServed: a stale value was served (fail-safe). Err is why the
	// fresh load did not deliver.
	EventStaleServed
	// EventEarlyRefresh: a background early refresh started.
	EventEarlyRefresh
	// EventWriteFailed: writing to Tier failed (Err). The Get still
	// succeeded. Err matches ErrBreakerOpen for a write the SharedBreaker
	// skipped, and context.DeadlineExceeded for one that outlasted
	// SharedTimeout (or was skipped after this Get's read did).
	EventWriteFailed
	// EventReadFailed: reading Tier failed (Err); it counted as a miss. Err
	// matches ErrBreakerOpen for a read the SharedBreaker skipped.
	EventReadFailed
	// EventThrottled: the failure throttle answered with a recent error
	// instead of calling the origin.
	EventThrottled
	// EventGet: a Get finished. Outcome and Duration are set; Err is its error.
	EventGet
	// EventBreakerChanged: the SharedBreaker moved to Breaker (its new
	// state). Tier is TierShared.
	EventBreakerChanged
	// EventFiltered: the Guard turned a key away.
	EventFiltered
	// EventUnrequestedKey: a BatchLoadFunc returned keys it was not asked
	// for. They were ignored (never stored, never served).
	EventUnrequestedKey
	// EventLeaseAcquired: this instance took a key's cluster lease and
	// loads it for the cluster.
	EventLeaseAcquired
	// EventLeaseTakenOver: this instance took over a key's cluster lease
	// that expired without a result (its holder crashed or stalled).
	EventLeaseTakenOver
	// EventLeaseLost: a lease could not be extended while its load ran
	// (taken over, or the Coordinator unreachable for the lease's TTL).
	EventLeaseLost
	// EventFencedWriteRejected: a load's write-back was refused because a
	// newer lease, Set or Delete of the key superseded it.
	EventFencedWriteRejected
	// EventFollowerWoken: this instance stopped waiting for another
	// instance's load. Duration is how long it waited; Err is nil when the
	// load completed, else why it stopped (ErrLeaderFailed,
	// ErrCoalesceTimeout).
	EventFollowerWoken
	// EventScopeChanged: the Cache's coalescing scope moved to Scope
	// (ScopeLocal when the Coordinator failed, with Err; ScopeCluster when
	// it answered again).
	EventScopeChanged
	// EventInvalidationSent: this Cache published an Invalidation of kind
	// Invalidation on its Bus; Err is the failure, if it was not
	// published.
	EventInvalidationSent
	// EventInvalidationReceived: an Invalidation of kind Invalidation
	// arrived from another instance. Each is then either applied or
	// ignored.
	EventInvalidationReceived
	// EventInvalidationApplied: a received Invalidation was applied: the
	// local copies it covers that are older than its write are gone.
	EventInvalidationApplied
	// EventInvalidationIgnored: a received Invalidation was older than
	// (or the same as) one already applied to its target, or than the
	// value held: it arrived late, twice or out of order, and changed
	// nothing.
	EventInvalidationIgnored
	// EventBusChanged: the Bus subscription moved to Bus (its new state).
	// A move to BusUp after BusDown comes with the resynchronisation of
	// the local tier.
	EventBusChanged
	// EventOriginCall: the origin was called: a LoadFunc or a
	// BatchLoadFunc returned, once per call whoever made it (a Get's
	// flight, an early refresh, a batch of keys, a follower that gave up
	// waiting). Duration is how long it ran; Err is what it returned
	// (matching ErrNotFound for a "not found" answer), or a
	// *singleflight.PanicError when it panicked or called runtime.Goexit.
	// A flight that ends without calling the origin (the double-check
	// found a value, the failure throttle answered, another instance
	// loaded the key) reports none.
	EventOriginCall
)

var eventKindNames = [...]string{
	EventHit:                  "hit",
	EventMiss:                 "miss",
	EventNegativeHit:          "negative_hit",
	EventStaleServed:          "stale_served",
	EventEarlyRefresh:         "early_refresh",
	EventWriteFailed:          "write_failed",
	EventReadFailed:           "read_failed",
	EventThrottled:            "throttled",
	EventGet:                  "get",
	EventBreakerChanged:       "breaker_changed",
	EventFiltered:             "filtered",
	EventUnrequestedKey:       "unrequested_key",
	EventLeaseAcquired:        "lease_acquired",
	EventLeaseTakenOver:       "lease_taken_over",
	EventLeaseLost:            "lease_lost",
	EventFencedWriteRejected:  "fenced_write_rejected",
	EventFollowerWoken:        "follower_woken",
	EventScopeChanged:         "scope_changed",
	EventInvalidationSent:     "invalidation_sent",
	EventInvalidationReceived: "invalidation_received",
	EventInvalidationApplied:  "invalidation_applied",
	EventInvalidationIgnored:  "invalidation_ignored",
	EventBusChanged:           "bus_changed",
	EventOriginCall:           "origin_call",
}

// String returns a short, stable, lower-case name usable as a metric label.
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// Event describes one thing that happened in a Cache. Like
// singleflight.Event it carries no key, so it can never leak one into a
// metric label.
type Event struct {
	Kind     EventKind
	Ctx      context.Context // the caller's context; may be nil for background work
	Cache    string          // Options.Name
	Tier     Tier
	Outcome  Outcome       // on EventGet
	Duration time.Duration // on EventGet, EventFollowerWoken and EventOriginCall
	Err      error
	// Breaker is the new state, on EventBreakerChanged.
	Breaker BreakerState
	// Scope is the new scope, on EventScopeChanged.
	Scope Scope
	// Invalidation is the kind of invalidation, on the EventInvalidation
	// events.
	Invalidation InvalidationKind
	// Bus is the new state, on EventBusChanged.
	Bus BusState
}

// Observer receives a Cache's events. It is called synchronously on the hot
// path, from many goroutines (callers', flights', refreshes'): it must be
// fast, safe for concurrent use, and must not call back into the Cache. A
// panic in it loses that event and is logged (rate-limited); it is never
// re-raised, since it may happen in a goroutine no caller can recover in.
//
// If the Observer also implements singleflight.Observer, the Cache wires it
// into its engine too, so one adapter sees both layers.
type Observer interface {
	ObserveCache(Event)
}

// Tracer wraps the read path in spans without the core importing a tracing
// library (package otelflight adapts OpenTelemetry). A nil Tracer costs one
// nil check.
type Tracer interface {
	// StartGet is called when a Get starts. It returns the context to use for
	// the rest of the Get and a function called once when the Get ends.
	StartGet(ctx context.Context, cache string) (context.Context, func(SpanInfo))
	// StartLoad is called in the flight, right before the loader runs, with
	// the loader's context. It returns the context given to the loader and a
	// function called once with the loader's error.
	StartLoad(ctx context.Context, cache string) (context.Context, func(error))
}

// SpanInfo is what a Tracer learns when a Get ends.
type SpanInfo struct {
	Outcome Outcome
	// Led is true when this caller ran the load itself.
	Led bool
	// LoadCtx is the context StartLoad returned for the load this caller led
	// or shared (nil when there was no load), so waiters can link to the
	// leader's span.
	LoadCtx context.Context
	Err     error
}

type batchMembersKey struct{}

// WithBatchMembers returns ctx carrying members: the contexts of the
// flights whose keys share one batched origin call. A Batcher puts them on
// the context of the call, which belongs to none of them, so that a loader
// or a tracer can link the call's span to each member's.
func WithBatchMembers(ctx context.Context, members []context.Context) context.Context {
	return context.WithValue(ctx, batchMembersKey{}, members)
}

// BatchMembers returns the member contexts WithBatchMembers put on ctx, nil
// when ctx is not a batched call's. The slice must not be modified.
func BatchMembers(ctx context.Context) []context.Context {
	m, _ := ctx.Value(batchMembersKey{}).([]context.Context)
	return m
}
