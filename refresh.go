package flightcache

import (
	"context"
	"errors"
	"github.com/flightcache/flightcache/driver"
	"log/slog"
	"math/rand/v2"
	"time"
)

// xfetchCutoff skips XFetch's random draw while expiry is more than this
// many Δ·β away. The draw would trigger there with probability e^-40 (about
// 4e-18), so skipping it changes nothing measurable and keeps the hit path
// free of the draw for all but the last moments of a value's life.
const xfetchCutoff = 40

// refreshDue is XFetch (Vattani, Chierichetti, Lowenstein, "Optimal
// Probabilistic Cache Stampede Prevention", VLDB 2015): refresh when
// now − Δ·β·ln(U) ≥ expiry, U uniform in (0,1]. −ln(U) is an exponential
// variate, drawn directly. The probability grows as expiry nears and with Δ,
// the time the value took to load, so slow values start refreshing earlier.
// A value with no recorded Δ (written by Set) is never refreshed early.
func (c *Cache[V]) refreshDue(m *driver.Meta, now time.Time) bool {
	d := float64(m.LoadDuration) * c.opts.Beta
	if d <= 0 {
		return false
	}
	gap := float64(m.FreshUntil.Sub(now))
	return gap <= d*xfetchCutoff && d*rand.ExpFloat64() >= gap
}

// startRefresh starts a background refresh of key unless one is already
// running, too many are, or the Cache is closed; it reports whether it
// started one. The refresh goes through the same flight as misses, so there
// is at most one load per key whichever triggered it.
func (c *Cache[V]) startRefresh(ctx context.Context, key string, load LoadFunc[V], freshUntil time.Time) bool {
	c.mu.Lock()
	if c.coh.Closed.Load() || len(c.refreshing) >= c.maxRefreshes {
		c.mu.Unlock()
		return false
	}
	if _, running := c.refreshing[key]; running {
		c.mu.Unlock()
		return false
	}
	m := &miss[V]{c: c, key: key, load: load, newerThan: freshUntil.UnixNano()}
	c.refreshing[key] = m
	c.bg.Add(1)
	c.mu.Unlock()
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventEarlyRefresh, driver.TierNone, nil)
	}
	// The refresh keeps the triggering request's values (trace IDs) but
	// not its cancellation: the request is answered already.
	go c.refresh(context.WithoutCancel(ctx), m)
	return true
}

func (c *Cache[V]) refresh(ctx context.Context, m *miss[V]) {
	defer c.bg.Done()
	_, _, err := c.group.Do(ctx, m.key, m.run)
	// run released the slot as soon as the new value was written; this
	// covers a refresh that joined another flight, or failed before that.
	c.refreshDone(m)
	if err = fromEngine(err); err != nil && !errors.Is(err, ErrClosed) {
		// The current value stays until it expires; the next miss retries.
		c.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "flightcache: early refresh failed",
			slog.String("cache", c.opts.Name), slog.Any("error", err))
	}
}

// refreshDone frees m's refresh slot of its key, if m still holds it. It
// runs as soon as the refreshed value is written, not when the goroutine
// gets round to it: until then, hits near expiry could not start the next
// refresh.
func (c *Cache[V]) refreshDone(m *miss[V]) {
	c.mu.Lock()
	if c.refreshing[m.key] == m {
		delete(c.refreshing, m.key)
	}
	c.mu.Unlock()
}
