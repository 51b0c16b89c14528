// Package memstore is the in-process tier of flightcache: a bounded,
// concurrent map from key to driver.Item[V] on
// github.com/maypok86/otter/v2.
//
// Every item lives exactly until its own StaleUntil: after that instant Get
// no longer returns it, even before otter's per-entry expiry has physically
// removed it (by default a second or two later, see Clock). Size is bounded
// either by entry count (MaxEntries) or by a caller-defined cost (Cost with
// MaxCost); otter's W-TinyLFU policy picks the victims.
//
// Values are stored as typed Items, so a hit costs no decoding and, for
// pointer or other small V, no allocation.
//
// # Clock
//
// By default a Store judges StaleUntil by the real clock (clock.Monotonic),
// which Get reads once. GetAt (driver.LocalStoreAt) takes that reading from
// its caller instead: a flightcache.Cache passes the one it reads for its
// own freshness check, so a Cache hit reads the real clock once, not twice.
// On virtual machines a precise clock read costs 30-80 ns, as much as the
// rest of a hit. otter, which needs a time on every lookup for its
// per-entry expiry, runs on a coarse clock of one second's resolution
// (otter.CoarseClock: an atomic load per lookup, one wake-up per second).
// That clock only schedules the removal of expired items; otter removes
// each item a resolution after its StaleUntil, so not before it (unless
// the clock's goroutine was starved for more than a second when the item
// was stored: otter may then drop it up to that much early, which costs a
// miss, never a late hit).
//
// Options.ClockResolution opts into a clock.Coarse owned by the Store (one
// goroutine reading the real time once per resolution) for everything:
// hits then read one atomic word instead of the real clock, and items
// expire up to about one resolution after their StaleUntil (later if that
// goroutine is starved), never before. Store.Clock exposes the Store's
// clock, and a flightcache.Cache whose Options.Now is nil uses it for its
// freshness checks, so with a coarse clock a Cache hit reads no real clock
// at all.
//
// Close stops the clocks' goroutines; a Store that is never closed stops
// them once the Store has been garbage collected.
package memstore

import (
	"iter"
	"math"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
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
	Cost func(key string, it driver.Item[V]) uint32
	// MaxCost is the bound on the summed Cost; required with Cost, invalid
	// without it.
	MaxCost uint64

	// ClockResolution, when positive, makes the Store keep time with its
	// own clock.Coarse of this resolution instead of reading the real clock
	// on every Get (see Clock in the package documentation): faster hits,
	// in exchange for items living up to about ClockResolution past their
	// StaleUntil. clock.DefaultResolution (1ms) suits TTLs of a second and
	// more. It cannot be combined with Now. Default 0: the real clock.
	ClockResolution time.Duration

	// Now is the time source used to decide when an item's StaleUntil has
	// passed. Nil means the real clock (or the coarse one, with
	// ClockResolution). Tests set it to expire items without
	// waiting; with a custom Now the store does no periodic background
	// clean-up and expired items are removed lazily by later operations
	// (they are still never returned).
	Now func() time.Time
}

// Store is a bounded in-memory driver.LocalStore. It is safe for
// concurrent use. Call Close when done with it to stop otter's background
// clean-up goroutine and the clock's promptly (otherwise they stop once the
// Store is garbage collected).
type Store[V any] struct {
	// c holds each Item behind a pointer: otter then moves 8 bytes instead
	// of a ~100-byte Item through its generic code on every Get (measured:
	// faster hits and much smaller stack frames), for one allocation per
	// Set. Stored Items are never modified, so Get may copy from them
	// without a lock.
	c *otter.Cache[string, *driver.Item[V]]
	// now is the Store's clock (Clock): Get, Set and All judge StaleUntil
	// by it.
	now    func() time.Time
	coarse *clock.Coarse // nil unless Options.ClockResolution; owned, stopped by Close
	// reclaim is otter's clock by default (nil with Options.Now or
	// ClockResolution, where otter shares now): it lags now by up to
	// slack, so otter's expiry of each item is pushed back by slack and
	// otter does not drop an item before its StaleUntil. Owned, stopped by
	// Close.
	reclaim *otter.CoarseClock
	slack   time.Duration
}

// reclaimResolution is the resolution of otter's clock by default: how
// often it is read, and about how long after its StaleUntil otter removes
// an item nobody asked for (Get never returns it meanwhile).
const reclaimResolution = time.Second

// Compile-time proof that Store satisfies the interfaces the cache consumes.
var (
	_ driver.LocalStoreAt[int] = (*Store[int])(nil)
	_ driver.LocalRanger[int]  = (*Store[int])(nil)
)

// New returns a Store configured by opts. Options out of range are reported
// as a *flightcache.ConfigError (errors.Is(err, flightcache.ErrInvalidConfig)).
func New[V any](opts Options[V]) (*Store[V], error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Store[V]{now: opts.Now}
	oo := &otter.Options[string, *driver.Item[V]]{
		ExpiryCalculator: otter.ExpiryWritingFunc(s.expiresAfter),
	}
	switch {
	case opts.Now != nil:
		oo.Clock = fixedClock{now: opts.Now}
	case opts.ClockResolution > 0:
		s.coarse = clock.NewCoarse(opts.ClockResolution)
		s.now = s.coarse.Now
		oo.Clock = s.coarse
	default:
		s.now = clock.Monotonic
		s.reclaim = otter.NewCoarseClock(reclaimResolution)
		s.slack = reclaimResolution
		oo.Clock = s.reclaim
	}
	if opts.Cost != nil {
		cost := opts.Cost
		oo.MaximumWeight = opts.MaxCost
		oo.Weigher = func(key string, it *driver.Item[V]) uint32 {
			return max(cost(key, *it), 1)
		}
	} else {
		oo.MaximumSize = opts.MaxEntries
		if oo.MaximumSize == 0 {
			oo.MaximumSize = DefaultMaxEntries
		}
	}
	c, err := otter.New(oo)
	if err != nil {
		s.stopClocks()
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
	case o.ClockResolution < 0:
		return &flightcache.ConfigError{Field: "ClockResolution", Reason: "must not be negative"}
	case o.ClockResolution > 0 && o.Now != nil:
		return &flightcache.ConfigError{Field: "ClockResolution", Reason: "cannot be combined with Now"}
	case o.Cost == nil && o.MaxCost != 0:
		return &flightcache.ConfigError{Field: "MaxCost", Reason: "has no effect without Cost"}
	}
	return nil
}

// expiresAfter is otter's per-entry expiry: the time left until StaleUntil
// on the Store's clock, plus slack. otter adds it to a snapshot of its own
// clock taken before this runs; that clock lags the Store's by at most
// slack (none when they are the same clock; more only while the coarse
// clock's goroutine is starved), so otter removes the entry at or after
// its StaleUntil: Get, not otter, decides when an item stops being served.
func (s *Store[V]) expiresAfter(e otter.Entry[string, *driver.Item[V]]) time.Duration {
	d := e.Value.StaleUntil.Sub(s.now()) + s.slack
	if d <= 0 {
		// Set refuses such items; a clock that moved between Set's check
		// and this call can still get here. 1ns makes it expire at once.
		return time.Nanosecond
	}
	return d
}

// Get returns the item stored under key. An item whose StaleUntil has passed
// on the Store's clock is never returned (with ClockResolution: once the
// coarse clock has passed it).
//
// The Item is the Store's own copy, shared by every caller: it must not be
// modified (driver.LocalStore's contract).
func (s *Store[V]) Get(key string) (*driver.Item[V], bool) {
	return s.GetAt(key, s.now())
}

// GetAt is Get as of now, a reading of the caller's clock
// (driver.LocalStoreAt): an item whose StaleUntil is not after now is not
// returned. It reads no precise clock (otter's lookup reads its coarse one,
// an atomic load), so a flightcache.Cache hit reads the real clock once.
func (s *Store[V]) GetAt(key string, now time.Time) (*driver.Item[V], bool) {
	it, ok := s.c.GetIfPresent(key)
	if !ok || !now.Before(it.StaleUntil) {
		return nil, false
	}
	return it, true
}

// Set stores it under key until it.StaleUntil, replacing any previous item.
// An item that is already past its StaleUntil (including a zero StaleUntil)
// is not stored, and the previous item under key is removed: Set means
// "this is the current value", and the current value is gone.
func (s *Store[V]) Set(key string, it driver.Item[V]) {
	if !it.StaleUntil.After(s.now()) {
		s.c.Invalidate(key)
		return
	}
	s.c.Set(key, &it) // a fresh copy per Set: stored Items are never modified
}

// Delete removes key; removing a missing key is not an error.
func (s *Store[V]) Delete(key string) {
	s.c.Invalidate(key)
}

// All yields every item stored with its key, in no particular order
// (driver.LocalRanger, which bulk invalidation uses). Like Get it
// never yields an item whose StaleUntil has passed (with
// ClockResolution: once the coarse clock has passed it), and the Items are
// the Store's own copies, shared by every caller: they must not be
// modified.
//
// The Store may be used while ranging, from the loop body too: Delete (or
// Set) of any key, including the one just yielded, is allowed. No lock is
// held while the loop body runs. The iteration is weakly consistent: an
// item stored, unchanged, for the whole iteration is yielded; an item Set
// or Deleted while it runs may be yielded in its old or new state, or not
// at all. A pass costs on the order of 100 ns per item, mostly cache
// misses and, without ClockResolution, a clock read per item (each item's
// StaleUntil is checked as it is yielded; see BenchmarkAll): bulk
// operations over a large store are for writes, not for the read path.
func (s *Store[V]) All() iter.Seq2[string, *driver.Item[V]] {
	return func(yield func(string, *driver.Item[V]) bool) {
		for k, it := range s.c.All() {
			if !s.now().Before(it.StaleUntil) {
				continue // otter removes it a little later; see expiresAfter
			}
			if !yield(k, it) {
				return
			}
		}
	}
}

// Len returns the approximate number of items held. It may count items that
// have expired but not yet been cleaned up, and may briefly exceed the bound
// while eviction catches up.
func (s *Store[V]) Len() int {
	return s.c.EstimatedSize()
}

// Clock returns the Store's clock: Options.Now, the Store's coarse clock
// (Options.ClockResolution) or clock.Monotonic, the real time.
// flightcache.Cache uses it as its own clock when its Options.Now is nil,
// so that the Cache and the Store agree on what has expired (and, with a
// coarse clock, a hit reads no real clock). It returns the clock itself,
// not a method that calls it: a Cache reads it on every hit, through one
// call instead of two.
func (s *Store[V]) Clock() func() time.Time { return s.now }

// Close stops otter's periodic clean-up goroutine and the goroutines of the
// Store's clocks. The Store keeps working after Close (its clocks then read
// the precise time); expired items are then only removed lazily. Close is
// idempotent.
func (s *Store[V]) Close() {
	s.c.StopAllGoroutines()
	s.stopClocks()
}

// stopClocks stops the goroutines of the Store's own clocks, if any.
func (s *Store[V]) stopClocks() {
	if s.coarse != nil {
		s.coarse.Stop()
	}
	if s.reclaim != nil {
		s.reclaim.Stop()
	}
}

// fixedClock adapts Options.Now to otter's Clock. Its nil Tick channel tells
// otter not to run periodic clean-ups, which would otherwise tick on real
// time while a test's fake time stands still.
type fixedClock struct {
	now func() time.Time
}

func (c fixedClock) NowNano() int64 {
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

func (fixedClock) Tick(time.Duration) <-chan time.Time { return nil }
