// Package clock provides Coarse, a clock that is cheap to read: a goroutine
// reads the real time once per resolution and readers load the last value
// from one atomic word.
//
// On many virtual machines (kvm-clock, Xen) time.Now costs 30-80 ns, more
// than a whole lookup in an in-memory cache. A cache hit needs the time only
// to compare it with an expiry that is seconds to hours away, so a time that
// lags by up to a millisecond is as good and costs ~1 ns. flightcache's
// memstore uses one when asked to (memstore.Options.ClockResolution; by
// default it reads the real clock, through Monotonic), and a
// flightcache.Cache then reads it through the local tier.
//
// The package is standard library only, like the rest of flightcache's core.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// Coarse is a clock that lags the real time by up to its resolution (more
// when its goroutine cannot run in time) and never runs ahead of it. It is
// safe for concurrent use.
//
// Invariant: now holds the Unix nanoseconds the goroutine read last, or 0
// once the clock is stopped; readers then fall back to time.Now, so a
// stopped clock is still correct, only slower.
//
// The goroutine holds the clock through a weak pointer: if the owner forgets
// Stop, it ends at the first tick after the clock has been garbage
// collected. Stop ends it at once and waits for it, which tests that check
// for leaked goroutines need.
type Coarse struct {
	now      atomic.Int64
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// DefaultResolution is NewCoarse's default and the resolution to give
// memstore's ClockResolution: fine enough for expiries of a second and
// more, rare enough (1000 wake-ups a second) to cost nothing measurable.
const DefaultResolution = time.Millisecond

// NewCoarse starts a Coarse clock that reads the time once per resolution.
// A resolution <= 0 means DefaultResolution.
func NewCoarse(resolution time.Duration) *Coarse {
	if resolution <= 0 {
		resolution = DefaultResolution
	}
	c := &Coarse{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(time.Now().UnixNano())
	go run(weak.Make(c), resolution, c.stop, c.done)
	return c
}

func run(wc weak.Pointer[Coarse], resolution time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c := wc.Value()
			if c == nil {
				return
			}
			c.now.Store(time.Now().UnixNano())
		}
	}
}

// NowNano returns the Unix nanoseconds the clock read last (the precise time
// once the clock is stopped). It is otter.Clock's NowNano, so a Coarse can
// be an otter cache's clock.
func (c *Coarse) NowNano() int64 {
	if n := c.now.Load(); n != 0 {
		return n
	}
	return time.Now().UnixNano()
}

// Now is NowNano as a time.Time (without a monotonic reading, in UTC's
// location-free form time.Unix returns).
func (c *Coarse) Now() time.Time {
	if n := c.now.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Now()
}

// Tick returns the ticks of a real-time ticker, as time.Tick does; with
// NowNano it makes Coarse an otter.Clock.
func (c *Coarse) Tick(d time.Duration) <-chan time.Time {
	return time.Tick(d)
}

// Stop ends the clock's goroutine and waits for it. The clock keeps working
// after Stop, reading the precise time on every call, so it is safe to stop
// it while caches still use it. Stop is idempotent.
func (c *Coarse) Stop() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
	c.now.Store(0)
}

// epoch anchors Monotonic.
var epoch = time.Now()

// Monotonic returns the current time read through the monotonic clock alone:
// the wall time at process start plus the monotonic time elapsed since. It
// is one clock read where time.Now makes two, which matters on virtual
// machines whose clock reads are slow, and for expiry decisions it is the
// right clock anyway: it ignores wall-clock steps, as time.Time comparisons
// of in-process times do.
func Monotonic() time.Time { return epoch.Add(time.Since(epoch)) }
