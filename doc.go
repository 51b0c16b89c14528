// Package flightcache is a cache-aside read path that ends cache stampedes:
// when a hot key expires and a thousand requests miss at once, exactly one of
// them loads from the origin and all the others get that same result.
//
// A Cache[V] puts together what a correct cache-aside read needs, in this
// order:
//
//  1. Local tier. A fresh hit in the in-process LocalStore returns at once
//     (one lookup, one clock read, no allocation for pointer V). With
//     EarlyRefresh, a hit close to expiry may also start one background
//     refresh (XFetch), so a hot key never misses. A stale item is kept as
//     the fallback.
//  2. Shared tier. A fresh hit in the SharedStore (Redis) is decoded with the
//     Codec and copied into the local tier. Every shared call runs on its own
//     deadline (SharedTimeout) and, with a SharedBreaker, only while the
//     breaker lets it. A failure, a timeout, an open breaker or an
//     undecodable entry counts as a miss: it is reported (and, but for the
//     breaker, logged rate-limited), never returned.
//  3. Single-flight on the key. Concurrent misses of one key share one
//     flight (package singleflight); each caller can still leave on its own
//     context without disturbing the others.
//  4. Double-check. Inside the flight both tiers are read again: another
//     instance, or a flight that just ended, may have filled them.
//  5. Load. The LoadFunc runs under the loader timeout, with a context that
//     keeps the caller's values but not its cancellation. A recent failure
//     of the same key may answer instead (FailureThrottle), protecting a
//     sick origin from retry waves.
//  6. Write-back, best-effort, outside the loader timeout. A failed or slow
//     tier write never fails the Get: the value is returned with
//     OutcomeLoadedWriteFailed and Result.WriteErr.
//  7. Return, with the Outcome saying which path was taken.
//
// A shared tier that misbehaves costs a Get at most one SharedTimeout: a Get
// whose shared read timed out calls the tier no more (no double-check there,
// no write-back), and a breaker that has opened makes every shared call free
// until it probes again. Times in the shared tier are wall-clock times, so
// that instances agree on them whatever clock each Cache runs on.
//
// With StaleFor, values outlive their TTL so that a failed load, or one that
// outlasts SoftTimeout, can be answered with the previous value
// (OutcomeStale, fail-safe). A loader returning ErrNotFound caches a
// tombstone for NegativeTTL. With a Guard, a local miss first asks it
// whether the key may exist at all: a "no" answers ErrNotFound
// (OutcomeFiltered) without touching the shared tier or the origin, which
// turns away floods of made-up keys (package bloomguard). Set and Delete win over a load in flight for
// the same key: its late write-back is dropped, so it cannot resurrect an
// older value. Refresh reloads a key now through its flight while Gets go
// on being served the held value, and Peek reads the tiers as a Get would
// without ever loading.
//
// A caller whose context has already ended gets its error and starts
// nothing; after Close every call gets ErrClosed, and a load still running
// writes nothing. Panics in user code (a codec, a store, an Observer) never
// leave a key unusable, and never end the process from a goroutine the
// caller cannot recover in.
//
// # Batches
//
// GetMany and FetchMany read many keys with the same guarantees per key and
// the round trips shared: one local lookup per key, one
// BatchSharedStore.GetMany for every key the local tier missed, and one
// BatchLoadFunc call per chunk of Options.MaxBatchSize keys that no tier
// has. A key already loading, for a Get or another batch, is joined, never
// loaded twice.
//
// # Keys
//
// The key is the identity of the result: it must include every input that
// changes the value (tenant, locale, permission scope, ...), or one caller
// gets another's data. Package key builds canonical, injective keys. The
// Cache itself only checks that a key is non-empty, valid UTF-8 and at most
// MaxKeyLen bytes (which fits every tier), and never puts keys in its
// errors, logs or events.
//
// # Shared values
//
// A value handed to several callers (every hit, every coalesced load) is the
// same value: for pointer, slice and map types, treat it as immutable.
// Options.Clone gives each caller its own copy instead.
//
// # Scope
//
// Without a Coordinator, single-flight is per process: N instances may run
// up to N loads of one key at once, and the shared tier and the
// double-check make those loads rare, not impossible. With
// Options.Coordinator (package redislease) it spans the cluster: one
// instance loads the key under a fenced lease and the others wait for its
// result (cluster mode; see Coordinator). Batch reads stay per process.
//
// # Packages
//
// This package is for people who use a Cache. The contracts between a Cache
// and the parts plugged into it (LocalStore, SharedStore, Codec,
// Coordinator, Bus, Guard, SharedBreaker, Observer, Tracer) live in package
// driver, for people who implement one, as database/sql/driver does for
// database/sql. The backends implement them: memstore (local tier),
// redisstore (shared tier), redislease (Coordinator and Bus), bloomguard
// (Guard), breaker (SharedBreaker); promflight, otelflight and flightstats
// observe.
package flightcache
