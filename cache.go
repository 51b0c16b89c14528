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
}

// Cache is a cache-aside read path that loads each missing key once. See the
// package documentation for the order of operations. A Cache is safe for
// concurrent use; build it with New.
type Cache[V any] struct {
	// Configuration, read-only after New.
	name         string
	local        LocalStore[V] // nil when the Cache has no local tier
	shared       SharedStore   // nil when the Cache has no shared tier
	codec        Codec[V]
	ttl          time.Duration
	negativeTTL  time.Duration
	jitter       float64
	staleFor     time.Duration
	softTimeout  time.Duration
	earlyRefresh bool
	beta         float64
	maxKeyLen    int
	clone        func(V) V
	obs          Observer // nil: no events, one nil check per site
	tracer       Tracer   // nil: no spans
	instrumented bool     // obs != nil || tracer != nil
	log          *slog.Logger
	now          func() time.Time
	// preciseLoadTime: Options.Now was left to its default, which may be a
	// coarse clock, so load durations are measured with time.Now instead.
	preciseLoadTime bool

	group    *singleflight.Group[string, *flight[V]]
	guard    writeGuard
	throttle *throttle // nil unless Options.FailureThrottle is set

	readLog, writeLog logLimiter

	closed atomic.Bool
	// mu orders background work against Close: a refresh is registered in
	// refreshing and counted in bg only under mu and only while !closed, so
	// once Close has passed mu, bg.Wait sees every refresh there will be.
	mu           sync.Mutex
	refreshing   map[string]*loadCall[V] // the background refresh running per key; guarded by mu
	maxRefreshes int
	bg           sync.WaitGroup
}

// defaultMaxRefreshes bounds concurrent background refreshes when
// Options.MaxInFlight does not.
const defaultMaxRefreshes = 4096

// New builds a Cache from opts, filling in defaults. It returns a
// *ConfigError (matching ErrInvalidConfig) for an out-of-range option.
func New[V any](opts Options[V]) (*Cache[V], error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	sfOpts := []singleflight.Option{
		singleflight.WithLoaderTimeout(o.LoaderTimeout),
		singleflight.WithMaxInFlight(o.MaxInFlight),
		singleflight.WithMaxWaiters(o.MaxWaiters),
	}
	if so, ok := o.Observer.(singleflight.Observer); ok {
		sfOpts = append(sfOpts, singleflight.WithObserver(so))
	}
	c := &Cache[V]{
		name:            o.Name,
		local:           o.Local,
		shared:          o.Shared,
		codec:           o.Codec,
		ttl:             o.TTL,
		negativeTTL:     o.NegativeTTL,
		jitter:          o.Jitter,
		staleFor:        o.StaleFor,
		softTimeout:     o.SoftTimeout,
		earlyRefresh:    o.EarlyRefresh,
		beta:            o.Beta,
		maxKeyLen:       o.MaxKeyLen,
		clone:           o.Clone,
		obs:             o.Observer,
		tracer:          o.Tracer,
		instrumented:    o.Observer != nil || o.Tracer != nil,
		log:             o.Logger,
		now:             o.Now,
		preciseLoadTime: opts.Now == nil,
		group:           singleflight.New[string, *flight[V]](sfOpts...),
		throttle:        newThrottle(o.FailureThrottle),
		refreshing:      make(map[string]*loadCall[V]),
		maxRefreshes:    defaultMaxRefreshes,
	}
	if o.MaxInFlight > 0 {
		c.maxRefreshes = o.MaxInFlight
	}
	return c, nil
}

// Get returns the value for key, loading it with load on a miss. It is the
// one-liner; use Fetch to learn the Outcome.
func (c *Cache[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	// Fetch's body, not a call to it: one frame less on the path of every
	// goroutine that waits for a load (see fetch).
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
	r, _, err := c.fetchSlow(ctx, key, load)
	return r.Value, err
}

// Fetch is Get that also reports how the value was served. The Result's
// Outcome is set on every return, errors included.
//
// The read path, in order: the local tier (a fresh hit returns at once); the
// shared tier (a read error counts as a miss; a hit fills the local tier);
// then, on a miss, one flight per key in which the tiers are checked again,
// the origin is called under the loader timeout, and the value is written
// back best-effort. With StaleFor, a value past its TTL stands in when the
// load fails or outlasts SoftTimeout.
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
	r, _, err := c.fetchSlow(ctx, key, load)
	return r, err
}

// loadInfo is what the Tracer learns about a Get's load.
type loadInfo struct {
	led     bool
	loadCtx context.Context
}

func (c *Cache[V]) fetchInstrumented(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	var endSpan func(GetSpanInfo)
	if c.tracer != nil {
		ctx, endSpan = c.tracer.StartGet(ctx, c.name)
	}
	var start time.Time
	if c.obs != nil {
		start = time.Now() // real time: a latency metric, whatever Options.Now says
	}
	r, info, err := c.fetch(ctx, key, load)
	if c.obs != nil {
		c.obs.ObserveCache(Event{Kind: EventGet, Ctx: ctx, Cache: c.name, Outcome: r.Outcome, Duration: time.Since(start), Err: err})
	}
	if endSpan != nil {
		endSpan(GetSpanInfo{Outcome: r.Outcome, Led: info.led, LoadCtx: info.loadCtx, Err: err})
	}
	return r, err
}

// fetch is the read path: the fast local hit, then everything else.
func (c *Cache[V]) fetch(ctx context.Context, key string, load LoadFunc[V]) (Result[V], loadInfo, error) {
	if r, ok, err := c.hitLocal(ctx, key, load); ok {
		return r, loadInfo{}, err
	}
	return c.fetchSlow(ctx, key, load)
}

// hitLocal is the local fresh hit (ok true), kept to one store lookup, one
// read of the (coarse, by default) clock and no allocation for pointer V;
// everything else is in fetchSlow. Callers call fetchSlow after hitLocal
// returned, not from inside it, so that hitLocal's frame (which holds an
// Item) is gone from the stack of the goroutines that wait for a load:
// thousands of fresh goroutines may wait on one key, and each has to grow
// its stack for every frame it stacks up before blocking.
//
// The hit skips the UTF-8 check of admit: only a key that was stored can
// hit, and every key is checked before anything is stored under it. The
// cheap checks (closed, length) stay, so a too-long key never reaches the
// store.
func (c *Cache[V]) hitLocal(ctx context.Context, key string, load LoadFunc[V]) (r Result[V], ok bool, err error) {
	if c.local == nil || len(key) == 0 || len(key) > c.maxKeyLen || c.closed.Load() {
		return r, false, nil
	}
	it, found := c.local.Get(key)
	if !found {
		return r, false, nil
	}
	now := c.now()
	if !now.Before(it.FreshUntil) {
		return r, false, nil
	}
	if it.NotFound || c.obs != nil || c.clone != nil || (c.earlyRefresh && load != nil) {
		r, _, err = c.serveFresh(ctx, key, load, it, now, TierLocal)
		return r, true, err
	}
	// serveFresh's common case, inline: the call and its wide result
	// were a third of a hit.
	r.Value, r.Outcome = it.Value, OutcomeHitLocal
	if !it.LoadedAt.IsZero() {
		r.Age = max(time.Duration(now.UnixNano()-it.LoadedAt.UnixNano()), 0)
	}
	return r, true, nil
}

// fetchSlow is the read path after the fast local hit failed: it checks the
// key fully, looks in the local tier again for a fresh item (one that
// arrived meanwhile) or a stale one to fall back on, and goes on to the
// shared tier and the flight.
func (c *Cache[V]) fetchSlow(ctx context.Context, key string, load LoadFunc[V]) (Result[V], loadInfo, error) {
	if err := c.admit(key); err != nil {
		return Result[V]{Outcome: OutcomeLoadFailed}, loadInfo{}, err
	}
	now := c.now()
	var stale *Item[V]
	if c.local != nil {
		it, fresh := c.localCandidate(key, now)
		if fresh {
			return c.serveFresh(ctx, key, load, it, now, TierLocal)
		}
		stale = it
		if c.obs != nil {
			c.emit(ctx, EventMiss, TierLocal, nil)
		}
	}
	return c.fetchMiss(ctx, key, load, now, stale)
}

// localCandidate returns the local item under key when it is fresh (fresh
// true) or servable as stale, else nil. It is the store's shared Item
// (read-only); holding it by pointer keeps the frames of callers that wait
// for a load small.
func (c *Cache[V]) localCandidate(key string, now time.Time) (*Item[V], bool) {
	it, ok := c.local.Get(key)
	if !ok {
		return nil, false
	}
	if now.Before(it.FreshUntil) {
		return it, true
	}
	if !it.NotFound && now.Before(it.StaleUntil) {
		return it, false
	}
	return nil, false
}

// admit refuses keys the Cache must not handle, and every call after Close.
func (c *Cache[V]) admit(key string) error {
	if c.closed.Load() {
		return singleflight.ErrClosed
	}
	if len(key) == 0 || len(key) > c.maxKeyLen || !utf8.ValidString(key) {
		return c.keyError(key)
	}
	return nil
}

// keyError explains why key was refused without echoing it: keys are
// request input, and logging them invites log injection and data leaks.
func (c *Cache[V]) keyError(key string) error {
	switch {
	case len(key) == 0:
		return &KeyError{Reason: "empty"}
	case len(key) > c.maxKeyLen:
		return &KeyError{Reason: fmt.Sprintf("%d bytes, longer than MaxKeyLen %d", len(key), c.maxKeyLen)}
	default:
		return &KeyError{Reason: "not valid UTF-8"}
	}
}

// serveFresh answers with a fresh item found in tier, starting an early
// refresh when XFetch says so.
func (c *Cache[V]) serveFresh(ctx context.Context, key string, load LoadFunc[V], it *Item[V], now time.Time, tier Tier) (Result[V], loadInfo, error) {
	var age time.Duration
	if !it.LoadedAt.IsZero() {
		// UnixNano, not Sub: Sub's overflow checks cost ~20 ns on the hit
		// path, and times of cached values are well inside UnixNano's
		// range. max: another instance's clock (shared tier) may be ahead.
		age = max(time.Duration(now.UnixNano()-it.LoadedAt.UnixNano()), 0)
	}
	if it.NotFound {
		if c.obs != nil {
			c.emit(ctx, EventNegativeHit, tier, nil)
		}
		return Result[V]{Outcome: OutcomeNegativeHit, Age: age}, loadInfo{}, ErrNotFound
	}
	if c.obs != nil {
		c.emit(ctx, EventHit, tier, nil)
	}
	outcome := OutcomeHitLocal
	if tier == TierShared {
		outcome = OutcomeHitShared
	}
	if c.earlyRefresh && load != nil && c.refreshDue(&it.Meta, now) && c.startRefresh(ctx, key, load, it.FreshUntil) {
		outcome = OutcomeRefreshed
	}
	v := it.Value
	if c.clone != nil {
		v = c.clone(v)
	}
	return Result[V]{Value: v, Outcome: outcome, Age: age}, loadInfo{}, nil
}

// fetchMiss continues the read path after the local tier had no fresh item;
// stale is the local fallback, if any.
func (c *Cache[V]) fetchMiss(ctx context.Context, key string, load LoadFunc[V], now time.Time, stale *Item[V]) (Result[V], loadInfo, error) {
	if c.shared != nil {
		it := c.sharedCandidate(ctx, key, now)
		if it != nil && now.Before(it.FreshUntil) {
			return c.serveFresh(ctx, key, load, it, now, TierShared)
		}
		if c.obs != nil {
			c.emit(ctx, EventMiss, TierShared, nil)
		}
		if it != nil && !it.NotFound && now.Before(it.StaleUntil) && (stale == nil || it.FreshUntil.After(stale.FreshUntil)) {
			stale = it
		}
	}
	if load == nil {
		return Result[V]{Outcome: OutcomeLoadFailed}, loadInfo{}, fmt.Errorf("flightcache: nil LoadFunc on a miss: %w", singleflight.ErrNilFunc)
	}

	lc := &loadCall[V]{c: c, key: key, load: load}
	var (
		fl  *flight[V]
		err error
	)
	if stale != nil && c.softTimeout > 0 {
		var late bool
		if fl, err, late = c.doWithSoftTimeout(ctx, lc); late {
			return c.serveStale(ctx, stale, now, ErrSoftTimeout, loadInfo{led: lc.led.Load()})
		}
	} else {
		fl, _, err = c.group.Do(ctx, key, lc.run)
	}
	return c.settle(ctx, lc, fl, err, stale, now)
}

// sharedCandidate reads key from the shared tier under a write-guard
// ticket (see readShared) and returns the item found, or nil. Like
// localCandidate it returns the item on the heap (the decode allocates
// anyway) to keep fetchMiss's frame small.
func (c *Cache[V]) sharedCandidate(ctx context.Context, key string, now time.Time) *Item[V] {
	t := c.guard.begin(key)
	it, ok := c.readShared(ctx, key, now, t)
	c.guard.end(key, t)
	if !ok {
		return nil
	}
	return &it
}

// readShared reads key from the shared tier and, when it finds an item that
// is still servable (fresh or stale), copies it into the local tier under
// ticket t. Read and decode errors count as misses.
func (c *Cache[V]) readShared(ctx context.Context, key string, now time.Time, t ticket) (Item[V], bool) {
	e, ok, err := c.shared.Get(ctx, key)
	if err != nil {
		if ctx.Err() == nil { // the caller leaving is not a store failure
			c.readFailed(ctx, err)
		}
		return Item[V]{}, false
	}
	if !ok || !now.Before(e.StaleUntil) {
		return Item[V]{}, false
	}
	it := Item[V]{Meta: e.Meta}
	if !e.NotFound {
		v, err := c.codec.Unmarshal(e.Value)
		if err != nil {
			c.readFailed(ctx, fmt.Errorf("flightcache: decode shared entry: %w", err))
			return Item[V]{}, false
		}
		it.Value = v
	}
	if c.local != nil {
		t.writeIf(func() { c.local.Set(key, it) })
	}
	return it, true
}

// settle turns the flight's answer into this caller's Result.
func (c *Cache[V]) settle(ctx context.Context, lc *loadCall[V], fl *flight[V], err error, stale *Item[V], now time.Time) (Result[V], loadInfo, error) {
	info := loadInfo{led: lc.led.Load()}
	if err != nil || fl == nil {
		if err == nil { // cannot happen: run returns a flight or an error
			err = errors.New("flightcache: internal error: flight without result")
		}
		if le, ok := err.(*loadError); ok {
			err, info.loadCtx = le.err, le.ctx
		}
		if stale != nil && canServeStale(ctx, err) {
			return c.serveStale(ctx, stale, now, err, info)
		}
		return Result[V]{Outcome: OutcomeLoadFailed}, info, err
	}
	info.loadCtx = fl.loadCtx
	r := Result[V]{Value: fl.item.Value}
	switch {
	case fl.found && fl.item.NotFound:
		r.Outcome = OutcomeNegativeHit
	case fl.found:
		r.Outcome = OutcomeCoalesced
	case info.led && fl.writeErr != nil:
		r.Outcome, r.WriteErr = OutcomeLoadedWriteFailed, fl.writeErr
	case info.led:
		r.Outcome = OutcomeLoaded
	default:
		r.Outcome = OutcomeCoalesced
	}
	if fl.found && !fl.item.LoadedAt.IsZero() {
		r.Age = max(now.Sub(fl.item.LoadedAt), 0)
	}
	if fl.item.NotFound {
		var zero V
		r.Value = zero
		if fl.notFound != nil {
			return r, info, fl.notFound
		}
		return r, info, ErrNotFound
	}
	if c.clone != nil {
		r.Value = c.clone(r.Value)
	}
	return r, info, nil
}

// Set stores v under key in every tier, with the Cache's TTL. It wins over a
// load of key in flight: that load's write-back is skipped, and later Gets
// never share that load. A shared-tier
// failure is returned (the local tier has v by then); a value the codec
// cannot encode is removed from the shared tier rather than left stale
// there.
func (c *Cache[V]) Set(ctx context.Context, key string, v V) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(key); err != nil {
		return err
	}
	if c.clone != nil {
		v = c.clone(v)
	}
	now := c.now()
	it := Item[V]{Value: v, Meta: Meta{LoadedAt: now}}
	it.FreshUntil = now.Add(c.jittered(c.ttl))
	it.StaleUntil = it.FreshUntil.Add(c.staleFor)
	var data []byte
	var encErr error
	if c.shared != nil {
		data, encErr = c.codec.Marshal(v)
		if encErr != nil {
			encErr = fmt.Errorf("flightcache: encode value: %w", encErr)
		}
	}
	err := c.explicit(key, func() error {
		if c.local != nil {
			c.local.Set(key, it)
		}
		if c.shared == nil {
			return nil
		}
		if encErr != nil {
			if err := c.shared.Delete(ctx, key); err != nil {
				return fmt.Errorf("%w (and removing the old shared entry failed: %w)", encErr, err)
			}
			return encErr
		}
		return c.shared.Set(ctx, key, Entry{Value: data, Meta: it.Meta})
	})
	if err != nil {
		c.writeFailed(ctx, TierShared, err)
	}
	return err
}

// explicit runs an explicit write (Set, Delete) of key so that it wins over
// the read path: loads in flight skip their write-back (writeGuard), and a
// Get that starts after the write returns does not join a load that started
// before it, since that load read the origin before the caller's change.
func (c *Cache[V]) explicit(key string, write func() error) error {
	err := c.guard.explicit(key, write)
	c.group.Forget(key)
	return err
}

// Delete removes key from every tier. It wins over a load of key in flight:
// that load's write-back is skipped, and a Get that starts after Delete
// returns starts a new load instead of sharing that one (its callers, who
// asked before Delete, still get its value). A shared-tier failure is
// returned.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(key); err != nil {
		return err
	}
	err := c.explicit(key, func() error {
		if c.local != nil {
			c.local.Delete(key)
		}
		if c.shared != nil {
			return c.shared.Delete(ctx, key)
		}
		return nil
	})
	if err != nil {
		c.writeFailed(ctx, TierShared, err)
	}
	return err
}

// Close stops background refreshes and the engine: running loads have their
// context cancelled (cause singleflight.ErrClosed) and Close waits for the
// background refreshes to return. Later calls fail with
// singleflight.ErrClosed. Close does not close the stores, which the caller
// owns. It is idempotent.
func (c *Cache[V]) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Wait out any startRefresh that saw the Cache open: after this, bg's
	// count is final.
	c.mu.Lock()
	//lint:ignore SA2001 the empty critical section is the point: it orders Close after startRefresh
	c.mu.Unlock()
	err := c.group.Close()
	c.bg.Wait()
	return err
}

// jittered shortens d by a random fraction of at most c.jitter, so values
// loaded together do not all expire together.
func (c *Cache[V]) jittered(d time.Duration) time.Duration {
	if c.jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 - c.jitter*rand.Float64()))
}

func (c *Cache[V]) emit(ctx context.Context, kind EventKind, tier Tier, err error) {
	c.obs.ObserveCache(Event{Kind: kind, Ctx: ctx, Cache: c.name, Tier: tier, Err: err})
}

// readFailed reports a shared-tier read that counted as a miss.
func (c *Cache[V]) readFailed(ctx context.Context, err error) {
	if c.obs != nil {
		c.emit(ctx, EventReadFailed, TierShared, err)
	}
	if ok, suppressed := c.readLog.allow(); ok {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: shared tier read failed; served as a miss",
			slog.String("cache", c.name), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
}

// writeFailed reports a failed tier write.
func (c *Cache[V]) writeFailed(ctx context.Context, tier Tier, err error) {
	if c.obs != nil {
		c.emit(ctx, EventWriteFailed, tier, err)
	}
	if ok, suppressed := c.writeLog.allow(); ok {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: tier write failed",
			slog.String("cache", c.name), slog.String("tier", tier.String()), slog.Any("error", err), slog.Int64("suppressed", suppressed))
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
