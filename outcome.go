package flightcache

import "github.com/flightcache/flightcache/driver"

// Outcome says how a Get was served; every Result has exactly one. Its
// String is a short, stable label, and Hit reports a value served from a
// tier without waiting for a load. The type is defined in package driver,
// where the Observers that count outcomes see it too.
type Outcome = driver.Outcome

// The outcomes of a Get; see package driver for each one's meaning.
const (
	OutcomeUnknown           = driver.OutcomeUnknown
	OutcomeHitLocal          = driver.OutcomeHitLocal
	OutcomeHitShared         = driver.OutcomeHitShared
	OutcomeLoaded            = driver.OutcomeLoaded
	OutcomeCoalesced         = driver.OutcomeCoalesced
	OutcomeLoadedWriteFailed = driver.OutcomeLoadedWriteFailed
	OutcomeLoadFailed        = driver.OutcomeLoadFailed
	OutcomeNegativeHit       = driver.OutcomeNegativeHit
	OutcomeStale             = driver.OutcomeStale
	OutcomeRefreshed         = driver.OutcomeRefreshed
	OutcomeFiltered          = driver.OutcomeFiltered
	OutcomeLoadedUncached    = driver.OutcomeLoadedUncached
	OutcomeCallerLeft        = driver.OutcomeCallerLeft
)

// Scope is how far a load's coalescing reached (Result.Scope) or reaches
// (Cache.Scope): ScopeNone, ScopeLocal (this process) or ScopeCluster
// (every instance, through the Coordinator).
type Scope = driver.Scope

// The scopes; see package driver.
const (
	ScopeNone    = driver.ScopeNone
	ScopeLocal   = driver.ScopeLocal
	ScopeCluster = driver.ScopeCluster
)
