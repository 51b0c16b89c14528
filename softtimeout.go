package flightcache

import (
	"context"
	"errors"
	"time"
)

// ErrSoftTimeout is the Err of the EventStaleServed reported when a stale
// value was served because the load outlasted Options.SoftTimeout. The load
// goes on in the background and refreshes the entry when it finishes.
var ErrSoftTimeout = errors.New("flightcache: load exceeded the soft timeout")

// doWithSoftTimeout runs m's flight but gives up waiting after wait (late
// is then true); with wait <= 0 it does not join the flight at all. The
// flight is not cancelled: the engine keeps running it for its other
// callers and for the write-back, bounded by the loader timeout and by
// Close.
func (c *Cache[V]) doWithSoftTimeout(ctx context.Context, m *miss[V], wait time.Duration) (fl *flight[V], err error, late bool) {
	if wait <= 0 {
		return nil, nil, true
	}
	ch := c.group.DoChan(ctx, m.key, m.run)
	timer := time.NewTimer(wait)
	select {
	case r := <-ch:
		timer.Stop()
		return r.Val, r.Err, false
	case <-timer.C:
		return fl, nil, true
	}
}

// loadStart is when a key's flight began to run in this process, on the
// Cache's clock: miss.run records it, with Options.SoftTimeout, for as
// long as it runs.
type loadStart struct{ at time.Time }

// softWait is how long a caller that has a stale value of key waits at
// now for the key's flight: SoftTimeout, less what the flight running in
// this process, if any, has already run. A caller that joins a load past
// its soft timeout is served the stale value at once: when the origin
// hangs, each request costs nothing more than the first one's wait,
// instead of a full SoftTimeout each.
func (c *Cache[V]) softWait(key string, now time.Time) time.Duration {
	wait := c.opts.SoftTimeout
	if v, ok := c.loadStarts.Load(key); ok {
		wait -= now.Sub(v.(*loadStart).at)
	}
	return wait
}

// canServeStale reports whether a stale value may stand in for a load that
// ended with err. It may not when the caller itself left (it wants no
// answer) or the Cache is closing. err is the Cache's (see fromEngine).
func canServeStale(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, ErrClosed)
}
