package flightcache

import (
	"context"
	"fmt"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// maxRefreshJoins bounds how many flights of its key a Refresh joins that
// only found the held value in a tier (see Refresh) before it answers with
// what the last one found.
const maxRefreshJoins = 3

// Refresh loads key now with load and replaces the held value with the
// result, in both tiers and with the same storing policy as a Get's load
// (SetTTL and NoStore on the loader's ctx apply), even when a fresh value
// is held. It goes through the key's flight: a load of key already running
// in this process, for a Get or another Refresh, is joined rather than
// started again, and in cluster mode a load running on another instance
// is waited for through the Coordinator. A fresh value stays servable
// while the load runs: Gets that find it do not wait.
//
// On success the new value is returned and, with a Bus, an Invalidation
// is published as for Set, so that the other instances drop their older
// local copies and their next Get reads the new shared entry (an error
// matching ErrNotPublished says that this failed; the new value is stored
// regardless). A loader's "not found" (ErrNotFound) replaces the value
// with a tombstone and is returned. On failure the held value is kept,
// and served as before, and the loader's error is returned; the failure
// throttle counts it as any failed load. A Set, Delete or invalidation of
// key that finishes while the Refresh loads wins over it, as over any
// load: the Refresh returns what it loaded and stores nothing.
//
// An invalid key is a *KeyError and a nil load an error matching
// singleflight.ErrNilFunc; a caller whose ctx has ended gets ctx.Err()
// and starts nothing, and one that leaves while the load runs gets
// ctx.Err() while the load goes on and stores its value. A Refresh is not
// a read: Observers see its flight's events (EventOriginCall, the lease
// and write events, EventInvalidationSent), not an EventGet.
func (c *Cache[V]) Refresh(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	var zero V
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(ctx, key); err != nil {
		return zero, err
	}
	if load == nil {
		return zero, fmt.Errorf("flightcache: nil LoadFunc for Refresh: %w", singleflight.ErrNilFunc)
	}
	var (
		fl   *flight[V]
		perr error // the announcement's error, written by lead before it returns
	)
	for range maxRefreshJoins {
		m := &miss[V]{c: c, key: key, load: load, forced: true}
		// Led by this Refresh, the flight announces the new value
		// itself, so that a caller who leaves does not keep the other
		// instances from hearing of the value it goes on to store.
		lead := func(ctx context.Context) (*flight[V], error) {
			fl, err := m.run(ctx)
			if err == nil && fl.storedLoad() {
				perr = c.announceRefresh(ctx, key, fl)
				fl.announced = true
			}
			return fl, err
		}
		var err error
		fl, _, err = c.group.Do(ctx, key, lead)
		if err != nil {
			return zero, fromEngine(err)
		}
		if !m.led.Load() && !fl.announced && fl.storedLoad() {
			// A joined load (a Get's) replaced the value too, and
			// nobody announced it.
			perr = c.announceRefresh(ctx, key, fl)
		}
		// A flight of this Refresh loaded or was handed a newer load; a
		// joined one loaded too, unless its double-check found the held
		// value in a tier (a Get's flight that missed only locally), which
		// is no refresh: run a flight of its own.
		if m.led.Load() || !fl.found || fl.remote {
			break
		}
	}
	r, err := c.answer(&fl.item, OutcomeLoaded, c.opts.Now(), fl.notFound)
	return r.Value, joinPublished(err, perr)
}

// storedLoad reports whether fl loaded a value (or a tombstone) and stored
// it: not a value found or handed over, not one a newer write superseded,
// not one its loader said NoStore of.
func (fl *flight[V]) storedLoad() bool {
	return !fl.found && !fl.uncached && !fl.noStore && !fl.item.Version.IsZero()
}

// announceRefresh tells the other instances, as Set does (announce), that
// the load fl replaced key's value: the Invalidation's version is the
// load's read time, exactly the read time of the shared entry it stored,
// so that the other instances drop their older local copies and fence
// older shared entries, but serve the new one. A value handed over by
// another instance's load (fl.found) is that instance's to announce.
// A shared write that failed is redone as Set's is (the shared entry is
// removed), so that no instance goes on reading the replaced value there.
func (c *Cache[V]) announceRefresh(ctx context.Context, key string, fl *flight[V]) error {
	version := fl.item.Version
	return c.announce(ctx, driver.InvalidationKey, key, version, c.opts.Shared != nil && fl.writeErr != nil)
}

// replaces notes in a Refresh's miss (forced) that the value it loads
// replaces one read at held.Version: only a value read later may stand in
// for its load.
func (m *miss[V]) replaces(held *driver.Meta) {
	if r := held.Version.UnixNano(); r > m.newerThan {
		m.newerThan = r
	}
}
