package flightcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// flight is what one execution of the read path's flight hands to every
// caller that shared it. The engine carries it by pointer: one allocation
// per load, and small stack frames for the thousands of goroutines that
// may wait on one key (a large result type made each of them grow its
// stack, which dominated the stampede profile).
type flight[V any] struct {
	item Item[V]
	// found: the double-check found item in a tier; nothing was loaded.
	found bool
	// notFound is the loader's error when it said "not found" (item is then
	// a tombstone). It travels as a value, not as the flight's error, so
	// that the tombstone's write-back result reaches the callers too.
	notFound error
	// writeErr is the write-back's error; the value is good regardless.
	writeErr error
	// loadCtx is the context the Tracer's StartLoad returned (nil without a
	// Tracer), so that waiters can link to the load's span.
	loadCtx context.Context
}

// loadError carries a failed load's context back to the callers beside the
// loader's error; the Cache unwraps it before returning, so callers see the
// loader's error itself.
type loadError struct {
	err error
	ctx context.Context
}

func (e *loadError) Error() string { return e.err.Error() }
func (e *loadError) Unwrap() error { return e.err }

// loadCall is one caller's request for a flight. Only the leader's loadCall
// runs; the others' just wait for its result.
type loadCall[V any] struct {
	c    *Cache[V]
	key  string
	load LoadFunc[V]
	// newerThan, set for an early refresh, makes the double-check accept
	// only a value fresher than the one whose expiry prompted the refresh:
	// the current value is still fresh, and finding it is no reason to skip
	// the refresh.
	newerThan time.Time
	// led is set when this call's run executed, so the caller knows it led
	// the flight. Atomic because a caller that leaves early reads it while
	// run may still be going.
	led atomic.Bool
}

// run is the flight: double-check the tiers, respect the failure throttle,
// load, write back.
func (lc *loadCall[V]) run(ctx context.Context) (*flight[V], error) {
	lc.led.Store(true)
	c := lc.c
	// The ticket is taken before anything is read, so a Set or Delete that
	// finishes after this point wins over whatever this flight would write.
	t := c.guard.begin(lc.key)
	defer c.guard.end(lc.key, t)

	now := c.now()
	if it, ok := c.recheck(ctx, lc.key, now, t, lc.newerThan); ok {
		return &flight[V]{item: it, found: true}, nil
	}
	if c.throttle != nil {
		if err := c.throttle.check(lc.key, now); err != nil {
			if c.obs != nil {
				c.emit(ctx, EventThrottled, TierNone, err)
			}
			return nil, err
		}
	}
	return lc.loadAndStore(ctx, t)
}

// recheck looks for a usable fresh item in the tiers again, inside the
// flight: another instance may have filled the shared tier, or an earlier
// flight the local one, since this caller missed.
func (c *Cache[V]) recheck(ctx context.Context, key string, now time.Time, t ticket, newerThan time.Time) (Item[V], bool) {
	usable := func(it *Item[V]) bool {
		return now.Before(it.FreshUntil) && it.FreshUntil.After(newerThan)
	}
	if c.local != nil {
		if it, ok := c.local.Get(key); ok && usable(it) {
			return *it, true
		}
	}
	if c.shared != nil {
		if it, ok := c.readShared(ctx, key, now, t); ok && usable(&it) {
			return it, true
		}
	}
	return Item[V]{}, false
}

func (lc *loadCall[V]) loadAndStore(ctx context.Context, t ticket) (*flight[V], error) {
	c := lc.c
	pol := new(loadPolicy)
	lctx := context.WithValue(ctx, policyKey{}, pol)
	var endSpan func(error)
	if c.tracer != nil {
		lctx, endSpan = c.tracer.StartLoad(lctx, c.name)
	}
	returned := false
	if endSpan != nil || c.throttle != nil {
		defer func() {
			if returned {
				return
			}
			// The loader panicked or called runtime.Goexit: the engine
			// turns that into the callers' error; close the span and
			// throttle the key as for any failure.
			if endSpan != nil {
				endSpan(errLoaderAborted)
			}
			if c.throttle != nil {
				c.throttle.fail(lc.key, errLoaderAborted, c.now())
			}
		}()
	}

	start := c.now()
	var realStart time.Time
	if c.preciseLoadTime {
		realStart = time.Now()
	}
	v, err := lc.load(lctx)
	returned = true
	end := c.now()
	took := end.Sub(start)
	if c.preciseLoadTime {
		took = time.Since(realStart)
	}
	if endSpan != nil {
		endSpan(err)
	}
	fl := &flight[V]{}
	if c.tracer != nil {
		fl.loadCtx = lctx
	}

	ttl := time.Duration(pol.ttl.Load())
	switch {
	case err == nil:
		if ttl == 0 {
			ttl = c.jittered(c.ttl)
		}
	case errors.Is(err, ErrNotFound):
		fl.notFound = err
		if ttl == 0 {
			ttl = c.jittered(c.negativeTTL)
		}
	default:
		if c.throttle != nil {
			c.throttle.fail(lc.key, err, end)
		}
		return nil, &loadError{err: err, ctx: fl.loadCtx}
	}
	if c.throttle != nil {
		c.throttle.succeed(lc.key)
	}

	fl.item = Item[V]{Value: v, Meta: Meta{LoadDuration: took, LoadedAt: end, NotFound: fl.notFound != nil}}
	fl.item.FreshUntil = end.Add(ttl)
	fl.item.StaleUntil = fl.item.FreshUntil
	if !fl.item.NotFound {
		fl.item.StaleUntil = fl.item.StaleUntil.Add(c.staleFor)
	}
	if !pol.noStore.Load() {
		fl.writeErr = c.writeBack(ctx, lc.key, t, &fl.item)
	}
	if !lc.newerThan.IsZero() {
		c.refreshDone(lc)
	}
	return fl, nil
}

// writeBack stores a loaded item in both tiers, best-effort, unless an
// explicit write of the key finished since t was taken. It runs on the
// flight's context, so the loader timeout bounds it too.
func (c *Cache[V]) writeBack(ctx context.Context, key string, t ticket, it *Item[V]) error {
	var data []byte
	var err error
	if c.shared != nil && !it.NotFound {
		if data, err = c.codec.Marshal(it.Value); err != nil {
			err = fmt.Errorf("flightcache: encode value: %w", err)
		}
	}
	t.writeIf(func() {
		if c.local != nil {
			c.local.Set(key, *it)
		}
		if c.shared != nil && err == nil {
			err = c.shared.Set(ctx, key, Entry{Value: data, Meta: it.Meta})
		}
	})
	if err != nil {
		c.writeFailed(ctx, TierShared, err)
	}
	return err
}
