package driver

import (
	"context"
	"errors"
	"iter"
	"time"
)

// Meta is the timing and negative-caching state stored next to every value,
// in both tiers. Invariant: FreshUntil <= StaleUntil.
type Meta struct {
	// FreshUntil is when the value stops being fresh. A hit before it is
	// served as is (possibly triggering an early refresh).
	FreshUntil time.Time
	// StaleUntil is when the value must no longer be served at all. Between
	// FreshUntil and StaleUntil it is served only as a fail-safe fallback.
	StaleUntil time.Time
	// LoadDuration is how long the load that produced the value took (Δ in
	// XFetch); early refresh starts earlier for values that are slow to load.
	LoadDuration time.Duration
	// NotFound marks a tombstone: the origin said the value does not exist.
	NotFound bool
	// LoadedAt is when the value was loaded or Set; Result.Age is measured
	// from it. A store that does not keep it leaves it zero, and the age of
	// its values is then reported as unknown (0).
	LoadedAt time.Time
	// Version is the wall-clock instant the value's data was read from its
	// origin (the start of the load, the instant of the Set), in both tiers
	// whatever clock the Cache runs on; zero when unknown. Every coherence
	// decision compares it: an invalidation drops the copies whose Version
	// is older than its own, a shared entry older than what this instance
	// already served or wrote is absent. The Cache writes entries whose
	// Version is LoadedAt − LoadDuration, so a SharedStore need not keep
	// it: the Cache derives it from those two when a store returns it
	// zero. A LocalStore keeps it as given.
	Version time.Time
	// Tags are the value's tags (flightcache.SetTags, WithTags): an
	// invalidation of one of them (InvalidateTag, ExpireTag) covers the
	// value if its data was read before it. Stores keep them as given and
	// never modify the slice, which values loaded together share. nil for
	// an untagged value.
	Tags []string
}

// Item is what the local, typed tier stores.
type Item[V any] struct {
	Value V
	Meta
	// FilledAt is when the Cache put the item in its local tier, on its
	// clock (zero when unknown): while the Bus is down, local items are
	// trusted for Options.BusDownTTL from then. The Cache sets it; a
	// LocalStore keeps it as given.
	FilledAt time.Time
}

// Entry is what the shared byte tier stores: the codec's encoding of a value
// (nil for a tombstone) and its Meta.
type Entry struct {
	Value []byte
	Meta
}

// LocalStore is the in-process tier. It holds typed values, so a hit costs no
// decoding. Implementations must be safe for concurrent use, must bound their
// memory, and should drop an item once its StaleUntil has passed. Package
// memstore provides one on otter.
type LocalStore[V any] interface {
	// Get returns the item stored under key, if any. The Item is shared,
	// not a copy: the caller must not modify it, and the store must not
	// modify it after handing it out (Set replaces the pointer instead).
	// Returning a pointer keeps a hit from copying the ~100-byte Item
	// through every layer.
	Get(key string) (*Item[V], bool)
	// Set stores it under key, replacing any previous item.
	Set(key string, it Item[V])
	// Delete removes key; removing a missing key is not an error.
	Delete(key string)
}

// LocalStoreAt is a LocalStore whose lookup takes the time from its caller.
// A Cache whose local tier implements it reads its clock (Options.Now) once
// per local hit, before the lookup, and hands that reading to GetAt: the
// tier and the Cache then decide on one reading whether the item is still
// there, and a hit reads the clock once instead of twice (on virtual
// machines a precise clock read costs as much as the rest of a hit).
// memstore.Store implements it. A LocalStore without it keeps working: the
// Cache then calls Get, and the store reads its own clock.
type LocalStoreAt[V any] interface {
	LocalStore[V]
	// GetAt is Get as of now: it returns the item stored under key unless
	// the item's StaleUntil is not after now. now is a reading of the
	// caller's clock, which may differ from the store's (a test's
	// Options.Now); the store judges by now alone and does not read a
	// precise clock of its own on this path. It may still drop items by
	// its own clock in the background, as Get may, but not before their
	// StaleUntil on that clock. The Item is shared, as with Get.
	GetAt(key string, now time.Time) (*Item[V], bool)
}

// SharedStore is the tier shared by every instance of a service (Redis in
// package redisstore). Errors are expected: the Cache treats a failed read as
// a miss and a failed write as a best-effort failure, never as a failed Get.
// Implementations must be safe for concurrent use, and must return when
// ctx ends: the Cache bounds every call with Options.SharedTimeout through
// ctx and has no other way to stop a call. An error about one entry
// rather than the tier (corrupt, another key's, too large) should match
// ErrEntryRejected, so that the SharedBreaker does not count it.
//
// The times in an Entry's Meta are wall-clock times (time.Now), whatever
// clock the Cache runs on (Options.Now), so that every process sharing the
// tier reads them the same way. The Cache caps what it reads back: an entry
// is never fresh beyond MaxTTL from now, nor stale beyond the Cache's
// StaleFor after that.
type SharedStore interface {
	// Get returns the entry stored under key. A missing key is (Entry{}, false, nil).
	Get(ctx context.Context, key string) (Entry, bool, error)
	// Set stores e under key until e.StaleUntil.
	Set(ctx context.Context, key string, e Entry) error
	// Delete removes key; removing a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// KeyLimiter is implemented by a store that cannot hold keys beyond a length
// (redisstore: its prefix counts against Redis key length). New checks that
// MaxKeyLen fits every configured tier that implements it.
type KeyLimiter interface {
	// MaxKeyLen is the longest key, in bytes, the store accepts.
	MaxKeyLen() int
}

// BreakerState is the state of a SharedBreaker.
type BreakerState uint8

// The states of a circuit breaker.
const (
	// BreakerClosed: calls go through.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: a few probe calls go through to test the tier.
	BreakerHalfOpen
	// BreakerOpen: calls are refused without touching the tier.
	BreakerOpen
)

// String returns "closed", "half_open" or "open", usable as a metric label.
func (s BreakerState) String() string {
	switch s {
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	}
	return "closed"
}

// SharedBreaker is a circuit breaker in front of the shared tier: after a run
// of failures or timeouts it keeps calls away from the tier for a cool-down,
// then lets probes through (half-open). While it is open a shared read is a
// miss that costs nothing, so a sick Redis cannot slow every request down.
// Package breaker provides one on github.com/sony/gobreaker/v2. It must be
// safe for concurrent use; one breaker may serve several Caches that share a
// store.
type SharedBreaker interface {
	// Allow asks to make one call to the shared tier. It returns an error
	// matching ErrBreakerOpen when the call must not be made, or else a
	// function that must be called exactly once with the call's outcome:
	// failed true for an error or a timeout of the tier (not for a miss,
	// and not when the caller itself left).
	Allow() (done func(failed bool), err error)
	// State returns the breaker's current state.
	State() BreakerState
}

// LocalRanger is a LocalStore that can visit its items. Bulk invalidation
// (InvalidatePrefix, Clear, an Invalidation of another instance) and the
// resynchronisation after the Bus was down visit the local tier with it,
// so New requires it of Local when Options.Bus is set, and
// InvalidatePrefix and Clear return an error matching errors.ErrUnsupported
// without it. memstore.Store implements it.
type LocalRanger[V any] interface {
	// All yields every item stored, in no particular order. The Items are
	// shared, as with Get. Deleting keys while iterating must be allowed.
	All() iter.Seq2[string, *Item[V]]
}

// BatchSharedStore is a SharedStore that reads and writes many keys per
// round trip. A Cache whose shared tier implements it serves a batch
// (GetMany, FetchMany) with one GetMany for all the keys the local tier
// missed and one SetMany per loader call for the write-back, instead of a
// round trip per key. Package redisstore implements it (a pipeline of
// bounded reads, one per node on a Redis Cluster).
//
// The contract per key is SharedStore's: a missing key, or one past its
// StaleUntil, is not found; errors are expected and count as misses or as
// best-effort write failures.
type BatchSharedStore interface {
	SharedStore
	// GetMany reads keys. The result is aligned with keys. err is a
	// failure of the whole read (every key then counts as a miss); a
	// failure of one key, such as a corrupt entry, is that key's
	// Lookup.Err and leaves the other keys alone.
	GetMany(ctx context.Context, keys []string) ([]Lookup, error)
	// SetMany stores entries[i] under keys[i], each until its StaleUntil,
	// in as few round trips as the store allows. It returns nil when
	// every write succeeded, else a slice aligned with keys whose non-nil
	// elements are the writes that failed.
	SetMany(ctx context.Context, keys []string, entries []Entry) []error
}

// Lookup is one key's answer from BatchSharedStore.GetMany.
type Lookup struct {
	Entry Entry
	Found bool
	// Err is this key's failure (Found is then false).
	Err error
}

// ErrBreakerOpen is what a SharedBreaker returns (possibly wrapped) from
// Allow while it keeps calls away from the shared tier. The Cache treats the
// tier as a miss without logging a failure for it.
var ErrBreakerOpen = errors.New("flightcache: shared tier skipped: circuit breaker open")

// ErrEntryRejected is matched (errors.Is) by the errors of a shared store
// that could not use one entry: corrupt, bound to another key, too large.
// Such an error says nothing about the tier's health: the Cache treats it as
// a miss (read) or a failed write-back of that key, never as a failure of
// the tier for its SharedBreaker. A SharedStore's entry-level errors should
// match it.
var ErrEntryRejected = errors.New("flightcache: shared tier rejected the entry")
