// Package flightwait lets a test wait for the engine's report of a flight's
// end. The engine reports how a loader ended (singleflight's
// EventLoaderSucceeded, EventLoaderFailed, EventLoaderPanicked) after it
// released the flight's callers, so a test that reads an observer's
// counters right after a Get returns can miss it; wrapping the observer in
// a Failures (or an Ends) and calling Await first cannot.
package flightwait

import (
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// Observer is an observer of both the Cache's and the engine's events, as
// the metrics adapters are.
type Observer interface {
	ObserveCache(driver.Event)
	ObserveFlight(singleflight.Event)
}

// Failures forwards every event to the observer it wraps, then signals
// each failed flight (or, made by Ends, each flight's end). Make it with
// New or Ends.
type Failures struct {
	obs    Observer
	failed chan struct{}
	ends   bool // signal every loader's end, not only failures
}

// New wraps obs, signalling failed flights. Up to 64 may be reported before
// Await reads them.
func New(obs Observer) Failures {
	return Failures{obs: obs, failed: make(chan struct{}, 64)}
}

// Ends wraps obs, signalling every flight whose loader ended: succeeded,
// failed or panicked. Up to 64 may be reported before Await reads them.
func Ends(obs Observer) Failures {
	return Failures{obs: obs, failed: make(chan struct{}, 64), ends: true}
}

// ObserveCache forwards e.
func (f Failures) ObserveCache(e driver.Event) { f.obs.ObserveCache(e) }

// ObserveFlight forwards e, then signals it if it is a failed flight (with
// Ends, any loader's end).
func (f Failures) ObserveFlight(e singleflight.Event) {
	f.obs.ObserveFlight(e)
	switch e.Kind {
	case singleflight.EventLoaderFailed:
		f.failed <- struct{}{}
	case singleflight.EventLoaderSucceeded, singleflight.EventLoaderPanicked:
		if f.ends {
			f.failed <- struct{}{}
		}
	}
}

// Await waits for n signalled flights, failing t after 10 seconds.
func (f Failures) Await(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-f.failed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d failed flights reported within 10s", i, n)
		}
	}
}
