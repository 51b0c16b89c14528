package flightcache

import (
	"context"

	"github.com/flightcache/flightcache/internal/coherence"
)

// Peek returns the fresh value a Get of key would serve from the tiers,
// and whether there is one, without loading and without joining or
// starting a flight. It looks where a Get looks, in the same order and
// under the same rules: the local tier, then (with a Guard that lets the
// key through) the shared tier, whose hit is copied into the local tier
// as a Get's is. So it never returns a value a Get would not serve: one
// past its TTL (even with StaleFor), one that an explicit write, an
// invalidation or a fence has superseded, or a local copy not trusted
// while the Bus is down. A cached "not found" (a tombstone) reads as
// absent. So does a tier that fails: the shared read is bounded by
// SharedTimeout (and skipped while the SharedBreaker is open), and its
// failure is reported as a Get's would be. An invalid key, a ctx that has
// ended and a closed Cache read as absent too.
func (c *Cache[V]) Peek(ctx context.Context, key string) (V, bool) {
	var zero V
	if ctx == nil {
		ctx = context.Background()
	}
	if c.admit(ctx, key) != nil {
		return zero, false
	}
	now := c.opts.Now()
	if c.opts.Local != nil {
		if it, ok := c.opts.Local.Get(key); ok && c.localState(it, now) == coherence.Fresh {
			if it.NotFound { // a Get would answer ErrNotFound here
				return zero, false
			}
			r, _ := c.answer(it, OutcomeHitLocal, now, nil)
			return r.Value, true
		}
	}
	if c.opts.Shared == nil || (c.opts.Guard != nil && c.filtered(ctx, key)) {
		return zero, false
	}
	it, _ := c.readSharedGuarded(ctx, key, now)
	if it == nil || it.NotFound || !now.Before(it.FreshUntil) {
		return zero, false
	}
	r, _ := c.answer(it, OutcomeHitShared, now, nil)
	return r.Value, true
}
