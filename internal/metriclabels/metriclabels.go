// Package metriclabels is the bounded label vocabulary shared by the metric
// adapters (promflight, otelflight): the values of the "result", "reason" and
// "tier" labels, and how an event maps to them. Keeping one copy keeps the
// Prometheus and OpenTelemetry series identical, and keeps every label value
// in a fixed, small set: nothing here is ever derived from a key.
package metriclabels

import (
	"context"
	"errors"

	"github.com/flightcache/flightcache"
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

// TierNames are the "tier" label values, indexed by flightcache.Tier.
// TierNone is never the tier of a per-tier event, but is kept so that an
// unexpected one is still counted rather than dropped.
var TierNames = [...]string{flightcache.TierNone: "none", flightcache.TierLocal: "local", flightcache.TierShared: "shared"}

// NumOutcomes is the number of flightcache.Outcome values, for arrays
// indexed by Outcome.
const NumOutcomes = flightcache.NumOutcomes

// BreakerStateNames are the "to" label values of breaker transitions,
// indexed by flightcache.BreakerState. The state gauge uses the index itself
// (0 closed, 1 half-open, 2 open), so that "open" is the largest value and
// max_over_time shows whether the breaker opened at all in a window.
var BreakerStateNames = [...]string{
	flightcache.BreakerClosed:   flightcache.BreakerClosed.String(),
	flightcache.BreakerHalfOpen: flightcache.BreakerHalfOpen.String(),
	flightcache.BreakerOpen:     flightcache.BreakerOpen.String(),
}

// BreakerStateIndex returns s's index in BreakerStateNames. An unknown state
// is counted as open: a breaker whose state cannot be named is not letting
// calls through as far as an operator can tell.
func BreakerStateIndex(s flightcache.BreakerState) int {
	if int(s) < len(BreakerStateNames) {
		return int(s)
	}
	return int(flightcache.BreakerOpen)
}

// TierIndex returns t's index in TierNames, mapping unknown tiers to TierNone.
func TierIndex(t flightcache.Tier) int {
	if int(t) < len(TierNames) {
		return int(t)
	}
	return int(flightcache.TierNone)
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
func LeaseEvent(k flightcache.EventKind) (int, bool) {
	switch k {
	case flightcache.EventLeaseAcquired:
		return LeaseAcquired, true
	case flightcache.EventLeaseTakenOver:
		return LeaseTakenOver, true
	case flightcache.EventLeaseLost:
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
