// Package flightwait lets a test wait for the engine's report of a failed
// flight. The engine reports a flight's failure (singleflight's
// EventLoaderFailed) after it released the flight's callers, so a test
// that reads an observer's counters right after a Get returns can miss
// it; wrapping the observer in a Failures and calling Await first cannot.
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
// each failed flight. Make it with New.
type Failures struct {
	obs    Observer
	failed chan struct{}
}

// New wraps obs. Up to 64 failures may be reported before Await reads them.
func New(obs Observer) Failures {
	return Failures{obs: obs, failed: make(chan struct{}, 64)}
}

// ObserveCache forwards e.
func (f Failures) ObserveCache(e driver.Event) { f.obs.ObserveCache(e) }

// ObserveFlight forwards e, then signals it if it is a failed flight.
func (f Failures) ObserveFlight(e singleflight.Event) {
	f.obs.ObserveFlight(e)
	if e.Kind == singleflight.EventLoaderFailed {
		f.failed <- struct{}{}
	}
}

// Await waits for n failed flights, failing t after 10 seconds.
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
