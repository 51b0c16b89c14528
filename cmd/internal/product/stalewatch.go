package product

import (
	"context"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// staleNote is where a Get learns why the Cache served it a stale value:
// QueryService.Get puts one in the context of each Fetch, and the observer
// WatchStale returns fills it from the EventStaleServed the Cache reports
// with that context. Written once, by the goroutine running Fetch, before
// Fetch returns; read after.
type staleNote struct{ why error }

type staleNoteKey struct{}

// WatchStale returns the Observer to give a Cache that a QueryService
// reads through: it passes every event on to next (which may be nil, and
// sees engine events too when it implements singleflight.Observer), and
// for each stale value served it records why on the Get (Served.StaleCause)
// and calls onHidden (if not nil) with the caller's context and the reason
// the origin did not deliver: the error a stale value hid from the client.
func WatchStale(next driver.Observer, onHidden func(ctx context.Context, why error)) driver.Observer {
	w := &staleWatcher{next: next, onHidden: onHidden}
	w.flight, _ = next.(singleflight.Observer)
	return w
}

type staleWatcher struct {
	next     driver.Observer
	flight   singleflight.Observer
	onHidden func(context.Context, error)
}

func (w *staleWatcher) ObserveCache(e driver.Event) {
	if e.Kind == driver.EventStaleServed && e.Ctx != nil {
		if n, ok := e.Ctx.Value(staleNoteKey{}).(*staleNote); ok {
			n.why = e.Err
		}
		if w.onHidden != nil {
			w.onHidden(e.Ctx, e.Err)
		}
	}
	if w.next != nil {
		w.next.ObserveCache(e)
	}
}

func (w *staleWatcher) ObserveFlight(e singleflight.Event) {
	if w.flight != nil {
		w.flight.ObserveFlight(e)
	}
}
