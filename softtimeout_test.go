package flightcache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// keysLeft signals each time a key leaves the Cache's engine (a flight
// deregistered), so that a test can wait for a finished flight to be gone
// rather than racing a new Get against its last steps.
type keysLeft chan struct{}

func (keysLeft) ObserveCache(driver.Event) {}

func (k keysLeft) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventInFlight && e.InFlightDelta < 0 {
		k <- struct{}{}
	}
}

// A hung origin costs the first caller of a key its SoftTimeout, not every
// caller: one that comes while the load runs waits only what is left of
// the load's SoftTimeout, and one that comes after it is served the stale
// value at once, without starting another load. The clock is the test's:
// the soft timeout is five minutes, so a caller that waited a full one
// would fail the test on its context's deadline.
func TestCallersOfALoadPastItsSoftTimeoutAreServedStaleAtOnce(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 4)}
	left := make(keysLeft, 8)
	c := clocked(t, clock, flightcache.Options[*product]{
		Local: local, TTL: time.Second, StaleFor: 24 * time.Hour,
		SoftTimeout: 5 * time.Minute, LoaderTimeout: 10 * time.Minute,
		Observer: left,
	})
	var o origin
	first := mustFetch(t, c, "p:1", o.load("1"))
	<-local.sets
	<-left
	clock.Advance(2 * time.Second) // stale

	started, release := make(chan struct{}), make(chan struct{})
	hung := func(ctx context.Context) (*product, error) {
		close(started)
		<-release
		return o.load("1")(ctx)
	}
	// The first caller leads the load and waits its soft timeout; it
	// leaves when the test ends.
	lctx, leave := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Fetch(lctx, "p:1", hung) //nolint:errcheck // it leaves
	}()
	<-started

	follow := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := c.Fetch(ctx, "p:1", func(context.Context) (*product, error) {
			t.Errorf("%s: a second load started while one runs", what)
			return nil, errors.New("unexpected load")
		})
		if err != nil || r.Outcome != flightcache.OutcomeStale || r.Value != first.Value {
			t.Fatalf("%s: %v, %v, %+v; want the stale value at once", what, r.Outcome, err, r.Value)
		}
	}
	// A millisecond before the load's soft deadline: the caller waits that
	// millisecond, not five minutes.
	clock.Advance(5*time.Minute - time.Millisecond)
	follow("a caller a millisecond before the load's soft timeout")
	// Past it: served at once, again and again.
	clock.Advance(2 * time.Minute)
	for range 3 {
		follow("a caller after the load's soft timeout")
	}

	// The load ends; its value is stored and served fresh.
	close(release)
	if it := <-local.sets; it.Value.Price != 2 {
		t.Fatalf("the load stored #%d, want #2", it.Value.Price)
	}
	leave()
	wg.Wait()
	<-left // the hung load's flight is gone: a later Get starts its own
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if r.Value.Price != 2 || o.calls.Load() != 2 {
		t.Fatalf("after the load: %+v with %d loads, want #2 and 2", r.Value, o.calls.Load())
	}
	// The next load of the key, after it went stale again, is waited for
	// by its first caller: nothing of the last one's start is left.
	clock.Advance(2 * time.Second)
	r = mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	if r.Value.Price != 3 {
		t.Fatalf("a new load's first caller got #%d, want #3", r.Value.Price)
	}
}
