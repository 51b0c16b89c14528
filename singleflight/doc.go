// Package singleflight collapses concurrent calls for the same key into one
// execution whose result every caller shares: when a thousand requests miss
// the cache for one hot key at once, the origin sees one query.
//
// It is a generic, context-aware successor to
// golang.org/x/sync/singleflight that also closes the failure modes users
// keep hitting with it:
//
//   - One caller's cancellation never fails the others. Each caller waits on
//     its own context; the loader runs under a context that keeps the
//     leader's values (trace IDs) but not its cancellation.
//   - A panic or runtime.Goexit in the loader reaches every waiter as an
//     error (*PanicError for a panic) instead of hanging them or crashing the
//     process from a goroutine nobody can recover in.
//   - A hung loader cannot hold its key hostage: WithLoaderTimeout releases
//     the waiters and frees the key at the deadline.
//   - An old execution never removes a newer one (Forget is safe).
//   - Memory is bounded against hostile key cardinality and hot keys:
//     WithMaxInFlight and WithMaxWaiters reject at once, before running fn.
//     WithMaxInFlight counts every loader until it returns, even one that
//     outlived its timeout, so a hung origin cannot pile up goroutines.
//   - A call made from inside a loader for its own key runs directly instead
//     of deadlocking on itself.
//   - Close cancels running loaders (cause ErrClosed) at shutdown.
//
// What the registry holds is unfinished work, never results: an entry is
// removed as soon as its execution ends, whatever the outcome, so a failure
// is shared by the callers that were waiting for it and by nobody after.
// Caching completed values, TTLs and stale policies are the job of the layer
// above (package flightcache).
//
// Values handed to several callers are the same value: treat them as
// immutable, or copy them at the call site.
//
// # Cost
//
// When the caller's context can never be cancelled and no loader timeout is
// set, the loader runs in the caller's goroutine with a single allocation, as
// in x/sync. Otherwise it runs in its own goroutine so that every caller,
// the leader included, can leave when its own context ends. Keys are spread
// over independently locked shards; no lock is held while a loader runs. An
// Observer sees every event (see EventKind) for metrics and tracing; without
// one the engine pays a nil check. See docs/PERFORMANCE.md for numbers.
package singleflight
