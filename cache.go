package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
	"github.com/flightcache/flightcache/internal/flightgroup"
	"github.com/flightcache/flightcache/singleflight"
)

// LoadFunc loads a value from the origin. It runs at most once per key at a
// time across all callers of one Cache (single-flight), under the loader
// timeout. Its ctx carries the values (trace IDs) of the caller that started
// the load but not that caller's cancellation. Return an error matching
// ErrNotFound to cache a "not found". Call SetTTL or NoStore on ctx to
// override the storing policy of this one value.
type LoadFunc[V any] func(ctx context.Context) (V, error)

// Result is the full answer of Fetch.
type Result[V any] struct {
	Value   V
	Outcome Outcome
	// WriteErr is the write-back error with OutcomeLoadedWriteFailed; the
	// value is still good.
	WriteErr error
	// Age is how long ago the value was loaded (Meta.LoadedAt), when known:
	// 0 for a value loaded by this Get or the load it shared, and for a
	// value whose store does not keep LoadedAt.
	Age time.Duration
	// Scope says where the load behind a loaded or coalesced value ran:
	// ScopeCluster when another instance loaded it and this one waited for
	// it through the Coordinator (Outcome is then OutcomeCoalesced or
	// OutcomeNegativeHit), ScopeLocal when it was loaded in this process.
	// ScopeNone when no load was involved: hits (the flight's double-check
	// included), stale values and failures. Cache-Status style reporting
	// can tell "coalesced across the cluster" from "coalesced locally" by
	// it.
	Scope Scope
}

// Cache is a cache-aside read path that loads each missing key once. See the
// package documentation for the order of operations. A Cache is safe for
// concurrent use; build it with New.
type Cache[V any] struct {
	// opts is the configuration with every default filled in, read-only
	// after New.
	opts Options[V]
	// instrumented: opts.Observer != nil || opts.Tracer != nil, the one
	// check on the hit path.
	instrumented bool
	// local is opts.Local (nil without it) as a store whose lookups take
	// the Cache's reading of its clock: the store itself when it is a
	// driver.LocalStoreAt, else wrapped in ownClock.
	local driver.LocalStoreAt[V]
	// preciseLoadTime: Options.Now was left to its default, which may be a
	// coarse clock, so load durations are measured with time.Now instead.
	preciseLoadTime bool

	group *flightgroup.Group[string, *flight[V]]
	// coh decides every write to a tier and whether a local item may be
	// served (package coherence); the Cache asks it and does the I/O.
	coh      coherence.Model
	batch    batchConfig
	throttle *throttle // nil unless Options.FailureThrottle is set
	// loadStarts maps a key to the *loadStart of its flight running in
	// this process, with Options.SoftTimeout only (see softWait).
	loadStarts sync.Map

	// breakerState is the last BreakerState the Cache saw, so that each
	// change is reported once.
	breakerState atomic.Uint32
	// claimReads is set when the Coordinator says its Claim honours
	// ClaimRequest.Read and wants it used for the Get's read
	// (claimReader), or, from a Coordinator that says nothing, once a Grant
	// showed it did (driver.Grant.Read): from then on a Get that misses the local tier
	// leaves the shared read to its flight's Claim (see fetch).
	claimReads atomic.Bool
	// claimReadsSaid: the Coordinator said at New whether claimReads holds
	// (claimReader), and no Grant changes it. Read-only after New.
	claimReadsSaid bool

	// One limiter per kind of warning, so that a flood of one kind never
	// hides the first line of another.
	readLog, writeLog, observerLog, unrequestedLog logLimiter

	// Cluster mode (coordinator.go); opts.Coordinator nil: process-local
	// only.
	coordLog logLimiter
	scope    atomic.Uint32 // the current Scope; see Cache.Scope

	// Cross-instance invalidation (invalidate.go); opts.Bus nil: writes
	// are not announced, and nothing arrives.
	busStop func() // ends the subscription; nil without a Bus
	busLog  logLimiter
	// redo keeps and redoes the writes the other instances may not have
	// heard of (see announce).
	redo coherence.Redo

	// mu orders background work against Close: a refresh is registered in
	// refreshing and counted in bg only under mu and only while !closed, so
	// once Close has passed mu, bg.Wait sees every refresh there will be.
	mu           sync.Mutex
	refreshing   map[string]*miss[V] // the background refresh running per key; guarded by mu
	maxRefreshes int
	bg           sync.WaitGroup
}

// defaultMaxRefreshes bounds concurrent background refreshes when
// Options.MaxInFlight does not.
const defaultMaxRefreshes = 4096

// engineMargin is how long after the last moment a flight can legitimately
// end that the engine's hard timeout releases its callers.
const engineMargin = 10 * time.Millisecond

// New builds a Cache from opts, filling in defaults. It returns a
// *ConfigError (matching ErrInvalidConfig) for an out-of-range option.
func New[V any](opts Options[V]) (*Cache[V], error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache[V]{
		opts:            o,
		instrumented:    o.Observer != nil || o.Tracer != nil,
		preciseLoadTime: opts.Now == nil,
		throttle:        newThrottle(o.FailureThrottle),
		batch:           newBatchConfig(o),
		refreshing:      make(map[string]*miss[V]),
		maxRefreshes:    defaultMaxRefreshes,
	}
	if o.MaxInFlight > 0 {
		c.maxRefreshes = o.MaxInFlight
	}
	if o.Local != nil {
		var ok bool
		if c.local, ok = o.Local.(driver.LocalStoreAt[V]); !ok {
			c.local = ownClock[V]{o.Local}
		}
	}
	if c.opts.SharedBreaker != nil {
		c.breakerState.Store(uint32(c.opts.SharedBreaker.State()))
	}
	// The engine's timeout is the flight's, not the loader's: the loader
	// runs under its own LoaderTimeout inside the flight (see miss.run), and
	// the engine's only releases the callers of a loader or store that
	// ignores its context. It covers the flight up to the loader's return:
	// the double-check's shared read, the cluster layer's wait and calls
	// (Coordinator), then the load. loadOrigin stops it then
	// (flightgroup.StopTimeout): the write-back or the lease's completion
	// that follows is bounded per call, and must not lose a value loaded
	// in time.
	flightTimeout := o.LoaderTimeout + engineMargin
	if o.Shared != nil {
		flightTimeout += o.SharedTimeout
	}
	if o.Coordinator != nil {
		// Cluster mode: the wait for another instance comes first, and
		// the coordinator's calls are bounded like shared-tier ones.
		flightTimeout += o.CoalesceWait + 2*o.SharedTimeout
	}
	sfOpts := []singleflight.Option{
		singleflight.WithLoaderTimeout(flightTimeout),
		singleflight.WithMaxInFlight(o.MaxInFlight),
		singleflight.WithMaxWaiters(o.MaxWaiters),
	}
	if so, ok := o.Observer.(singleflight.Observer); ok {
		sfOpts = append(sfOpts, singleflight.WithObserver(flightObserver[V]{c: c, obs: so}))
	}
	c.group = flightgroup.New[string, *flight[V]](sfOpts...)
	c.scope.Store(uint32(ScopeLocal))
	if o.Coordinator != nil {
		c.scope.Store(uint32(ScopeCluster))
		if cr, ok := o.Coordinator.(claimReader); ok {
			c.claimReads.Store(cr.ClaimReads())
			c.claimReadsSaid = true
		}
	}
	c.coh.DownTTL = o.BusDownTTL
	// A write-back of a load that began before a fence can land after
	// it and live TTL + StaleFor from then.
	c.coh.SetWindow(o.TTL + o.StaleFor + o.LoaderTimeout + 2*o.SharedTimeout)
	c.coh.LocalOnly = o.Shared == nil
	// A tag fence must outlive every value read before it, whatever TTL
	// its loader set.
	c.coh.Tags.Window = o.MaxTTL + o.StaleFor + o.LoaderTimeout + 2*o.SharedTimeout
	c.redo.Do, c.redo.Min, c.redo.Max = c.redoOne, o.SharedTimeout, maxRedoBackoff
	if o.Bus != nil {
		// Down until the Bus says the subscription works: until then
		// other instances' writes may be missed.
		c.coh.SetDown(true)
		stop, err := o.Bus.Subscribe(c.opts.Name, busHandler[V]{c})
		if err != nil {
			c.group.Close()
			return nil, fmt.Errorf("flightcache: subscribe to the invalidation bus: %w", err)
		}
		c.busStop = stop
	}
	return c, nil
}

// Get returns the value for key, loading it with load on a miss. It is the
// one-liner; use Fetch to learn the Outcome.
func (c *Cache[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	// Fetch's body, not a call to it: one frame less on the path of every
	// goroutine that waits for a load (see hitLocal).
	if ctx == nil {
		ctx = context.Background()
	}
	if c.instrumented {
		r, err := c.fetchInstrumented(ctx, key, load)
		return r.Value, err
	}
	if r, ok, err := c.hitLocal(ctx, key, load); ok {
		return r.Value, err
	}
	r, _, err := c.fetch(ctx, key, load)
	return r.Value, err
}

// Fetch is Get that also reports how the value was served. The Result's
// Outcome is set on every return, errors included.
//
// The read path is the package documentation's, in order: the local tier
// (a fresh hit returns at once); the shared tier (a failure counts as a
// miss; a hit fills the local tier); then, on a miss, one flight per key in
// which the tiers are checked again, the origin is called under the loader
// timeout, and the value is written back best-effort. With StaleFor, a value
// past its TTL stands in when the load fails or outlasts SoftTimeout.
//
// A caller whose ctx has ended gets ctx.Err() and starts nothing (a fresh
// local hit, which costs nothing, may still be served).
//
// A caller that leaves, its ctx cancelled or past its deadline before its
// answer is ready, gets ctx.Err() and OutcomeCallerLeft, not
// OutcomeLoadFailed: the load it waited for, if any, goes on for the other
// callers and fills the tiers. The rule is exact: the outcome is
// OutcomeCallerLeft when ctx has ended and the error is ctx.Err() itself,
// which is how the Cache answers a caller that stops waiting. A loader
// runs under a context without the caller's cancellation, so its errors
// come from elsewhere (its own deadline, the origin), and an error that
// only matches context.Canceled or context.DeadlineExceeded (wrapped by
// the loader, or the loader timeout's) stays OutcomeLoadFailed. A loader
// that returns the bare sentinel at the very moment its caller leaves is
// the one case the two cannot be told apart; loaders should wrap the
// errors they return.
func (c *Cache[V]) Fetch(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.instrumented {
		return c.fetchInstrumented(ctx, key, load)
	}
	if r, ok, err := c.hitLocal(ctx, key, load); ok {
		return r, err
	}
	r, _, err := c.fetch(ctx, key, load)
	return r, err
}

// fetchInstrumented is the read path with the Get event and span around it.
func (c *Cache[V]) fetchInstrumented(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	var endSpan func(driver.SpanInfo)
	if c.opts.Tracer != nil {
		ctx, endSpan = c.opts.Tracer.StartGet(ctx, c.opts.Name)
	}
	var start time.Time
	if c.opts.Observer != nil {
		start = time.Now() // real time: a latency metric, whatever Options.Now says
	}
	r, ok, err := c.hitLocal(ctx, key, load)
	var m *miss[V]
	if !ok {
		r, m, err = c.fetch(ctx, key, load)
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventGet, Ctx: ctx, Cache: c.opts.Name, Outcome: r.Outcome, Duration: time.Since(start), Err: err})
	}
	if endSpan != nil {
		info := driver.SpanInfo{Outcome: r.Outcome, Err: err}
		if m != nil {
			info.Led, info.LoadCtx = m.led.Load(), m.loadCtx
		}
		endSpan(info)
	}
	return r, err
}

// hitLocal is the local fresh hit (ok true), kept to one store lookup, one
// clock read and no allocation for pointer V; everything else is in fetch.
// The clock is read before the lookup, so that a store that takes the
// Cache's reading (driver.LocalStoreAt, memstore's) judges the item by it
// and reads no clock of its own (see c.local). Callers call fetch after hitLocal returned,
// not from inside it, so that hitLocal's frame (which holds an Item) is gone
// from the stack of the goroutines that wait for a load: thousands of fresh
// goroutines may wait on one key, and each has to grow its stack for every
// frame it stacks up before blocking (docs/PERFORMANCE.md measures both).
//
// The hit skips the UTF-8 check of admit: only a key that was stored can
// hit, and every key is checked before anything is stored under it. The
// cheap checks (closed, length) stay, so a too-long key never reaches the
// store.
func (c *Cache[V]) hitLocal(ctx context.Context, key string, load LoadFunc[V]) (r Result[V], ok bool, err error) {
	if c.opts.Local == nil || len(key) == 0 || len(key) > c.opts.MaxKeyLen || c.coh.Closed.Load() {
		return r, false, nil
	}
	now := c.opts.Now()
	it, found := c.local.GetAt(key, now)
	if !found {
		return r, false, nil
	}
	if !now.Before(it.FreshUntil) || c.untrusted(it, now) || (len(it.Tags) != 0 && c.tagsCover(it, now) != coherence.TagsClear) {
		return r, false, nil
	}
	if it.NotFound || c.opts.Observer != nil || c.opts.Clone != nil || (c.opts.EarlyRefresh && load != nil) {
		r, err = c.serveFresh(ctx, key, load, it, now, driver.TierLocal)
		return r, true, err
	}
	// answer's common case, inline: the calls and their wide results were
	// a third of a hit (age, which the compiler inlines, costs nothing).
	r.Value, r.Outcome, r.Age = it.Value, OutcomeHitLocal, age(it.LoadedAt, now.UnixNano())
	return r, true, nil
}

// fetch is the read path after the fast local hit failed, top to bottom.
// It returns the caller's miss when it went to the flight (for the Tracer).
func (c *Cache[V]) fetch(ctx context.Context, key string, load LoadFunc[V]) (Result[V], *miss[V], error) {
	if err := c.admit(ctx, key); err != nil {
		return failed[V](ctx, err), nil, err
	}
	now := c.opts.Now()

	// 1. The local tier, again: a fresh item may have arrived since
	// hitLocal looked, and a stale one is the fallback if the load fails.
	// stale points to the store's shared, read-only Item: a pointer keeps
	// the frames of the callers that wait for a load small.
	var stale *driver.Item[V]
	if c.opts.Local != nil {
		if it, ok := c.local.GetAt(key, now); ok {
			switch c.localState(it, now) {
			case coherence.Fresh:
				r, err := c.serveFresh(ctx, key, load, it, now, driver.TierLocal)
				return r, nil, err
			case coherence.Stale:
				stale = it
			}
		}
		if c.opts.Observer != nil {
			c.emit(ctx, driver.EventMiss, driver.TierLocal, nil)
		}
	}

	// A key the Guard rules out has no value at the origin: neither tier
	// is read and not even the stale item is served.
	if c.opts.Guard != nil && c.filtered(ctx, key) {
		return Result[V]{Outcome: OutcomeFiltered}, nil, ErrNotFound
	}

	// 2. The shared tier. A failure is a miss; a newer stale item than the
	// local one becomes the fallback. In cluster mode, with a Coordinator
	// that asks to read the tier in its Claim (Cache.claimReads:
	// redislease's with its ReadInClaim option), the flight's
	// first Claim is this read instead (read-or-claim, see
	// miss.lookShared): a warm shared hit is that one round trip, and a
	// cold miss claims the lease in it. Not with a SoftTimeout and no local
	// stale item (the soft timeout needs its fallback before the flight),
	// nor without a LoadFunc (there is no flight: a shared hit is all it
	// may get), nor with a FailureThrottle (the flight refuses a throttled
	// key before any Claim, and the key may meanwhile have a value that
	// another instance stored).
	var sharedDown sharedSkip
	inFlight := c.opts.Coordinator != nil && c.opts.Shared != nil && load != nil && c.throttle == nil &&
		c.claimReads.Load() && (c.opts.SoftTimeout == 0 || stale != nil)
	if c.opts.Shared != nil && !inFlight {
		it, err := c.readSharedGuarded(ctx, key, now)
		sharedDown = unavailable(ctx, err)
		if it != nil && now.Before(it.FreshUntil) {
			r, err := c.serveFresh(ctx, key, load, it, now, driver.TierShared)
			return r, nil, err
		}
		if c.opts.Observer != nil {
			c.emit(ctx, driver.EventMiss, driver.TierShared, nil)
		}
		if it != nil && !it.NotFound && (stale == nil || it.FreshUntil.After(stale.FreshUntil)) {
			stale = it
		}
	}
	if load == nil {
		return Result[V]{Outcome: OutcomeLoadFailed}, nil, fmt.Errorf("flightcache: nil LoadFunc on a miss: %w", singleflight.ErrNilFunc)
	}

	// 3. The flight: one per key, led by whichever caller comes first
	// (see miss.run for what the leader does). With a stale fallback and a
	// soft timeout, the caller waits only so long.
	if err := ctx.Err(); err != nil { // the caller left while the shared tier answered
		return Result[V]{Outcome: OutcomeCallerLeft}, nil, err
	}
	m := &miss[V]{c: c, key: key, load: load, sharedDown: sharedDown, hasStale: stale != nil, readInFlight: inFlight}
	var fl *flight[V]
	var err error
	if stale != nil && c.opts.SoftTimeout > 0 {
		var late bool
		if fl, err, late = c.doWithSoftTimeout(ctx, m, c.softWait(key, now)); late {
			return c.serveStale(ctx, stale, now, ErrSoftTimeout), m, nil
		}
	} else {
		fl, _, err = c.group.Do(ctx, key, m.run)
	}
	if fl != nil {
		m.loadCtx = fl.loadCtx
		if fl.sharedHit && err == nil {
			// The flight's read-or-claim found a fresh entry: a shared hit,
			// for every caller of the flight.
			r, err := c.serveFresh(ctx, key, load, &fl.item, now, driver.TierShared)
			return r, m, err
		}
		if fl.stale != nil && (stale == nil || fl.stale.FreshUntil.After(stale.FreshUntil)) {
			stale = fl.stale
		}
	}
	r, err := c.settle(ctx, fl, err, m.led.Load(), stale, now)
	return r, m, err
}

// ownClock is a LocalStore that does not take the caller's time
// (driver.LocalStoreAt) as one that does: its GetAt is its Get, and the
// store reads its own clock.
type ownClock[V any] struct{ driver.LocalStore[V] }

func (s ownClock[V]) GetAt(key string, _ time.Time) (*driver.Item[V], bool) { return s.Get(key) }

// readSharedGuarded is readShared under a ticket of its own,
// for the read before the flight.
func (c *Cache[V]) readSharedGuarded(ctx context.Context, key string, now time.Time) (*driver.Item[V], error) {
	t := c.coh.Begin(key)
	defer c.coh.End(key, t)
	return c.readShared(ctx, key, now, t)
}

// settle turns the answer of a key's flight (fl, or the engine's error)
// into a caller's Result, for Fetch and FetchMany alike: led tells whether
// the caller led the flight (loaded) or joined it (coalesced), and stale,
// when not nil, stands in for a load that failed.
func (c *Cache[V]) settle(ctx context.Context, fl *flight[V], err error, led bool, stale *driver.Item[V], now time.Time) (Result[V], error) {
	if err != nil || fl == nil {
		if err == nil { // cannot happen: run returns a flight or an error
			err = errors.New("flightcache: internal error: flight without result")
		}
		err = fromEngine(err)
		if stale != nil && canServeStale(ctx, err) {
			return c.serveStale(ctx, stale, now, err), nil
		}
		return failed[V](ctx, err), err
	}
	var o Outcome
	switch {
	case fl.found && fl.item.NotFound:
		o = OutcomeNegativeHit
	case fl.found || !led:
		o = OutcomeCoalesced
	case fl.uncached:
		o = OutcomeLoadedUncached
	case fl.writeErr != nil:
		o = OutcomeLoadedWriteFailed
	default:
		o = OutcomeLoaded
	}
	r, err := c.answer(&fl.item, o, now, fl.notFound)
	if o == OutcomeLoadedWriteFailed {
		r.WriteErr = fl.writeErr
	}
	// Result.Scope: where the load behind the value ran.
	switch {
	case fl.remote:
		r.Scope = ScopeCluster
	case !fl.found:
		r.Scope = ScopeLocal
	}
	return r, err
}

// failed is the Result of a Get that ends with err and no value:
// OutcomeCallerLeft when err is its caller leaving (ctx has ended and err
// is ctx.Err() itself, see Fetch), OutcomeLoadFailed otherwise.
func failed[V any](ctx context.Context, err error) Result[V] {
	if cerr := ctx.Err(); cerr != nil && err == cerr { //nolint:errorlint // identity: ctx's own error, not one that wraps it
		return Result[V]{Outcome: OutcomeCallerLeft}
	}
	return Result[V]{Outcome: OutcomeLoadFailed}
}

// localState is what a local item may be served as
// (coherence.Model.LocalState, the one rule). hitLocal inlines its fresh
// case.
func (c *Cache[V]) localState(it *driver.Item[V], now time.Time) coherence.State {
	return c.coh.LocalState(copyOf(&it.Meta, it.FilledAt), now).State
}

// copyOf is what coherence judges of an item or entry with Meta m.
func copyOf(m *driver.Meta, filledAt time.Time) coherence.Copy {
	return coherence.Copy{Version: m.Version, FreshUntil: m.FreshUntil, StaleUntil: m.StaleUntil,
		FilledAt: filledAt, LoadedAt: m.LoadedAt, NotFound: m.NotFound, Tags: m.Tags}
}

// serveFresh answers with a fresh item found in tier, starting an early
// refresh when XFetch says so.
func (c *Cache[V]) serveFresh(ctx context.Context, key string, load LoadFunc[V], it *driver.Item[V], now time.Time, tier driver.Tier) (Result[V], error) {
	o, due := c.freshHit(ctx, it, now, tier)
	if due && load != nil && c.startRefresh(ctx, key, load, it.FreshUntil) {
		o = OutcomeRefreshed
	}
	return c.answer(it, o, now, nil)
}

// freshHit reports a fresh item found in tier: the hit's outcome, and
// whether XFetch wants the item refreshed early. Get and FetchMany both
// answer fresh items through it.
func (c *Cache[V]) freshHit(ctx context.Context, it *driver.Item[V], now time.Time, tier driver.Tier) (o Outcome, refreshDue bool) {
	if it.NotFound {
		if c.opts.Observer != nil {
			c.emit(ctx, driver.EventNegativeHit, tier, nil)
		}
		return OutcomeNegativeHit, false
	}
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventHit, tier, nil)
	}
	o = OutcomeHitLocal
	if tier == driver.TierShared {
		o = OutcomeHitShared
	}
	return o, c.opts.EarlyRefresh && c.refreshDue(&it.Meta, now)
}

// serveStale answers with a value past its TTL (fail-safe); why is the
// reason the fresh value did not arrive.
func (c *Cache[V]) serveStale(ctx context.Context, it *driver.Item[V], now time.Time, why error) Result[V] {
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventStaleServed, driver.TierNone, why)
	}
	r, _ := c.answer(it, OutcomeStale, now, nil)
	return r
}

// answer is the one place a Result is made from an item (but for the
// common case of a local hit, which hitLocal and FetchMany inline: no Clone,
// no tombstone): Clone, and ErrNotFound (or the loader's own not-found
// error, notFound) for a tombstone. Age is age's, everywhere.
func (c *Cache[V]) answer(it *driver.Item[V], o Outcome, now time.Time, notFound error) (Result[V], error) {
	r := Result[V]{Outcome: o, Age: age(it.LoadedAt, now.UnixNano())}
	if it.NotFound {
		if notFound == nil {
			notFound = ErrNotFound
		}
		return r, notFound
	}
	r.Value = it.Value
	if c.opts.Clone != nil {
		r.Value = c.opts.Clone(r.Value)
	}
	return r, nil
}

// age is Result.Age, the one place it is computed: how long before now
// (UnixNano) a value loaded at loadedAt was loaded, 0 when unknown. A value
// loaded by the caller's own flight was loaded after now, hence 0.
// UnixNano, not Sub: Sub's overflow checks cost ~20 ns on the hit path, and
// times of cached values are well inside UnixNano's range. max: another
// instance's clock (shared tier) may be ahead. Its arguments keep it under
// the inlining budget (go build -gcflags=-m), so the hit paths pay no call.
func age(loadedAt time.Time, now int64) time.Duration {
	if loadedAt.IsZero() {
		return 0
	}
	return max(time.Duration(now-loadedAt.UnixNano()), 0)
}

// admit refuses every call after Close, every call whose ctx has ended,
// and every key the Cache does not handle: empty, longer than MaxKeyLen
// bytes, or not valid UTF-8. The *KeyError says why without echoing the
// key: keys are request input, and logging them invites log injection and
// data leaks.
func (c *Cache[V]) admit(ctx context.Context, key string) error {
	if c.coh.Closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return &KeyError{Reason: "empty"}
	case len(key) > c.opts.MaxKeyLen:
		return &KeyError{Reason: fmt.Sprintf("%d bytes, longer than MaxKeyLen %d", len(key), c.opts.MaxKeyLen)}
	case !utf8.ValidString(key):
		return &KeyError{Reason: "not valid UTF-8"}
	}
	return nil
}

// Set stores v under key in every tier, with the Cache's TTL, tagged with
// the tags of WithTags on ctx, if any. It wins over a
// load of key in flight: that load's write-back is skipped, and later Gets
// never share that load. A shared-tier failure is returned (the local tier
// has v by then); a value the codec cannot encode is removed from the
// shared tier rather than left stale there. A caller whose ctx has ended
// gets ctx.Err() and nothing is written; once started, the shared write is
// bounded by SharedTimeout, not by ctx.
//
// With a Bus, Set then publishes an Invalidation, so that other instances
// drop their older copies; if that fails, the error matches
// ErrNotPublished (the write itself took effect).
//
// A panic in a store or the codec goes on to the caller, and leaves the key
// as usable as before.
func (c *Cache[V]) Set(ctx context.Context, key string, v V) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(ctx, key); err != nil {
		return err
	}
	tags, err := explicitTags(ctx)
	if err != nil {
		return err
	}
	if c.opts.Clone != nil {
		v = c.opts.Clone(v)
	}
	now := c.opts.Now()
	// The Set's version: the instant its data was made, on the wall
	// clock, read precisely. It is the Version of the very entry the
	// other instances read from the shared tier, and the Version of the
	// Invalidation they hear of.
	version := time.Now().Round(0)
	it := driver.Item[V]{Value: v, Meta: driver.Meta{LoadedAt: now, Version: version, Tags: tags}}
	it.FreshUntil = now.Add(c.jittered(c.opts.TTL))
	it.StaleUntil = it.FreshUntil.Add(c.opts.StaleFor)
	var (
		e      driver.Entry
		encErr error
	)
	if c.opts.Shared != nil {
		e, encErr = c.encode(&it)
	}
	if encErr == nil {
		// Before the write: from now on this instance takes no shared
		// entry read before it for newer (see coherence.Ledger).
		c.fenceKey(ctx, key, version, coherence.FromWrite)
	}
	it.FilledAt = now
	err = c.explicit(ctx, key, func() error {
		if c.opts.Local != nil {
			c.opts.Local.Set(key, it)
		}
		if c.opts.Shared == nil {
			return nil
		}
		if encErr != nil {
			if err := c.deleteShared(ctx, key); err != nil {
				return fmt.Errorf("%w (and removing the old shared entry failed: %w)", encErr, err)
			}
			return encErr
		}
		return c.setShared(ctx, key, e)
	})
	if err != nil {
		c.writeFailed(ctx, driver.TierShared, err)
	}
	if encErr != nil {
		version = time.Now() // the shared entry is gone, not replaced
		c.fenceKey(ctx, key, version, coherence.FromWrite)
	}
	return joinPublished(err, c.announce(ctx, driver.InvalidationKey, key, version, err != nil))
}

// joinPublished adds the error of announcing a write to the write's own.
func joinPublished(err, perr error) error {
	if perr == nil {
		return err
	}
	if err == nil {
		return perr
	}
	return errors.Join(err, perr)
}

// explicit runs an explicit write (Set, Delete) of key so that it wins over
// the read path: loads in flight skip their write-back (coherence.Model.Explicit), and a
// Get that starts after the write returns does not join a load that started
// before it, since that load read the origin before the caller's change.
//
// In cluster mode it first fences the key through the Coordinator, so that
// loads in flight on other instances lose their write-back too; a failure
// to fence is returned with the write's result, and the write still runs.
func (c *Cache[V]) explicit(ctx context.Context, key string, write func() error) error {
	defer c.group.Forget(key)
	if c.opts.Coordinator == nil {
		return c.coh.Explicit(key, c.opts.Now(), write)
	}
	return c.coh.Explicit(key, c.opts.Now(), func() error {
		// Not the caller's cancellation: the write below ignores it too
		// (a write once started completes or times out), and an unfenced
		// write would lose to an older load of another instance. The
		// Coordinator bounds its own calls.
		ferr := c.opts.Coordinator.Invalidate(context.WithoutCancel(ctx), key)
		if ferr != nil {
			ferr = fmt.Errorf("%w: fence the key: %w", ErrCoordinatorUnavailable, ferr)
		}
		return errors.Join(write(), ferr)
	})
}

// Delete removes key from every tier. It wins over a load of key in flight:
// that load's write-back is skipped, and a Get that starts after Delete
// returns starts a new load instead of sharing that one (its callers, who
// asked before Delete, still get its value). A shared-tier failure is
// returned. Like Set, it does nothing for a caller whose ctx has ended,
// and with a Bus it publishes an Invalidation (ErrNotPublished if that
// fails).
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(ctx, key); err != nil {
		return err
	}
	c.fenceKey(ctx, key, time.Now(), coherence.FromWrite)
	err := c.explicit(ctx, key, func() error {
		if c.opts.Local != nil {
			c.opts.Local.Delete(key)
		}
		if c.opts.Shared != nil {
			return c.deleteShared(ctx, key)
		}
		return nil
	})
	if err != nil {
		c.writeFailed(ctx, driver.TierShared, err)
	}
	version := time.Now()
	c.fenceKey(ctx, key, version, coherence.FromWrite)
	return joinPublished(err, c.announce(ctx, driver.InvalidationKey, key, version, err != nil))
}

// Close stops background refreshes and the engine: running loads have their
// context cancelled (cause singleflight.ErrClosed), their callers get
// ErrClosed, and a load that finishes anyway writes nothing. Close waits for
// the background refreshes to return. Later calls fail with ErrClosed.
// Close does not close the stores, which the caller owns. It is idempotent.
func (c *Cache[V]) Close() error {
	if !c.coh.Close() {
		return nil
	}
	// Wait out any startRefresh that saw the Cache open: after this, bg's
	// count is final.
	c.mu.Lock()
	//lint:ignore SA2001 the empty critical section is the point: it orders Close after startRefresh
	c.mu.Unlock()
	// The redo first: a redo publishing now would wait out its echo on a
	// subscription about to end.
	c.redo.Close()
	if c.busStop != nil {
		c.busStop()
	}
	err := c.group.Close()
	c.bg.Wait()
	return err
}

// fill is the read path's write of it to the local tier (a copy of a
// shared hit, a leader's loaded value after its fenced write; a load's
// write-back, which needs neither of fill's answers, hands fillLocked to
// Model.Fill itself) under ticket t, under the key's lock and the bulk
// lock (coherence.Model.Fill). fromTier says it is an entry as a tier
// held it (coherence.Read.FromTier). It returns the fresh copy held that
// is newer than it when there is one: a shared read serves that instead,
// or, if the copy is untrusted (the Bus is down), treats the entry as
// absent and loads (the load paths serve their own value: their callers
// asked before the held copy arrived). older reports an item read before
// something this instance already filled, served, wrote or was told of: a
// shared read treats it as absent.
func (c *Cache[V]) fill(t coherence.Ticket, key string, it *driver.Item[V], fromTier bool) (newer *driver.Item[V], older bool) {
	c.coh.Fill(t, key, func(current bool) (stored bool) {
		stored, newer, older = c.fillLocked(current, key, it, fromTier)
		return stored
	}, nil)
	return newer, older
}

// fillLocked is fill's decision (coherence.Model.DecideFill) and its local
// write, under the key's lock and the bulk lock.
func (c *Cache[V]) fillLocked(current bool, key string, it *driver.Item[V], fromTier bool) (stored bool, newer *driver.Item[V], older bool) {
	now := c.opts.Now()
	var held *driver.Item[V]
	if c.opts.Local != nil {
		held, _ = c.local.GetAt(key, now)
	}
	h := coherence.Held{}
	if held != nil {
		fresh := now.Before(held.FreshUntil) && c.tagsCover(held, now) == coherence.TagsClear
		h = coherence.Held{Present: true, Fresh: fresh, Version: held.Version}
	}
	switch c.coh.DecideFill(key, current, coherence.Read{Version: it.Version, FromTier: fromTier}, h, now) {
	case coherence.FillWrite:
		if c.opts.Local != nil {
			cp := *it
			cp.FilledAt = now
			c.opts.Local.Set(key, cp)
		}
		return true, nil, false
	case coherence.FillDropHeld:
		c.opts.Local.Delete(key)
	case coherence.FillServeHeld:
		return false, held, false
	case coherence.FillOlder:
		return false, nil, true
	}
	return false, nil, false
}

// jittered shortens d by a random fraction of at most c.jitter, so values
// loaded together do not all expire together.
func (c *Cache[V]) jittered(d time.Duration) time.Duration {
	if c.opts.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 - c.opts.Jitter*rand.Float64()))
}

// emit reports an event; c.obs is not nil.
func (c *Cache[V]) emit(ctx context.Context, kind driver.EventKind, tier driver.Tier, err error) {
	c.observe(driver.Event{Kind: kind, Ctx: ctx, Cache: c.opts.Name, Tier: tier, Err: err})
}

// observe hands e to the Observer. A panicking Observer loses its event and
// is logged (rate-limited), never re-raised: events are also reported from
// flight and refresh goroutines, where a panic would end the process.
func (c *Cache[V]) observe(e driver.Event) {
	defer c.recoverObserver()
	c.opts.Observer.ObserveCache(e)
}

// recoverObserver is deferred around every call into the Observer.
func (c *Cache[V]) recoverObserver() {
	p := recover()
	if p == nil {
		return
	}
	if ok, suppressed := c.observerLog.allow(); ok {
		c.opts.Logger.LogAttrs(context.Background(), slog.LevelError, "flightcache: Observer panicked; event dropped",
			slog.String("cache", c.opts.Name), slog.Any("panic", p), slog.Int64("suppressed", suppressed))
	}
}

// flightObserver is the Cache's Observer as its engine's, with the same
// protection against panics.
type flightObserver[V any] struct {
	c   *Cache[V]
	obs singleflight.Observer
}

func (f flightObserver[V]) ObserveFlight(e singleflight.Event) {
	defer f.c.recoverObserver()
	f.obs.ObserveFlight(e)
}

// readFailed reports a shared-tier read that counted as a miss. A read the
// breaker skipped is reported but not logged: the breaker's opening was.
func (c *Cache[V]) readFailed(ctx context.Context, err error) {
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventReadFailed, driver.TierShared, err)
	}
	if errors.Is(err, driver.ErrBreakerOpen) {
		return
	}
	if ok, suppressed := c.readLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: shared tier read failed; served as a miss",
			slog.String("cache", c.opts.Name), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
}

// writeFailed reports a failed tier write. Like readFailed, it does not log
// a write the breaker skipped.
func (c *Cache[V]) writeFailed(ctx context.Context, tier driver.Tier, err error) {
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventWriteFailed, tier, err)
	}
	if errors.Is(err, driver.ErrBreakerOpen) {
		return
	}
	if ok, suppressed := c.writeLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: tier write failed",
			slog.String("cache", c.opts.Name), slog.String("tier", tier.String()), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
}

// logLimiter lets one log line through per second and counts the rest, so
// a store outage produces a steady trickle of logs instead of one per Get.
type logLimiter struct {
	next       atomic.Int64 // unix nanoseconds before which lines are suppressed
	suppressed atomic.Int64
}

func (l *logLimiter) allow() (ok bool, suppressed int64) {
	now := time.Now().UnixNano()
	n := l.next.Load()
	if now < n || !l.next.CompareAndSwap(n, now+int64(time.Second)) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
