package flightcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
	"github.com/flightcache/flightcache/internal/flightgroup"
)

// miss is one caller's way into the flight of its key. Every caller that
// missed makes one; only the leader's run executes, the others wait for its
// result. It is 64 bytes, one size class, and kept there (see
// TestMissFitsOneSixtyFourByteSizeClass): a stampede allocates one per
// caller.
type miss[V any] struct {
	c    *Cache[V]
	key  string
	load LoadFunc[V]
	// newerThan, set for an early refresh (the UnixNano of the FreshUntil
	// that prompted it; 0 for a miss), makes the double-check accept only a
	// value fresher than that one: the current value is still fresh, and
	// finding it is no reason to skip the refresh.
	newerThan int64
	// led is set when this miss's run executed, so the caller knows it led
	// the flight. Atomic because a caller that leaves early reads it while
	// run may still be going.
	led atomic.Bool
	// sharedDown is set when this caller's shared read timed out or the
	// breaker refused it. A leader that has it does not call the tier again
	// (no double-check there, no write-back): a Get pays at most one shared
	// timeout. Other errors do not count: calling again costs little, and a
	// write-back may repair an entry the read could not decode. Written by
	// the caller before the flight, then by run only.
	sharedDown sharedSkip
	// hasStale: the caller has a stale value to fall back on, so cluster
	// mode's wait bound serves it rather than loading. Written before the
	// flight, and by run when the flight's read-or-claim found a stale
	// entry (lookShared). (It fits in sharedDown's padding: the size stays
	// 64.)
	hasStale bool
	// readInFlight: the caller did not read the shared tier before the
	// flight; the flight's first Claim is that read (lookShared). Written
	// before the flight. (In the padding too.)
	readInFlight bool
	// forced: the miss is a Refresh's (refreshnow.go), which loads even
	// though a fresh value is held. Its double-check serves nothing, and
	// newerThan is then the read time (UnixNano, this Cache's clock) of
	// the newest value the flight found held, which it replaces: only a
	// value read later, handed over by a load it waited for (another
	// instance's, or a newer write's that refused its own), stands in for
	// its own load. Written before the flight; newerThan then by run only.
	// (In the padding too.)
	forced bool
	// loadCtx is the flight's loader context, for the Tracer. Written and
	// read by the caller only, after the flight answered.
	loadCtx context.Context
}

// flight is what one execution of a key's flight hands to every caller
// that shared it, with the loader's error if the load failed. The engine
// carries it by pointer: one allocation per load, and small stack frames for
// the thousands of goroutines that may wait on one key (a large result type
// made each of them grow its stack, which dominated the stampede profile).
type flight[V any] struct {
	item driver.Item[V]
	// found: the double-check found item in a tier; nothing was loaded.
	found bool
	// notFound is the loader's error when it said "not found" (item is then
	// a tombstone). It travels as a value, not as the flight's error, so
	// that the tombstone's write-back result reaches the callers too.
	notFound error
	// writeErr is the write-back's error; the value is good regardless.
	writeErr error
	// loadCtx is the context the Tracer's StartLoad returned (nil without a
	// Tracer), so that waiters can link to the load's span, also when the
	// load failed.
	loadCtx context.Context
	// remote: with found, the item is another instance's load, handed
	// over through the Coordinator (Result.Scope ScopeCluster).
	remote bool
	// uncached: the load stored nothing by design (OutcomeLoadedUncached).
	uncached bool
	// noStore: the loader called NoStore, so nothing was stored (the
	// Outcome stays OutcomeLoaded); a Refresh then announces nothing.
	noStore bool
	// sharedHit: with found, the item is a fresh shared entry the
	// flight's read-or-claim found (lookShared): every caller serves it as
	// a shared hit, as the read before the flight would have.
	sharedHit bool
	// stale is, when the flight ended in an error, a stale shared entry
	// its read-or-claim found: the callers' fallback, as the read before
	// the flight would have been.
	stale *driver.Item[V]
	// announced: a Refresh led this flight and published the new value's
	// Invalidation (see Refresh); a Refresh that joined it does not again.
	// Written by the leader before the flight's result is handed over.
	announced bool
}

// run is the flight, executed by the leader:
//
//  1. take a ticket (coherence.Model.Begin), before reading anything, so that a Set or
//     Delete that finishes after this point wins over whatever is written;
//  2. double-check both tiers (in cluster mode the shared tier's half is
//     read in the Coordinator's Claim: read-or-claim, see coordinated);
//  3. respect the failure throttle;
//  4. load, under LoaderTimeout: the origin's own deadline;
//  5. write back, best-effort, each shared call under SharedTimeout.
//
// Encoding for the shared tier is CPU work without a deadline. ctx is the
// engine's loader context, whose hard timeout covers steps 2 to 4 only:
// loadOrigin stops it once the loader has returned a value.
func (m *miss[V]) run(ctx context.Context) (*flight[V], error) {
	m.led.Store(true)
	c := m.c
	t := c.coh.Begin(m.key)
	defer c.coh.End(m.key, t)
	if c.opts.SoftTimeout > 0 {
		// The flight's start, for the callers with a stale value that come
		// while it runs (softWait). CompareAndDelete: a flight forgotten
		// and started again while this one ran has its own entry.
		st := &loadStart{at: c.opts.Now()}
		c.loadStarts.Store(m.key, st)
		defer c.loadStarts.CompareAndDelete(m.key, st)
	}

	// In cluster mode the Coordinator reads the shared tier in the step
	// that claims the key (read-or-claim, see coordinated): the
	// double-check reads only the local tier here.
	now := c.opts.Now()
	if m.forced {
		// A Refresh loads whatever is held; it only notes what it
		// replaces, for a wake-up in cluster mode (see coordinated).
		if c.opts.Local != nil {
			if it, ok := c.local.GetAt(m.key, now); ok {
				m.replaces(&it.Meta)
			}
		}
	} else if it, ok := m.recheck(ctx, now, t, nil, c.opts.Coordinator == nil); ok {
		return &flight[V]{item: it, found: true}, nil
	}
	if c.throttle != nil {
		if err := c.throttle.check(m.key, now); err != nil {
			if c.opts.Observer != nil {
				c.emit(ctx, driver.EventThrottled, driver.TierNone, err)
			}
			return nil, err
		}
	}
	if c.opts.Coordinator != nil {
		return m.coordinated(ctx, t)
	}
	fl, pol, err := m.loadOrigin(ctx)
	if err != nil {
		return fl, err
	}
	if fl.noStore = pol.noStore.Load(); !fl.noStore {
		fl.writeErr = m.writeBack(ctx, t, fl)
	}
	if m.newerThan != 0 {
		c.refreshDone(m)
	}
	return fl, nil
}

// recheck looks for a usable fresh item in the tiers again, inside the
// flight: another instance may have filled the shared tier, or an earlier
// flight the local one, since this caller missed. read, when not nil, is
// the key's shared entry already read in one step with something else (by
// the Coordinator's Claim, or with the refusal of this flight's fenced
// write, see completeLease): it stands in for the shared read. Without
// it, the shared tier is read only if look is set.
func (m *miss[V]) recheck(ctx context.Context, now time.Time, t coherence.Ticket, read *driver.Entry, look bool) (driver.Item[V], bool) {
	c := m.c
	usable := func(it *driver.Item[V]) bool {
		if m.forced {
			return now.Before(it.FreshUntil) && it.Version.UnixNano() > m.newerThan
		}
		return now.Before(it.FreshUntil) && it.FreshUntil.UnixNano() > m.newerThan
	}
	if c.opts.Local != nil {
		if it, ok := c.local.GetAt(m.key, now); ok && c.localState(it, now) == coherence.Fresh && usable(it) {
			return *it, true
		}
	}
	var it *driver.Item[V]
	switch {
	case read != nil:
		it = c.acceptShared(ctx, m.key, read, now, t)
	case look && c.opts.Shared != nil && m.sharedDown == sharedUsable:
		var err error
		it, err = c.readShared(ctx, m.key, now, t)
		m.sharedDown = unavailable(ctx, err)
	}
	if it != nil && usable(it) {
		return *it, true
	}
	return driver.Item[V]{}, false
}

// loadOrigin calls the loader under LoaderTimeout and makes the item to
// store from its answer, with the policy the loader set. A failed load
// returns a flight that carries only the loader context, for the Tracer.
func (m *miss[V]) loadOrigin(ctx context.Context) (*flight[V], *storePolicy, error) {
	c := m.c
	pol := new(storePolicy)
	// The origin's own deadline, inside the flight: ctx is the engine's
	// loader context on every path to here (run, lead, loadWithoutLease).
	// cancel, once the loader has returned, also releases the flight from
	// the engine's hard timeout: the value was loaded in time, and from
	// here that timeout could only lose it, whatever follows (a write-back
	// or a lease's completion: encoding has no deadline, and each shared or
	// coordinator call has its own).
	lctx, cancel := flightgroup.LoadContext(ctx, c.opts.LoaderTimeout)
	defer cancel()
	lctx = context.WithValue(lctx, policyKey{}, pol)
	var endSpan func(error)
	if c.opts.Tracer != nil {
		lctx, endSpan = c.opts.Tracer.StartLoad(lctx, c.opts.Name)
	}
	returned := false
	if endSpan != nil || c.throttle != nil || c.opts.Observer != nil {
		defer func() {
			if returned {
				return
			}
			// The loader panicked or called runtime.Goexit: the engine
			// turns that into the callers' error; close the span,
			// report the origin call and throttle the key as for any
			// failure.
			if endSpan != nil {
				endSpan(errLoaderAborted)
			}
			if c.opts.Observer != nil {
				c.observe(driver.Event{Kind: driver.EventOriginCall, Ctx: ctx, Cache: c.opts.Name,
					Err: &flightgroup.PanicError{Value: errLoaderAborted}})
			}
			if c.throttle != nil {
				c.throttle.fail(m.key, errLoaderAborted, c.opts.Now())
			}
		}()
	}

	// The load's end (end, the local item's LoadedAt) is on the Cache's
	// clock. Its duration (took: LoadDuration, XFetch's Δ) is on the
	// precise real clock when Options.Now was left to its default, which
	// may be coarse (see Cache.preciseLoadTime), so that sub-millisecond
	// loads keep a non-zero Δ. Its Version is the instant it began, read
	// precisely from the wall clock whatever Options.Now is: never a
	// conversion of the Cache's clock, whose lag (a tick, far more on a
	// starved host) would order two loads begun a moment apart the wrong
	// way round, and a fake clock none at all. (Inline, not a helper: a
	// cold Get's depth is kept, see internal/archtest; batch.go's load
	// does the same.)
	var start, wallStart time.Time
	if c.preciseLoadTime {
		start = time.Now()
		wallStart = start
	} else {
		start, wallStart = c.opts.Now(), time.Now()
	}
	v, err := m.load(lctx)
	returned = true
	end := c.opts.Now()
	took, version := end.Sub(start), wallStart.Round(0)
	if c.preciseLoadTime {
		took = time.Since(start)
	}
	if endSpan != nil {
		endSpan(err)
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventOriginCall, Ctx: ctx, Cache: c.opts.Name, Duration: took, Err: err})
	}
	fl := &flight[V]{}
	if c.opts.Tracer != nil {
		fl.loadCtx = lctx
	}

	ttl := min(time.Duration(pol.ttl.Load()), c.opts.MaxTTL) // SetTTL's, capped; 0: none
	switch {
	case err == nil:
		if ttl == 0 {
			ttl = c.jittered(c.opts.TTL)
		}
	case errors.Is(err, ErrNotFound):
		fl.notFound = err
		if ttl == 0 {
			ttl = c.jittered(c.opts.NegativeTTL)
		}
	default:
		if c.throttle != nil {
			c.throttle.fail(m.key, err, end)
		}
		return fl, pol, err
	}
	if c.throttle != nil {
		c.throttle.succeed(m.key)
	}
	fl.item = driver.Item[V]{Value: v, Meta: driver.Meta{LoadDuration: took, LoadedAt: end, Version: version, NotFound: fl.notFound != nil}}
	fl.item.FreshUntil = end.Add(ttl)
	fl.item.StaleUntil = fl.item.FreshUntil
	if !fl.item.NotFound {
		fl.item.StaleUntil = fl.item.StaleUntil.Add(c.opts.StaleFor)
	}
	if pol.tagged.Load() {
		c.tagLoaded(pol, fl)
	}
	return fl, pol, nil
}

// writeBack stores a loaded item in both tiers, best-effort, unless an
// explicit write of the key finished since t was taken or the Cache closed.
// The shared write has its own SharedTimeout, not the loader's, and is
// skipped when this Get already found the tier unavailable (sharedDown). A
// panic in a store or the codec becomes the returned error: the value was
// loaded and is still returned, and the key stays usable.
func (m *miss[V]) writeBack(ctx context.Context, t coherence.Ticket, fl *flight[V]) (err error) {
	c := m.c
	it := &fl.item
	// tier is the tier a failure is reported for: the shared tier's but
	// while the local tier's Set (a Cost function) runs.
	tier := driver.TierShared
	defer func() {
		if p := recover(); p != nil {
			// The panic value is not in the error: it may hold the key.
			err = fmt.Errorf("flightcache: write-back panicked (%T)", p)
		}
		if err != nil {
			c.writeFailed(ctx, tier, err)
		}
	}()
	// The local write, under the key's lock (coherence.Model.Fill); a
	// load serves its own value, so fill's answers (a newer held copy, an
	// older read) do not matter here and fillLocked is called directly.
	// A write-back the fill refuses (a newer write, invalidation or read
	// won, or the Cache closed) stores nothing in either tier: the
	// Outcome says so (OutcomeLoadedUncached), not that it was stored.
	local := func(current bool) bool {
		stored, _, _ := c.fillLocked(current, m.key, it, false)
		fl.uncached = !stored
		return stored
	}
	if c.opts.Shared == nil {
		// The local tier is all there is: nothing to encode, nothing to
		// write after the local fill.
		tier = driver.TierLocal
		c.coh.Fill(t, m.key, local, nil)
		return nil
	}
	var (
		e      driver.Entry
		encErr error
	)
	writeShared, skipErr := c.sharedWritable(m.sharedDown)
	if !writeShared && skipErr == nil && c.opts.Coordinator != nil {
		// A degraded flight (the Coordinator failed): it holds no lease,
		// so it writes the local tier only, and the Outcome says the
		// shared write did not happen (OutcomeLoadedWriteFailed).
		skipErr = errSkippedNoLease
	}
	if writeShared {
		e, encErr = c.encode(it)
	}
	tier = driver.TierLocal
	c.coh.Fill(t, m.key, local, func() {
		tier = driver.TierShared
		switch {
		case c.coh.Closed.Load():
			// Close came between the decision and the write: a load
			// that finishes after Close writes no tier.
		case !writeShared:
			err = skipErr
		case encErr != nil:
			err = encErr
		default:
			err = c.setShared(ctx, m.key, e)
		}
	})
	return err
}
