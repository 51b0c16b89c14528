package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/flightstats"
	"github.com/flightcache/flightcache/internal/flightwait"
)

// gatedOrigin is a loader that signals its start, then holds until the
// test opens its gate, and counts its calls.
type gatedOrigin struct {
	calls   atomic.Int64
	started chan struct{} // closed by the first call
	gate    chan struct{} // closed by the test to let the calls return
}

func newGatedOrigin() *gatedOrigin {
	return &gatedOrigin{started: make(chan struct{}), gate: make(chan struct{})}
}

func (o *gatedOrigin) load(ctx context.Context) (*product, error) {
	if o.calls.Add(1) == 1 {
		close(o.started)
	}
	<-o.gate
	return &product{ID: "k", Price: 1}, nil
}

func (o *gatedOrigin) loadMany(ctx context.Context, keys []string) (map[string]*product, error) {
	v, err := o.load(ctx)
	return map[string]*product{keys[0]: v}, err
}

// A caller that leaves while the load it waits for still runs gets its
// ctx's error and OutcomeCallerLeft, which no observer counts as a
// failure; the load goes on, fills the tier, and the next Get hits. The
// caller may leave by cancellation or by its deadline, from Fetch or
// FetchMany.
func TestCallerWhoLeavesMidLoadIsNotAFailedLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T) (context.Context, func()) // the ctx, and what makes it end once the load started
		want  error
		batch bool
	}{
		{"cancel", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return ctx, cancel
		}, context.Canceled, false},
		{"deadline", func(t *testing.T) (context.Context, func()) {
			// The load holds until the caller is back, so the deadline
			// always passes first, however slow the machine.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			t.Cleanup(cancel)
			return ctx, func() {}
		}, context.DeadlineExceeded, false},
		{"cancel FetchMany", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return ctx, cancel
		}, context.Canceled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := flightstats.New()
			ends := flightwait.Ends(rec)
			c := newCache(t, flightcache.Options[*product]{Observer: ends})
			o := newGatedOrigin()
			ctx, leave := tc.leave(t)
			type answer struct {
				r   flightcache.Result[*product]
				err error
			}
			done := make(chan answer, 1)
			go func() {
				if tc.batch {
					kr := c.FetchMany(ctx, []string{"k"}, o.loadMany)
					done <- answer{kr[0].Result, kr[0].Err}
					return
				}
				r, err := c.Fetch(ctx, "k", o.load)
				done <- answer{r, err}
			}()
			<-o.started
			leave()
			a := <-done
			if !errors.Is(a.err, tc.want) || a.r.Outcome != flightcache.OutcomeCallerLeft {
				t.Fatalf("the caller that left got %v, %v; want an error matching %v and OutcomeCallerLeft", a.r.Outcome, a.err, tc.want)
			}
			if got := a.r.Outcome.String(); got != "caller_left" {
				t.Errorf("OutcomeCallerLeft.String() = %q, want caller_left", got)
			}

			close(o.gate)
			ends.Await(t, 1) // the load ended, its value written back
			r, err := c.Fetch(context.Background(), "k", o.load)
			if err != nil || r.Outcome != flightcache.OutcomeHitLocal || r.Value.Price != 1 {
				t.Fatalf("the next Get = %+v, %v; want the departed caller's load, a local hit", r, err)
			}
			if n := o.calls.Load(); n != 1 {
				t.Errorf("origin calls = %d, want 1", n)
			}
			s := rec.Snapshot()
			if s.CallersLeft != 1 || s.Gets != 2 || s.FlightsFailed != 0 || s.OriginFailures != 0 || s.FlightsSucceeded != 1 {
				t.Errorf("stats: callers left %d, gets %d, failed flights %d, origin failures %d, succeeded flights %d; want 1, 2, 0, 0, 1",
					s.CallersLeft, s.Gets, s.FlightsFailed, s.OriginFailures, s.FlightsSucceeded)
			}
		})
	}
}

// A caller whose ctx ended before it asked gets its ctx's error and
// OutcomeCallerLeft too, and nothing is loaded.
func TestCallerGoneBeforeAskingIsCallerLeft(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o origin
	r, err := c.Fetch(ctx, "k", o.load("k"))
	if !errors.Is(err, context.Canceled) || r.Outcome != flightcache.OutcomeCallerLeft {
		t.Fatalf("Fetch = %v, %v; want context.Canceled and OutcomeCallerLeft", r.Outcome, err)
	}
	if n := o.calls.Load(); n != 0 {
		t.Errorf("origin calls = %d, want 0", n)
	}
}

// A loader that fails with a context error of its own, while its caller is
// still there, is a failed load, whether the error is the bare sentinel,
// wrapped, or the loader timeout's: only the caller's own ctx.Err(), with
// that ctx ended, is a departure.
func TestLoaderContextErrorIsALoadFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		load flightcache.LoadFunc[*product]
		want error
		// The loader's own deadline: short only where the case is about
		// it, so that a loaded host cannot end the other loads first.
		timeout time.Duration
	}{
		{"bare Canceled", func(context.Context) (*product, error) { return nil, context.Canceled }, context.Canceled, time.Minute},
		{"wrapped Canceled", func(context.Context) (*product, error) {
			return nil, fmt.Errorf("query products: %w", context.Canceled)
		}, context.Canceled, time.Minute},
		{"loader timeout", func(ctx context.Context) (*product, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, context.DeadlineExceeded, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := flightstats.New()
			c := newCache(t, flightcache.Options[*product]{Observer: rec, LoaderTimeout: tc.timeout})
			// A ctx that can end but does not: the caller stays.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, err := c.Fetch(ctx, "k", tc.load)
			if !errors.Is(err, tc.want) || r.Outcome != flightcache.OutcomeLoadFailed {
				t.Fatalf("Fetch = %v, %v; want an error matching %v and OutcomeLoadFailed", r.Outcome, err, tc.want)
			}
			if s := rec.Snapshot(); s.CallersLeft != 0 {
				t.Errorf("CallersLeft = %d, want 0", s.CallersLeft)
			}
		})
	}
}
