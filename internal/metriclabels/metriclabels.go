// Package metriclabels is the bounded label vocabulary shared by the metric
// adapters (promflight, otelflight): the values of the "result", "reason" and
// "tier" labels, and how an event maps to them. Keeping one copy keeps the
// Prometheus and OpenTelemetry series identical, and keeps every label value
// in a fixed, small set: nothing here is ever derived from a key.
package metriclabels

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// Values of the "result" label, indexing ResultNames.
const (
	ResultSuccess = iota
	ResultError
	ResultPanic
	ResultTimeout
	NumResults
)

// ResultNames are the "result" label values.
var ResultNames = [NumResults]string{"success", "error", "panic", "timeout"}

// Values of the "reason" label of rejections, indexing ReasonNames.
const (
	ReasonTooManyInFlight = iota
	ReasonTooManyWaiters
	ReasonClosed
	ReasonNilFunc
	ReasonOther
	NumReasons
)

// ReasonNames are the "reason" label values.
var ReasonNames = [NumReasons]string{"too_many_in_flight", "too_many_waiters", "closed", "nil_func", "other"}

// TierNames are the "tier" label values, indexed by driver.Tier.
// TierNone is never the tier of a per-tier event, but is kept so that an
// unexpected one is still counted rather than dropped.
var TierNames = [...]string{driver.TierNone: "none", driver.TierLocal: "local", driver.TierShared: "shared"}

// NumOutcomes is the number of flightcache.Outcome values, for arrays
// indexed by Outcome.
const NumOutcomes = driver.NumOutcomes

// BreakerStateNames are the "to" label values of breaker transitions,
// indexed by driver.BreakerState. The state gauge uses the index itself
// (0 closed, 1 half-open, 2 open), so that "open" is the largest value and
// max_over_time shows whether the breaker opened at all in a window.
var BreakerStateNames = [...]string{
	driver.BreakerClosed:   driver.BreakerClosed.String(),
	driver.BreakerHalfOpen: driver.BreakerHalfOpen.String(),
	driver.BreakerOpen:     driver.BreakerOpen.String(),
}

// BreakerStateIndex returns s's index in BreakerStateNames. An unknown state
// is counted as open: a breaker whose state cannot be named is not letting
// calls through as far as an operator can tell.
func BreakerStateIndex(s driver.BreakerState) int {
	if int(s) < len(BreakerStateNames) {
		return int(s)
	}
	return int(driver.BreakerOpen)
}

// TierIndex returns t's index in TierNames, mapping unknown tiers to TierNone.
func TierIndex(t driver.Tier) int {
	if int(t) < len(TierNames) {
		return int(t)
	}
	return int(driver.TierNone)
}

// RejectReason maps an admission error to its reason. The engine reports its
// sentinels unwrapped; errors.Is is the safety net for a wrapped one.
func RejectReason(err error) int {
	switch {
	case errors.Is(err, singleflight.ErrTooManyInFlight):
		return ReasonTooManyInFlight
	case errors.Is(err, singleflight.ErrTooManyWaiters):
		return ReasonTooManyWaiters
	case errors.Is(err, singleflight.ErrClosed):
		return ReasonClosed
	case errors.Is(err, singleflight.ErrNilFunc):
		return ReasonNilFunc
	}
	return ReasonOther
}

// ResultOf classifies a caller's or a loader's error into a result. A
// waiter's own deadline counts as a timeout like the loader timeout: either
// way the caller waited as long as it was willing to.
func ResultOf(err error) int {
	if err == nil {
		return ResultSuccess
	}
	var pe *singleflight.PanicError
	switch {
	case errors.As(err, &pe):
		return ResultPanic
	case errors.Is(err, context.DeadlineExceeded):
		return ResultTimeout
	}
	return ResultError
}

// Values of the "result" label of origin calls, indexing
// OriginResultNames.
const (
	OriginSuccess = iota
	OriginNotFound
	OriginError
	OriginTimeout
	OriginPanic
	NumOriginResults
)

// OriginResultNames are the "result" label values of origin calls
// (driver.EventOriginCall): the loader returned a value, said "not found"
// (an answer, cached like a value), failed, ran out of time (its error
// matches context.DeadlineExceeded), or panicked.
var OriginResultNames = [NumOriginResults]string{"success", "not_found", "error", "timeout", "panic"}

// OriginResult classifies the Err of an EventOriginCall.
func OriginResult(err error) int {
	if err == nil {
		return OriginSuccess
	}
	var pe *singleflight.PanicError
	switch {
	case errors.As(err, &pe):
		return OriginPanic
	case errors.Is(err, flightcache.ErrNotFound):
		return OriginNotFound
	case errors.Is(err, context.DeadlineExceeded):
		return OriginTimeout
	}
	return OriginError
}

// Values of the "event" label of cluster lease events, indexing
// LeaseEventNames.
const (
	LeaseAcquired = iota
	LeaseTakenOver
	LeaseLost
	NumLeaseEvents
)

// LeaseEventNames are the "event" label values of cluster lease events.
var LeaseEventNames = [NumLeaseEvents]string{"acquired", "taken_over", "lost"}

// LeaseEvent maps a cache event kind to its lease event, ok false for a
// kind that is not one.
func LeaseEvent(k driver.EventKind) (int, bool) {
	switch k {
	case driver.EventLeaseAcquired:
		return LeaseAcquired, true
	case driver.EventLeaseTakenOver:
		return LeaseTakenOver, true
	case driver.EventLeaseLost:
		return LeaseLost, true
	}
	return 0, false
}

// Values of the "result" label of a follower's wait, indexing
// FollowerResultNames.
const (
	FollowerWoken = iota
	FollowerLeaderFailed
	FollowerTimeout
	FollowerOther
	NumFollowerResults
)

// FollowerResultNames are the "result" label values of a follower's wait:
// woken by the leader's completion, by its failure, or given up.
var FollowerResultNames = [NumFollowerResults]string{"woken", "leader_failed", "timeout", "other"}

// FollowerResult classifies the Err of an EventFollowerWoken.
func FollowerResult(err error) int {
	switch {
	case err == nil:
		return FollowerWoken
	case errors.Is(err, flightcache.ErrLeaderFailed):
		return FollowerLeaderFailed
	case errors.Is(err, flightcache.ErrCoalesceTimeout):
		return FollowerTimeout
	}
	return FollowerOther
}

// ScopeNames are the "to" label values of scope changes, indexed by
// flightcache.Scope.
var ScopeNames = [...]string{
	flightcache.ScopeNone:    flightcache.ScopeNone.String(),
	flightcache.ScopeLocal:   flightcache.ScopeLocal.String(),
	flightcache.ScopeCluster: flightcache.ScopeCluster.String(),
}

// ScopeIndex returns s's index in ScopeNames, mapping unknown scopes to
// ScopeNone.
func ScopeIndex(s flightcache.Scope) int {
	if int(s) < len(ScopeNames) {
		return int(s)
	}
	return int(flightcache.ScopeNone)
}

// InvalidationKindNames are the "kind" label values of cross-instance
// invalidations, indexed by driver.InvalidationKind. Index 0 is no
// kind the Cache reports, but is kept so that an unexpected one is still
// counted rather than dropped.
var InvalidationKindNames = [...]string{
	0:                            driver.InvalidationKind(0).String(),
	driver.InvalidationKey:       driver.InvalidationKey.String(),
	driver.InvalidationPrefix:    driver.InvalidationPrefix.String(),
	driver.InvalidationAll:       driver.InvalidationAll.String(),
	driver.InvalidationTag:       driver.InvalidationTag.String(),
	driver.InvalidationTagExpire: driver.InvalidationTagExpire.String(),
}

// InvalidationKindIndex returns k's index in InvalidationKindNames,
// mapping unknown kinds to 0.
func InvalidationKindIndex(k driver.InvalidationKind) int {
	if int(k) < len(InvalidationKindNames) {
		return int(k)
	}
	return 0
}

// Values of the "result" label of sent invalidations, indexing
// PublishResultNames: the values of ResultNames that apply to a publish.
const (
	PublishSuccess = iota
	PublishError
	NumPublishResults
)

// PublishResultNames are the "result" label values of sent invalidations.
var PublishResultNames = [NumPublishResults]string{ResultNames[ResultSuccess], ResultNames[ResultError]}

// PublishResult classifies the Err of an EventInvalidationSent.
func PublishResult(err error) int {
	if err != nil {
		return PublishError
	}
	return PublishSuccess
}

// BusStateNames name the states of a Cache's Bus subscription, indexed by
// driver.BusState. The state gauge uses the index itself (0 none,
// 1 down, 2 up): a Cache without a Bus reads 0 rather than "down".
var BusStateNames = [...]string{
	driver.BusNone: driver.BusNone.String(),
	driver.BusDown: driver.BusDown.String(),
	driver.BusUp:   driver.BusUp.String(),
}

// BusStateIndex returns s's index in BusStateNames. An unknown state counts
// as down: a subscription whose state cannot be named is not known to
// work.
func BusStateIndex(s driver.BusState) int {
	if int(s) < len(BusStateNames) {
		return int(s)
	}
	return int(driver.BusDown)
}

// BusTracker turns EventBusChanged events into disconnects: a change to
// down counts as one only after the subscription was up, so the first
// report of a Bus that has not connected yet is not a disconnect, and a
// repeated report of down is not another one. The zero value is ready
// (state none). It is safe for concurrent use.
type BusTracker struct {
	last atomic.Uint32 // the last BusStateIndex reported
}

// Changed records the new state s and reports whether it is a disconnect.
func (t *BusTracker) Changed(s driver.BusState) (disconnect bool) {
	i := BusStateIndex(s)
	prev := t.last.Swap(uint32(i))
	return i == int(driver.BusDown) && prev == uint32(driver.BusUp)
}
