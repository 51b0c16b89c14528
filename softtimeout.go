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

// doWithSoftTimeout runs m's flight but gives up waiting after the soft
// timeout (late is then true). The flight is not cancelled: the engine keeps
// running it for its other callers and for the write-back, bounded by the
// loader timeout and by Close.
func (c *Cache[V]) doWithSoftTimeout(ctx context.Context, m *miss[V]) (fl *flight[V], err error, late bool) {
	ch := c.group.DoChan(ctx, m.key, m.run)
	timer := time.NewTimer(c.opts.SoftTimeout)
	select {
	case r := <-ch:
		timer.Stop()
		return r.Val, r.Err, false
	case <-timer.C:
		return fl, nil, true
	}
}

// canServeStale reports whether a stale value may stand in for a load that
// ended with err. It may not when the caller itself left (it wants no
// answer) or the Cache is closing. err is the Cache's (see fromEngine).
func canServeStale(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, ErrClosed)
}
