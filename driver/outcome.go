package driver

// Outcome says how a Get was served. Every Get has exactly one.
type Outcome uint8

// The outcomes of a Get.
const (
	// OutcomeUnknown is the zero value; a returned Result never has it.
	OutcomeUnknown Outcome = iota
	// OutcomeHitLocal: a fresh value from the in-process tier.
	OutcomeHitLocal
	// OutcomeHitShared: a fresh value from the shared tier (it was copied
	// into the local tier on the way).
	OutcomeHitShared
	// OutcomeLoaded: this caller ran the loader and the write-back succeeded.
	OutcomeLoaded
	// OutcomeCoalesced: this caller shared a load that another caller ran, or
	// found the value in the double-check inside the flight.
	OutcomeCoalesced
	// OutcomeLoadedWriteFailed: the load succeeded and the value is returned,
	// but writing it back to a tier failed (see Result.WriteErr).
	OutcomeLoadedWriteFailed
	// OutcomeLoadFailed: the load failed (or was rejected or throttled) and no
	// stale value could stand in; Get returns the error.
	OutcomeLoadFailed
	// OutcomeNegativeHit: a cached "not found"; Get returns ErrNotFound.
	OutcomeNegativeHit
	// OutcomeStale: a value past its TTL, served because the load failed or
	// did not finish within the soft timeout (fail-safe).
	OutcomeStale
	// OutcomeRefreshed: a fresh hit that also started a background early
	// refresh of the entry.
	OutcomeRefreshed
	// OutcomeFiltered: the Guard said the key cannot exist; Get returns
	// ErrNotFound without reading the shared tier or calling the origin.
	OutcomeFiltered
	// OutcomeLoadedUncached: this caller ran the loader and the value is
	// returned, but it was stored in no tier, by design: in cluster mode
	// another instance held the key's lease past CoalesceWait, and its
	// fenced write is the one that should land; or a newer write
	// superseded the load (an explicit write or an invalidation of the
	// key since the load began, another instance's newer fenced write
	// whose value could not be served, newer data already served here).
	OutcomeLoadedUncached
	// OutcomeCallerLeft: the caller left before its answer was ready (its
	// ctx was cancelled or passed its deadline, while it waited for a load
	// or before one started); Get returns ctx.Err(). It is not a failure:
	// a load the caller waited for goes on for the others and fills the
	// tiers. A loader's own error never is this outcome, even one that
	// matches context.Canceled: only the caller's ctx.Err() itself, with
	// that ctx ended, is (see flightcache.Result).
	OutcomeCallerLeft

	// numOutcomes counts the outcomes; keep it last.
	numOutcomes
)

// NumOutcomes is the number of Outcome values, OutcomeUnknown included, for
// arrays indexed by Outcome.
const NumOutcomes = int(numOutcomes)

var outcomeNames = [...]string{
	OutcomeUnknown:           "unknown",
	OutcomeHitLocal:          "hit_local",
	OutcomeHitShared:         "hit_shared",
	OutcomeLoaded:            "loaded",
	OutcomeCoalesced:         "coalesced",
	OutcomeLoadedWriteFailed: "loaded_write_failed",
	OutcomeLoadFailed:        "load_failed",
	OutcomeNegativeHit:       "negative_hit",
	OutcomeStale:             "stale",
	OutcomeRefreshed:         "refreshed",
	OutcomeFiltered:          "filtered",
	OutcomeLoadedUncached:    "loaded_uncached",
	OutcomeCallerLeft:        "caller_left",
}

// String returns a short, stable, lower-case name, usable as a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Hit reports whether the value came from a tier without waiting for a load.
func (o Outcome) Hit() bool {
	return o == OutcomeHitLocal || o == OutcomeHitShared || o == OutcomeRefreshed
}

// Scope is how far coalescing reaches.
type Scope uint8

// The scopes.
const (
	// ScopeNone: no load was involved (a Result from a tier, a stale value,
	// a failure).
	ScopeNone Scope = iota
	// ScopeLocal: within this process. As Result.Scope: the value came from
	// a load run in this process, by this caller or a caller it shared with.
	ScopeLocal
	// ScopeCluster: across instances, through the Coordinator. As
	// Result.Scope: the value came from a load another instance ran, handed
	// over through the Coordinator and the shared tier.
	ScopeCluster
)

// String returns "none", "local" or "cluster", usable as a metric label.
func (s Scope) String() string {
	switch s {
	case ScopeLocal:
		return "local"
	case ScopeCluster:
		return "cluster"
	}
	return "none"
}
