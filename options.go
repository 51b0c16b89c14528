package flightcache

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
)

// Options configures a Cache. The zero value of every field means "use the
// documented default"; New validates the rest and returns a *ConfigError for
// anything out of range.
//
//	c, err := flightcache.New(flightcache.Options[*Product]{
//		Name:  "product",
//		TTL:   5 * time.Minute,
//		Local: localStore, // e.g. memstore.New[*Product](memstore.Options[*Product]{MaxEntries: 100_000})
//	})
type Options[V any] struct {
	// Name identifies the cache in metrics, logs and traces. It must be a
	// constant (never derived from a key). Default "default".
	Name string

	// Local is the in-process typed tier. Local or Shared (or both) is required.
	Local driver.LocalStore[V]
	// Shared is the optional tier shared by every instance (Redis).
	Shared driver.SharedStore
	// Codec encodes values for Shared. Default JSONCodec[V].
	Codec driver.Codec[V]

	// TTL is how long a loaded value stays fresh. Must be in [1s, 24h].
	// Default 5m.
	TTL time.Duration
	// Jitter spreads expiries of values loaded together: each TTL is
	// multiplied by a random factor in [1-Jitter, 1]. Must be in [0, 0.5].
	// Default 0.1. Use DisableJitter to turn it off. A TTL chosen by the
	// loader with SetTTL is used as is, without jitter.
	Jitter float64
	// MaxTTL caps how long any entry stays fresh in this Cache, whoever
	// chose its lifetime. An entry read from the shared tier is fresh at
	// most MaxTTL from its load (Meta.LoadedAt, when the tier keeps it) and
	// from the read (then stale for at most StaleFor), whatever it
	// claims: it may have been written by an instance with other options
	// or an older version, or forged by anyone who can write to the shared
	// tier. A loader's SetTTL longer than MaxTTL is cut to it.
	// Set it to TTL when no loader asks for more, so that no entry outlives
	// what this Cache would have stored. Must be in [TTL, 24h] (the package
	// constant MaxTTL). Default the package constant MaxTTL.
	MaxTTL time.Duration
	// NegativeTTL is how long a "not found" (a loader error matching
	// ErrNotFound) is cached. Must be in [1s, TTL]. Default 30s, capped at TTL.
	NegativeTTL time.Duration

	// LoaderTimeout bounds the origin call: the loader's context ends
	// LoaderTimeout after the load started, and a loader that returns then
	// fails its callers with its error (which should match
	// context.DeadlineExceeded). The write-back is not counted: a value
	// loaded in time is returned even when storing it is slow (then with
	// OutcomeLoadedWriteFailed), each shared call being bounded by
	// SharedTimeout instead. Encoding the value for the shared tier is CPU
	// work without a deadline. A loader that ignores its context has its
	// callers released, with an error matching context.DeadlineExceeded,
	// at the flight's hard timeout: LoaderTimeout + SharedTimeout (the
	// double-check's shared read before the load; nothing without a shared
	// tier) + 10ms, plus CoalesceWait + 2×SharedTimeout with a Coordinator.
	// That timeout stops once the loader has returned a value, so neither a
	// slow encoding nor a slow write (or lease completion) loses a value
	// loaded in time. Must be in [1ms, 10m]. Default 10s.
	LoaderTimeout time.Duration
	// SharedTimeout bounds each call to the shared tier (a read, the
	// double-check's read, a write-back, Set, Delete) on its own deadline,
	// independent of the caller's context and of LoaderTimeout: a Redis
	// that hangs costs a Get at most this much, since a Get whose shared
	// read timed out (or was refused by the breaker) does not call the tier
	// again (no double-check there, and no write-back: Result.WriteErr says
	// so). Reads also end when the
	// caller leaves; writes do not (once started, a write completes or
	// times out). Must be in [1ms, 10s]. Default DefaultSharedTimeout.
	//
	// It is the outer bound; the store's client has its own. With
	// redisstore, go-redis's ReadTimeout, WriteTimeout and retries
	// (MaxRetries, default 3) apply inside it: set them at or below
	// SharedTimeout (or leave go-redis's ContextTimeoutEnabled on, so that
	// it honours the deadline) and keep retries few, or a single call
	// spends its whole budget on the first attempt's timeout.
	SharedTimeout time.Duration
	// SharedBreaker, when set, is consulted before every shared-tier call;
	// see SharedBreaker. While it is open, a shared read is a miss that
	// costs nothing (reported as EventReadFailed with ErrBreakerOpen, not
	// logged), a write-back is skipped (OutcomeLoadedWriteFailed) and Set
	// and Delete return an error matching ErrBreakerOpen. Each state
	// change is reported as EventBreakerChanged and logged. Default none
	// (package breaker provides one).
	SharedBreaker driver.SharedBreaker
	// Guard, when set, turns away keys that cannot exist after a local
	// miss; see Guard. Default none.
	Guard driver.Guard

	// Coordinator, when set, coalesces loads across every instance that
	// shares it (cluster mode): one load per key in the whole cluster,
	// the others wait for it and read its value from Shared, which is
	// therefore required. See Coordinator; package redislease provides
	// one. Default none: loads are coalesced within the process only.
	// Batch reads (GetMany, FetchMany) coalesce across the cluster too,
	// claiming and completing their keys' leases together, when the
	// Coordinator is a driver.BatchCoordinator (redislease's is); with
	// another Coordinator their loads hold no lease, so they write Local
	// only. A Coordinator that asks for it (redislease's with its
	// ReadInClaim option) also does a single-key Get's shared read: the
	// flight's first Claim reads the entry or, when there is none, takes
	// the lease, in one round trip (see driver.ClaimRequest.Wait), under
	// SharedBreaker and SharedTimeout like the read it replaces.
	Coordinator driver.Coordinator
	// CoalesceWait bounds how long a flight waits for another instance's
	// load before OnCoalesceTimeout applies (the flight's own load, if it
	// comes to that, then runs under LoaderTimeout). It must cover a
	// crashed leader's lease and the load of the instance that takes it
	// over: when the Coordinator has a method LeaseTTL() time.Duration
	// (redislease's has), New refuses a CoalesceWait shorter than the
	// lease TTL, and the default is the lease TTL plus LoaderTimeout.
	// Must be in [1ms, lease TTL + LoaderTimeout]. Default lease TTL +
	// LoaderTimeout (LoaderTimeout when the lease TTL is not known).
	CoalesceWait time.Duration
	// OnCoalesceTimeout is what a follower does when CoalesceWait passes.
	// Default WaitStaleOrLoad.
	OnCoalesceTimeout WaitPolicy
	// OnCoordinatorFailure is what a flight does when the Coordinator
	// cannot be reached. Default DegradeToLocal.
	OnCoordinatorFailure FailurePolicy

	// Bus, when set, carries this Cache's invalidations to every other
	// instance that shares it, and theirs to this one: Set, Delete,
	// InvalidatePrefix and Clear publish one after updating the tiers,
	// and invalidations from other instances drop the local copies older
	// than their write. See Bus. Local must implement LocalRanger. Name
	// must be the same on every instance (it names the Cache on the Bus)
	// and must not be shared by two Caches on one Bus. Default none.
	Bus driver.Bus
	// BusDownTTL bounds how long a local item is served while the Bus is
	// down, counted from when its data was read: the instance may have
	// missed invalidations, so older items are reloaded (through the
	// shared tier, which writers update before they publish). Must be in
	// [1ms, TTL]. Default DefaultBusDownTTL.
	BusDownTTL time.Duration
	// ClockSkew is the most the wall clocks of two instances are expected
	// to differ by. An invalidation drops local items read up to ClockSkew
	// after its Version, so that an instance whose clock runs ahead still
	// drops the values it read before the write; values read in that
	// window after a write are reloaded once more than needed. Must be in
	// [0, 1s]. Default DefaultClockSkew; DisableClockSkew for 0.
	ClockSkew time.Duration

	// SoftTimeout, when set and a stale value exists, serves that value after
	// SoftTimeout while the load goes on in the background to refresh the
	// entry. It counts from the start of the key's load in this process: a
	// caller that joins a load running for some time already waits only
	// what is left of it, and one that joins a load past it gets the stale
	// value at once, so a hung origin costs each key's first caller the
	// SoftTimeout, not every caller. Must be below LoaderTimeout. Default 0
	// (off). It only has an effect with StaleFor, which is what keeps stale
	// values around.
	SoftTimeout time.Duration
	// StaleFor keeps values past their TTL for this long so they can be served
	// when a load fails or is slow (fail-safe). Default 0 (off); at most 7 days.
	StaleFor time.Duration

	// EarlyRefresh enables probabilistic early expiration (XFetch): a hit
	// refreshes the value in the background with a probability that grows as
	// expiry nears and with the value's load time, so a hot key never misses.
	EarlyRefresh bool
	// Beta is XFetch's β: above 1 refreshes earlier, below 1 later. Must be in
	// (0, 10]. Default 1, the value the paper shows to be optimal on average.
	Beta float64

	// FailureThrottle, when set, makes callers within this window after a
	// failed load get that error (wrapped in a *ThrottledError) instead of
	// calling the origin again. Default 0 (off); at most 1m.
	FailureThrottle time.Duration

	// MaxInFlight bounds the loaders running at once, a bulkhead: a load
	// holds its slot until the load returns, even past LoaderTimeout or a
	// Set/Delete of its key; beyond it a Get that would start a load fails
	// with singleflight.ErrTooManyInFlight. Default 0 (unlimited).
	MaxInFlight int
	// MaxWaiters bounds the callers waiting on one key; beyond it a Get fails
	// with singleflight.ErrTooManyWaiters. Default 0 (unlimited).
	MaxWaiters int
	// MaxBatchSize bounds the keys of one BatchLoadFunc call: a batch
	// with more keys to load calls its loader once per chunk of at most
	// this many keys, in parallel. Must be in [1, 10000]. Default
	// DefaultMaxBatchSize.
	MaxBatchSize int
	// MaxKeyLen bounds the length of a key in bytes. Must be in [1, 65536].
	// Default 1024, or less when Local or Shared implements KeyLimiter:
	// the smallest of their limits. A MaxKeyLen above a tier's limit is a
	// *ConfigError, so that every key the Cache admits fits every tier.
	MaxKeyLen int

	// Clone, when set, gives every caller its own copy of a value (and the
	// Cache its own copy of a value passed to Set). Without it, values handed
	// to several callers are shared and must be treated as immutable.
	Clone func(V) V

	// Observer receives metric events; see Observer. Default none.
	Observer driver.Observer
	// Tracer wraps Gets and loads in spans. Default none.
	Tracer driver.Tracer
	// Logger logs what an operator should know, each line prefixed
	// "flightcache: ": store read and write failures (rate-limited) and
	// the shared breaker's state changes; with a Bus, the bus going down
	// (WARN: local values are served for at most BusDownTTL) and coming
	// back up (INFO: the local tier was resynchronised), invalidations
	// that could not be published, fences or pending writes dropped
	// because their tables were full, and invalidations whose version is
	// ahead of this host's clock; with a Coordinator, the coordinator
	// becoming unreachable and reachable again, and loads it failed; a
	// batch loader's keys it was not asked for; an Observer's panic
	// (ERROR); early refreshes that failed (DEBUG). Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. It decides freshness and, when set, measures load
	// durations (XFetch's Δ); timers (SoftTimeout, LoaderTimeout,
	// SharedTimeout) always run on real time. Set it in tests to move time
	// by hand. Times written to the shared tier are converted to the wall
	// clock (time.Now) on the way out and back on the way in, so other
	// processes can compare them whatever clock this one uses.
	//
	// Default: the Local store's clock when Local has a method
	// Clock() func() time.Time (memstore.Store has: with ClockResolution, a coarse
	// clock that is ~1 ns to read and lags real time by about a
	// millisecond), else clock.Monotonic (the real time, in one monotonic
	// clock read). The freshness checks then agree with the store's
	// expiry. A local hit reads this clock once, before the lookup, and a
	// store that implements driver.LocalStoreAt (memstore does) judges the
	// item by that reading instead of reading a clock of its own: with
	// memstore's default one real clock read per hit, with its coarse
	// clock none (a read costs 30-80 ns on virtual machines). With the
	// default, load durations are still measured on the precise real clock,
	// so that sub-millisecond loads keep a non-zero Δ.
	Now func() time.Time
}

// leaseTimer is a Coordinator that tells its lease TTL (redislease's
// does); see Options.CoalesceWait.
type leaseTimer interface {
	LeaseTTL() time.Duration
}

// claimReader is a Coordinator that tells, before any Claim, whether a
// Get that misses its local tier should leave its shared read to its
// flight's first Claim (read-or-claim, see Cache.fetch): true from the
// start, not only once a Grant showed Read; false never, whatever the
// Grants show. redislease's says false unless its Options.ReadInClaim: a
// warm shared hit is then one GET, not a script in a flight. A
// Coordinator without the method is taken at its Grants: once one showed
// Read (driver.Grant.Read) it has chosen to read in its Claim, and the
// Cache leaves it the Get's read from then on.
type claimReader interface {
	ClaimReads() bool
}

// storeClock is a LocalStore that keeps its own clock; see Options.Now.
type storeClock interface {
	Clock() func() time.Time
}

// DisableJitter, as Options.Jitter, turns TTL jitter off.
const DisableJitter = -1.0

// The TTL bounds, exported so that callers validating their own
// configuration (flags, environment) can use the same numbers.
const (
	DefaultTTL = 5 * time.Minute
	// DefaultSharedTimeout is Options.SharedTimeout's default: far above a
	// LAN round trip (about 1 ms), far below what a user notices.
	DefaultSharedTimeout = 250 * time.Millisecond
	// DefaultBusDownTTL is Options.BusDownTTL's default: after a write on
	// another instance while the Bus is down, this instance stops serving
	// its older copy within about this long plus the Bus's detection time.
	DefaultBusDownTTL = time.Second
	// DefaultClockSkew is Options.ClockSkew's default: well above what NTP
	// keeps hosts on one network within.
	DefaultClockSkew = 10 * time.Millisecond
	// DisableClockSkew, as Options.ClockSkew, means 0.
	DisableClockSkew = -1 * time.Nanosecond
	// DefaultMaxBatchSize is Options.MaxBatchSize's default: the size of
	// a typical page of items, and well below the parameter limits of SQL
	// databases for an IN list.
	DefaultMaxBatchSize = 100
	MinTTL              = time.Second
	// MaxTTL bounds Options.TTL and Options.MaxTTL, and is the latter's
	// default.
	MaxTTL = 24 * time.Hour
)

// The other defaults and bounds; each is documented on its Options field.
const (
	defaultJitter        = 0.1
	maxJitter            = 0.5
	defaultNegativeTTL   = 30 * time.Second
	defaultLoaderTimeout = 10 * time.Second
	minLoaderTimeout     = time.Millisecond
	maxLoaderTimeout     = 10 * time.Minute
	minSharedTimeout     = time.Millisecond
	maxSharedTimeout     = 10 * time.Second
	maxStaleFor          = 7 * 24 * time.Hour
	defaultBeta          = 1.0
	maxBeta              = 10.0
	maxFailureThrottle   = time.Minute
	maxMaxBatchSize      = 10000
	defaultMaxKeyLen     = 1024
	maxMaxKeyLen         = 64 << 10
	defaultName          = "default"
	maxClockSkew         = time.Second
)

// typedNil reports whether v is an interface holding a nil pointer, map,
// slice, func or channel: set, so not nil to a comparison, but unusable.
func typedNil(v any) bool {
	if v == nil {
		return false
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// withDefaults returns o with every zero field replaced by its default, or a
// *ConfigError for the first field out of range.
func (o Options[V]) withDefaults() (Options[V], error) {
	bad := func(field, reason string) (Options[V], error) {
		return o, &ConfigError{Field: field, Reason: reason}
	}
	if o.Name == "" {
		o.Name = defaultName
	}
	for _, f := range [...]struct {
		name string
		v    any
	}{{"Local", o.Local}, {"Shared", o.Shared}, {"Codec", o.Codec}, {"SharedBreaker", o.SharedBreaker}, {"Guard", o.Guard},
		{"Coordinator", o.Coordinator}, {"Bus", o.Bus}, {"Observer", o.Observer}, {"Tracer", o.Tracer}} {
		if typedNil(f.v) {
			return bad(f.name, fmt.Sprintf("a nil %T: leave the field unset instead", f.v))
		}
	}
	if o.Local == nil && o.Shared == nil {
		return bad("Local", "Local or Shared (or both) is required")
	}
	if o.Codec == nil {
		o.Codec = driver.JSONCodec[V]{}
	}

	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return bad("TTL", "must be between 1s and 24h, got "+o.TTL.String())
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = MaxTTL
	}
	if o.MaxTTL < o.TTL || o.MaxTTL > MaxTTL {
		return bad("MaxTTL", "must be between TTL ("+o.TTL.String()+") and 24h, got "+o.MaxTTL.String())
	}
	switch {
	case o.Jitter == 0:
		o.Jitter = defaultJitter
	case o.Jitter == DisableJitter:
		o.Jitter = 0
	case o.Jitter < 0 || o.Jitter > maxJitter || o.Jitter != o.Jitter:
		return bad("Jitter", "must be in [0, 0.5] or DisableJitter")
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = min(defaultNegativeTTL, o.TTL)
	}
	if o.NegativeTTL < MinTTL || o.NegativeTTL > o.TTL {
		return bad("NegativeTTL", "must be between 1s and TTL, got "+o.NegativeTTL.String())
	}

	if o.LoaderTimeout == 0 {
		o.LoaderTimeout = defaultLoaderTimeout
	}
	if o.LoaderTimeout < minLoaderTimeout || o.LoaderTimeout > maxLoaderTimeout {
		return bad("LoaderTimeout", "must be between 1ms and 10m, got "+o.LoaderTimeout.String())
	}
	if o.SharedTimeout == 0 {
		o.SharedTimeout = DefaultSharedTimeout
	}
	if o.SharedTimeout < minSharedTimeout || o.SharedTimeout > maxSharedTimeout {
		return bad("SharedTimeout", "must be between 1ms and 10s, got "+o.SharedTimeout.String())
	}
	if o.SoftTimeout < 0 || o.SoftTimeout >= o.LoaderTimeout {
		return bad("SoftTimeout", "must be 0 (off) or below LoaderTimeout, got "+o.SoftTimeout.String())
	}
	if o.StaleFor < 0 || o.StaleFor > maxStaleFor {
		return bad("StaleFor", "must be between 0 and 7 days, got "+o.StaleFor.String())
	}

	if o.Beta == 0 {
		o.Beta = defaultBeta
	}
	if !(o.Beta > 0 && o.Beta <= maxBeta) { // also rejects NaN
		return bad("Beta", "must be in (0, 10]")
	}
	if o.FailureThrottle < 0 || o.FailureThrottle > maxFailureThrottle {
		return bad("FailureThrottle", "must be between 0 and 1m, got "+o.FailureThrottle.String())
	}

	if o.MaxInFlight < 0 {
		return bad("MaxInFlight", "must not be negative")
	}
	if o.MaxWaiters < 0 {
		return bad("MaxWaiters", "must not be negative")
	}
	if o.MaxBatchSize == 0 {
		o.MaxBatchSize = DefaultMaxBatchSize
	}
	if o.MaxBatchSize < 0 || o.MaxBatchSize > maxMaxBatchSize {
		return bad("MaxBatchSize", "must be between 1 and 10000")
	}
	if o.MaxKeyLen < 0 || o.MaxKeyLen > maxMaxKeyLen {
		return bad("MaxKeyLen", "must be between 1 and 65536")
	}
	limit := defaultMaxKeyLen
	for _, tier := range [...]struct {
		name  string
		store any
	}{{"Local", o.Local}, {"Shared", o.Shared}} {
		kl, ok := tier.store.(driver.KeyLimiter)
		if !ok {
			continue
		}
		n := kl.MaxKeyLen()
		if n < 1 {
			return bad("MaxKeyLen", fmt.Sprintf("the %s store accepts no key (its MaxKeyLen is %d)", tier.name, n))
		}
		if o.MaxKeyLen > n {
			return bad("MaxKeyLen", fmt.Sprintf("%d is above the %s store's limit of %d", o.MaxKeyLen, tier.name, n))
		}
		limit = min(limit, n)
	}
	if o.MaxKeyLen == 0 {
		o.MaxKeyLen = limit
	}

	if o.Coordinator != nil {
		if o.Shared == nil {
			return bad("Coordinator", "needs a Shared tier: followers read the leader's value from it")
		}
		// A follower must still be waiting when a dead leader's lease
		// expires, to take it over, and then for the new leader's load:
		// a shorter wait gives up and loads again for nothing.
		var lease time.Duration
		if lt, ok := o.Coordinator.(leaseTimer); ok {
			lease = lt.LeaseTTL()
		}
		if o.CoalesceWait == 0 {
			o.CoalesceWait = o.LoaderTimeout
			if lease > 0 {
				o.CoalesceWait = lease + o.LoaderTimeout
			}
		}
		if o.CoalesceWait < time.Millisecond || o.CoalesceWait > lease+o.LoaderTimeout {
			return bad("CoalesceWait", "must be between 1ms and the lease TTL plus LoaderTimeout, got "+o.CoalesceWait.String())
		}
		if o.CoalesceWait < lease {
			return bad("CoalesceWait", fmt.Sprintf("%v is shorter than the Coordinator's lease TTL %v: a follower would give up before a crashed leader's lease expires, and load again instead of taking the lease over", o.CoalesceWait, lease))
		}
		if o.OnCoalesceTimeout > WaitFail {
			return bad("OnCoalesceTimeout", "unknown policy")
		}
		if o.OnCoordinatorFailure > FailOnCoordinatorError {
			return bad("OnCoordinatorFailure", "unknown policy")
		}
	}
	if o.Bus != nil {
		if _, ok := o.Local.(driver.LocalRanger[V]); !ok {
			return bad("Bus", "needs a Local store that implements LocalRanger (memstore.Store does): invalidations from other instances drop local items")
		}
	}
	if o.BusDownTTL == 0 {
		o.BusDownTTL = min(DefaultBusDownTTL, o.TTL)
	}
	if o.BusDownTTL < time.Millisecond || o.BusDownTTL > o.TTL {
		return bad("BusDownTTL", "must be between 1ms and TTL, got "+o.BusDownTTL.String())
	}
	switch {
	case o.ClockSkew == 0:
		o.ClockSkew = DefaultClockSkew
	case o.ClockSkew == DisableClockSkew:
		o.ClockSkew = 0
	case o.ClockSkew < 0 || o.ClockSkew > maxClockSkew:
		return bad("ClockSkew", "must be between 0 and 1s, got "+o.ClockSkew.String())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = clock.Monotonic
		if sc, ok := o.Local.(storeClock); ok && sc.Clock() != nil {
			o.Now = sc.Clock()
		}
	}
	return o, nil
}
