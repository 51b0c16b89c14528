// Package memstore is the in-process tier of flightcache: a bounded,
// concurrent map from key to flightcache.Item[V] on
// github.com/maypok86/otter/v2.
//
// Every item lives exactly until its own StaleUntil (otter's per-entry expiry
// calculator, not a fixed TTL): after that instant Get no longer returns it,
// even before otter's maintenance has physically removed it. Size is bounded
// either by entry count (MaxEntries) or by a caller-defined cost (Cost with
// MaxCost); otter's W-TinyLFU policy picks the victims.
//
// Values are stored as typed Items, so a hit costs no decoding and, for
// pointer or other small V, no allocation.
package memstore

import (
	"math"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/maypok86/otter/v2"
)

// DefaultMaxEntries bounds a Store whose Options set neither MaxEntries nor
// Cost. It keeps a forgotten option from turning the local tier into an
// unbounded map.
const DefaultMaxEntries = 10_000

// Options configures a Store. The zero value is valid: DefaultMaxEntries
// entries, real time.
type Options[V any] struct {
	// MaxEntries bounds the number of items. Zero means DefaultMaxEntries
	// unless Cost is set. It cannot be combined with Cost.
	MaxEntries int

	// Cost, with MaxCost, bounds the store by the summed cost of its items
	// instead of their number (for example the size of a value in bytes).
	// It runs once per Set, under a lock of otter's hash table, so it must be
	// cheap and must not call the Store. A cost of 0 is counted as 1: an item
	// that no bound applies to would make the memory unbounded.
	Cost func(key string, it flightcache.Item[V]) uint32
	// MaxCost is the bound on the summed Cost; required with Cost, invalid
	// without it.
	MaxCost uint64

	// Now is the time source used to decide when an item's StaleUntil has
	// passed. Nil means time.Now. Tests set it to expire items without
	// waiting; with a custom Now the store does no periodic background
	// clean-up and expired items are removed lazily by later operations
	// (they are still never returned).
	Now func() time.Time
}

// Store is a bounded in-memory flightcache.LocalStore. It is safe for
// concurrent use. Call Close when done with it to stop otter's background
// clean-up goroutine promptly (otherwise it stops once the Store is garbage
// collected).
type Store[V any] struct {
	c   *otter.Cache[string, flightcache.Item[V]]
	now func() time.Time
}

// Compile-time proof that Store satisfies the interface the cache consumes.
var _ flightcache.LocalStore[int] = (*Store[int])(nil)

// New returns a Store configured by opts. Options out of range are reported
// as a *flightcache.ConfigError (errors.Is(err, flightcache.ErrInvalidConfig)).
func New[V any](opts Options[V]) (*Store[V], error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Store[V]{now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}

	oo := &otter.Options[string, flightcache.Item[V]]{
		ExpiryCalculator: otter.ExpiryWritingFunc(s.expiresAfter),
	}
	if opts.Now != nil {
		oo.Clock = clock{now: opts.Now}
	}
	if opts.Cost != nil {
		cost := opts.Cost
		oo.MaximumWeight = opts.MaxCost
		oo.Weigher = func(key string, it flightcache.Item[V]) uint32 {
			return max(cost(key, it), 1)
		}
	} else {
		oo.MaximumSize = opts.MaxEntries
		if oo.MaximumSize == 0 {
			oo.MaximumSize = DefaultMaxEntries
		}
	}
	c, err := otter.New(oo)
	if err != nil {
		// validate mirrors otter's rules, so this is a bug in validate.
		return nil, &flightcache.ConfigError{Field: "Options", Reason: err.Error()}
	}
	s.c = c
	return s, nil
}

func (o *Options[V]) validate() error {
	switch {
	case o.MaxEntries < 0:
		return &flightcache.ConfigError{Field: "MaxEntries", Reason: "must not be negative"}
	case o.Cost != nil && o.MaxEntries != 0:
		return &flightcache.ConfigError{Field: "MaxEntries", Reason: "cannot be combined with Cost; bound by MaxCost instead"}
	case o.Cost != nil && o.MaxCost == 0:
		return &flightcache.ConfigError{Field: "MaxCost", Reason: "must be positive when Cost is set"}
	case o.Cost == nil && o.MaxCost != 0:
		return &flightcache.ConfigError{Field: "MaxCost", Reason: "has no effect without Cost"}
	}
	return nil
}

// expiresAfter is otter's per-entry expiry: the time left until StaleUntil,
// measured on the same clock otter uses. otter adds it to a snapshot of its
// clock taken before this runs, so the entry expires at or just before
// StaleUntil, never after.
func (s *Store[V]) expiresAfter(e otter.Entry[string, flightcache.Item[V]]) time.Duration {
	d := e.Value.StaleUntil.Sub(s.now())
	if d <= 0 {
		// Set refuses such items; a clock that moved between Set's check
		// and this call can still get here. 1ns makes it expire at once.
		return time.Nanosecond
	}
	return d
}

// Get returns the item stored under key. An item whose StaleUntil has passed
// is never returned.
func (s *Store[V]) Get(key string) (flightcache.Item[V], bool) {
	return s.c.GetIfPresent(key)
}

// Set stores it under key until it.StaleUntil, replacing any previous item.
// An item that is already past its StaleUntil (including a zero StaleUntil)
// is not stored, and the previous item under key is removed: Set means
// "this is the current value", and the current value is gone.
func (s *Store[V]) Set(key string, it flightcache.Item[V]) {
	if !it.StaleUntil.After(s.now()) {
		s.c.Invalidate(key)
		return
	}
	s.c.Set(key, it)
}

// Delete removes key; removing a missing key is not an error.
func (s *Store[V]) Delete(key string) {
	s.c.Invalidate(key)
}

// Len returns the approximate number of items held. It may count items that
// have expired but not yet been cleaned up, and may briefly exceed the bound
// while eviction catches up.
func (s *Store[V]) Len() int {
	return s.c.EstimatedSize()
}

// Close stops otter's periodic clean-up goroutine. The Store keeps working
// after Close; expired items are then only removed lazily. Close is
// idempotent.
func (s *Store[V]) Close() {
	s.c.StopAllGoroutines()
}

// clock adapts Options.Now to otter's Clock. Its nil Tick channel tells otter
// not to run periodic clean-ups, which would otherwise tick on real time
// while a test's fake time stands still.
type clock struct {
	now func() time.Time
}

func (c clock) NowNano() int64 {
	t := c.now()
	// UnixNano is undefined outside ~1678..2262; saturate so a far-future
	// test clock cannot wrap around to "expired".
	if t.Unix() >= math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	if t.Unix() <= math.MinInt64/int64(time.Second) {
		return math.MinInt64
	}
	return t.UnixNano()
}

func (clock) Tick(time.Duration) <-chan time.Time { return nil }
