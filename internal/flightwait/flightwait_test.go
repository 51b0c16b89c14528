package flightwait

import (
	"testing"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

type counting struct{ cache, flight int }

func (c *counting) ObserveCache(driver.Event)        { c.cache++ }
func (c *counting) ObserveFlight(singleflight.Event) { c.flight++ }

// Every event reaches the wrapped observer before a failure is signalled,
// and only failed flights are signalled.
func TestFailuresForwardsThenSignalsOnlyFailedFlights(t *testing.T) {
	inner := &counting{}
	f := New(inner)
	f.ObserveCache(driver.Event{})
	f.ObserveFlight(singleflight.Event{Kind: singleflight.EventLoaderSucceeded})
	f.ObserveFlight(singleflight.Event{Kind: singleflight.EventLoaderFailed})
	f.Await(t, 1)
	if inner.cache != 1 || inner.flight != 2 {
		t.Fatalf("forwarded %d cache and %d flight events, want 1 and 2", inner.cache, inner.flight)
	}
	select {
	case <-f.failed:
		t.Fatal("a flight that succeeded was signalled as failed")
	default:
	}
}

// Ends signals every loader's end, and nothing else.
func TestEndsSignalsEveryLoadersEnd(t *testing.T) {
	inner := &counting{}
	f := Ends(inner)
	for _, k := range []singleflight.EventKind{
		singleflight.EventLoaderStarted, singleflight.EventShared,
		singleflight.EventLoaderSucceeded, singleflight.EventLoaderFailed, singleflight.EventLoaderPanicked,
	} {
		f.ObserveFlight(singleflight.Event{Kind: k})
	}
	f.Await(t, 3)
	if inner.flight != 5 {
		t.Fatalf("forwarded %d flight events, want 5", inner.flight)
	}
	select {
	case <-f.failed:
		t.Fatal("an event that is not a loader's end was signalled")
	default:
	}
}
