package httpapi

import (
	"context"
	"errors"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cachestatus"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/singleflight"
)

// CacheStatus renders the RFC 9211 Cache-Status header value for a product
// GET: the cache's name, then the parameters that apply, in the RFC's order
// (package cachestatus renders them; this function says which apply).
// err is the error Get returned with sv (nil on success).
//
//   - hit (RFC 9211 §2.1): served from the cache, nothing forwarded: a fresh
//     hit, a cached "not found", or a stale value served because the failure
//     throttle kept the request from the origin.
//   - fwd (§2.2): the request went to the origin. fwd=miss: no usable value
//     was cached; fwd=stale: only a stale value was cached, the origin was
//     asked and did not deliver, and the stale value was served.
//     fwd=uri-miss (no entry for the key at all) is never sent: a Result
//     does not tell an absent entry from an unusable one (expired, past
//     its stale window, untrusted while the bus is down, or unreadable in
//     Redis), so every forward without a usable value is fwd=miss, the
//     RFC's value for a cache that cannot tell. For the same reason a load
//     that succeeded while a stale value was cached is fwd=miss too.
//   - fwd-status (§2.3): only with fwd=stale, when the stale value stood in
//     for a failure of this process's load: the status productd answers
//     that failure with when it has no stale value (502 for an origin
//     error, 504 for a timeout, 500 for a loader panic; see classify). It
//     is left out when the origin has not answered (soft-timeout), when
//     another instance ran the load (cluster mode), and when the cause is
//     unknown. With every other fwd it is left out and defaults, per the
//     RFC, to the response's own status, which is then what the load came
//     to: 200, the 404 of a not-found, the error status of a failure.
//   - stored (§2.5): this request's load stored its value, in the memory
//     tier at least (detail=shared-write-failed: not in Redis).
//   - collapsed (§2.6): this request shared another request's load.
//   - ttl (§2.4): remaining freshness in whole seconds, rounded away from
//     zero: up for a fresh value, so that a client waiting ttl seconds is
//     sure to see it expired; down for a stale one, which is always
//     negative. Only when the value is cached.
//   - detail (§2.8): what the RFC has no parameter for (see below). With
//     collapsed, it says where the shared load ran: coalesced-local (in
//     this process) or coalesced-cluster (on another instance, in cluster
//     mode; the value arrived through Redis). Each detail is an RFC 8941
//     token.
//
// key (§2.7) is never sent: cache keys hold tenant and product IDs.
//
// A request turned away before anything was forwarded (overload, shutdown,
// an origin still throttled after a failure) carries neither hit nor fwd,
// only a detail: overloaded, shutting-down, origin-throttled, and in cluster
// mode leader-failed (the load failed on the instance that led it).
// A request whose client left before the answer was ready carries only
// detail=client-left.
//
//	flightcache; hit; ttl=42
//	flightcache; hit; ttl=42; detail=shared
//	flightcache; fwd=miss; stored; ttl=300
//	flightcache; fwd=miss; collapsed; ttl=300; detail=coalesced-local
//	flightcache; fwd=miss; collapsed; ttl=300; detail=coalesced-cluster
//	flightcache; fwd=miss; stored; ttl=300; detail=shared-write-failed
//	flightcache; hit; ttl=17; detail=not-found
//	flightcache; fwd=stale; fwd-status=502; ttl=-4; detail=origin-error
//	flightcache; fwd=stale; fwd-status=504; ttl=-4; detail=origin-error
//	flightcache; fwd=stale; ttl=-4; detail=soft-timeout
//	flightcache; hit; ttl=-4; detail=origin-throttled
//	flightcache; fwd=miss; detail=origin-timeout
//	flightcache; fwd=miss; detail=uncached
//	flightcache; detail=overloaded
//	flightcache; detail=leader-failed
//	flightcache; detail=client-left
func CacheStatus(cache string, sv product.Served, err error) string {
	e := cachestatus.Entry{Cache: cache, TTL: sv.TTL, HasTTL: sv.TTLKnown}
	switch sv.Outcome {
	case flightcache.OutcomeHitLocal:
		e.Hit = true
	case flightcache.OutcomeHitShared:
		e.Hit, e.Detail = true, "shared"
	case flightcache.OutcomeRefreshed:
		e.Hit, e.Detail = true, "early-refresh"
	case flightcache.OutcomeNegativeHit:
		e.Hit, e.Detail = true, "not-found"
	case flightcache.OutcomeFiltered:
		// The cache answered "not found" from its guard: nothing was
		// forwarded, but no stored response was reused either.
		e.Detail, e.HasTTL = "filtered", false
	case flightcache.OutcomeStale:
		var te *flightcache.ThrottledError
		switch {
		case errors.As(sv.StaleCause, &te):
			e.Hit, e.Detail = true, "origin-throttled"
		case errors.Is(sv.StaleCause, flightcache.ErrSoftTimeout):
			e.Fwd, e.Detail = cachestatus.FwdStale, "soft-timeout"
		default:
			e.Fwd, e.Detail = cachestatus.FwdStale, "origin-error"
			if code, ok := staleFwdStatus(sv.StaleCause); ok {
				e.FwdStatus = code
			}
		}
	case flightcache.OutcomeLoaded:
		e.Fwd, e.Stored = cachestatus.FwdMiss, true
		if err != nil { // a "not found", stored as a tombstone
			e.Detail = "not-found"
		}
	case flightcache.OutcomeCoalesced:
		e.Fwd, e.Collapsed = cachestatus.FwdMiss, true
		switch sv.Scope {
		case flightcache.ScopeLocal:
			e.Detail = "coalesced-local"
		case flightcache.ScopeCluster:
			e.Detail = "coalesced-cluster"
		}
	case flightcache.OutcomeLoadedUncached:
		// Forwarded, and stored nowhere: another instance held the
		// product's lease past the coalesce wait, and its write is the
		// one that lands, or a newer write superseded this load.
		e.Fwd, e.Detail, e.HasTTL = cachestatus.FwdMiss, "uncached", false
	case flightcache.OutcomeCallerLeft:
		// The client left before the answer was ready (productd answers
		// 499, which nobody reads); a load it started goes on.
		e.Detail, e.HasTTL = "client-left", false
	case flightcache.OutcomeLoadedWriteFailed:
		// Only the shared write failed: the memory tier, part of this
		// cache, holds the value for its TTL (§2.5 stored). The one case
		// where neither tier does, a value that cannot be encoded, does
		// not arise with product.Entry.
		e.Fwd, e.Stored, e.Detail = cachestatus.FwdMiss, true, "shared-write-failed"
	default: // OutcomeLoadFailed and anything new
		e.HasTTL = false
		var te *flightcache.ThrottledError
		switch {
		case errors.Is(err, singleflight.ErrTooManyInFlight), errors.Is(err, singleflight.ErrTooManyWaiters):
			e.Detail = "overloaded"
		case errors.Is(err, singleflight.ErrClosed):
			e.Detail = "shutting-down"
		case errors.As(err, &te):
			e.Detail = "origin-throttled"
		case errors.Is(err, flightcache.ErrLeaderFailed):
			// Cluster mode: the load failed on the instance that led it
			// (now, or within the failure window); this one forwarded
			// nothing.
			e.Detail = "leader-failed"
		case errors.Is(err, product.ErrNotFound): // uncached (naive mode)
			e.Fwd, e.Detail = cachestatus.FwdMiss, "not-found"
		case errors.Is(err, context.DeadlineExceeded):
			e.Fwd, e.Detail = cachestatus.FwdMiss, "origin-timeout"
		default:
			e.Fwd, e.Detail = cachestatus.FwdMiss, "origin-error"
		}
	}
	return e.String()
}

// staleFwdStatus is the fwd-status of a stale value served because of
// cause (Served.StaleCause): the status productd answers cause with when it
// has no stale value to serve, when cause is the failure of a load this
// process ran or shared. ok is false when there is no such status: the
// cause is unknown (nil), the origin has not answered yet (soft timeout),
// the load ran on another instance or was never started here (cluster
// mode's leader failure, coalesce timeout, unavailable coordinator), or
// nothing was forwarded (the failure throttle, an overload rejection,
// shutdown).
func staleFwdStatus(cause error) (code int, ok bool) {
	var te *flightcache.ThrottledError
	switch {
	case cause == nil,
		errors.Is(cause, flightcache.ErrSoftTimeout),
		errors.As(cause, &te),
		errors.Is(cause, flightcache.ErrLeaderFailed),
		errors.Is(cause, flightcache.ErrCoalesceTimeout),
		errors.Is(cause, flightcache.ErrCoordinatorUnavailable),
		errors.Is(cause, singleflight.ErrTooManyInFlight),
		errors.Is(cause, singleflight.ErrTooManyWaiters),
		errors.Is(cause, singleflight.ErrClosed):
		return 0, false
	}
	return classify(cause, 0).status, true
}
