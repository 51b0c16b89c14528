package flightstats_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/flightstats"
	"github.com/flightcache/flightcache/internal/flightwait"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// The worked example in docs/OBSERVABILITY.md pins the direction of both ratios, which teams
// are known to invert.
func TestRatiosUseTheSeedsFormulas(t *testing.T) {
	for _, c := range []struct {
		name                   string
		s                      flightstats.Stats
		perFlight, suppression float64
	}{
		{"seed example", flightstats.Stats{Requests: 1000, FlightsStarted: 50}, 20, 0.95},
		{"no coalescing", flightstats.Stats{Requests: 7, FlightsStarted: 7}, 1, 0},
		{"stampede", flightstats.Stats{Requests: 1010, FlightsStarted: 11}, 1010.0 / 11, 1 - 11.0/1010},
		{"nothing yet", flightstats.Stats{}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.RequestsPerFlight(); math.Abs(got-c.perFlight) > 1e-12 {
				t.Errorf("RequestsPerFlight = %v, want %v", got, c.perFlight)
			}
			if got := c.s.SuppressionRatio(); math.Abs(got-c.suppression) > 1e-12 {
				t.Errorf("SuppressionRatio = %v, want %v", got, c.suppression)
			}
		})
	}
}

func TestHitRatioPerTier(t *testing.T) {
	s := flightstats.Stats{LocalHits: 3, LocalMisses: 1, SharedHits: 1, SharedMisses: 1}
	if got := s.HitRatio(driver.TierLocal); got != 0.75 {
		t.Errorf("local = %v, want 0.75", got)
	}
	if got := s.HitRatio(driver.TierShared); got != 0.5 {
		t.Errorf("shared = %v, want 0.5", got)
	}
	if got := s.HitRatio(driver.TierNone); got != 0 {
		t.Errorf("none = %v, want 0", got)
	}
}

type hooked struct {
	*flightstats.Recorder
	hook func(singleflight.Event)
}

func (h hooked) ObserveFlight(e singleflight.Event) {
	h.Recorder.ObserveFlight(e)
	h.hook(e)
}

func TestStampedeCountsExactly(t *testing.T) {
	const hot, distinct = 1000, 10
	rec := flightstats.New()
	attached := make(chan struct{})
	var joined atomic.Int64
	g := singleflight.New[string, int](singleflight.WithObserver(hooked{rec, func(e singleflight.Event) {
		if e.Kind == singleflight.EventShared && joined.Add(1) == hot-1 {
			close(attached)
		}
	}}))
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range hot {
		wg.Go(func() {
			if _, _, err := g.Do(context.Background(), "hot", func(context.Context) (int, error) { <-release; return 1, nil }); err != nil {
				t.Error(err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	for i := range distinct {
		if _, _, err := g.Do(context.Background(), fmt.Sprint("d", i), func(context.Context) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
	}
	s := rec.Snapshot()
	want := flightstats.Stats{Requests: hot + distinct, FlightsStarted: 1 + distinct, Shared: hot - 1, FlightsSucceeded: 1 + distinct}
	want.LoaderStarted, want.LoaderSucceeded = want.FlightsStarted, want.FlightsSucceeded
	if s != want {
		t.Errorf("Snapshot = %+v, want %+v", s, want)
	}
	if got, w := s.SuppressionRatio(), 1-11.0/1010; math.Abs(got-w) > 1e-12 {
		t.Errorf("SuppressionRatio = %v, want %v", got, w)
	}
}

func TestRejectionsAndFailuresByKind(t *testing.T) {
	rec := flightstats.New()
	// No loader timeout and a context that cannot end: fn runs inline, so
	// its outcome event is reported before Do returns.
	g := singleflight.New[string, int](singleflight.WithObserver(rec))
	if _, _, err := g.Do(context.Background(), "p", func(context.Context) (int, error) { panic("boom") }); err == nil {
		t.Fatal("panic returned no error")
	}
	if _, _, err := g.Do(context.Background(), "f", func(context.Context) (int, error) { return 0, errors.New("no") }); err == nil {
		t.Fatal("failure returned no error")
	}
	g.Do(context.Background(), "n", nil)
	g.Close()
	g.Do(context.Background(), "c", func(context.Context) (int, error) { return 0, nil })
	s := rec.Snapshot()
	if s.FlightsPanicked != 1 || s.FlightsFailed != 1 || s.FlightsSucceeded != 0 {
		t.Errorf("panicked %d, failed %d, succeeded %d; want 1, 1, 0", s.FlightsPanicked, s.FlightsFailed, s.FlightsSucceeded)
	}
	if want := (flightstats.Rejections{NilFunc: 1, Closed: 1}); s.Rejected != want || s.Rejected.Total() != 2 {
		t.Errorf("Rejected = %+v, want %+v", s.Rejected, want)
	}
	if s.Requests != 4 {
		t.Errorf("Requests = %d, want 4", s.Requests)
	}
}

func TestCacheEventsThroughRealCache(t *testing.T) {
	rec := flightstats.New()
	local := testlocal.New[int](nil)
	c, err := flightcache.New(flightcache.Options[int]{Name: "n", Local: local, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		if _, err := c.Get(ctx, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "gone", func(context.Context) (int, error) { return 0, flightcache.ErrNotFound }); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "gone", nil); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatal(err)
	}
	s := rec.Snapshot()
	if s.Gets != 5 || s.LocalHits != 2 || s.LocalMisses != 2 || s.NegativeHits != 1 || s.FlightsStarted != 2 || s.Requests != 2 {
		t.Errorf("Snapshot = %+v", s)
	}
	if s.OriginCalls != 2 || s.OriginNotFound != 1 || s.OriginFailures != 0 {
		t.Errorf("origin calls %d, not found %d, failures %d; want 2, 1, 0", s.OriginCalls, s.OriginNotFound, s.OriginFailures)
	}
}

// During an origin outage with a failure throttle, the origin is called
// once per window: the throttled Gets are failed flights, never origin
// calls or origin failures.
func TestThrottledGetsAreNotOriginCalls(t *testing.T) {
	rec := flightstats.New()
	obs := flightwait.New(rec)
	c, err := flightcache.New(flightcache.Options[int]{Name: "n", Local: testlocal.New[int](nil), FailureThrottle: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errDown := errors.New("database down")
	load := func(context.Context) (int, error) { return 0, errDown }
	const gets = 6
	for range gets {
		if _, err := c.Get(context.Background(), "k", load); !errors.Is(err, errDown) {
			t.Fatalf("Get: %v, want the origin's error (or its throttled copy)", err)
		}
	}
	obs.Await(t, gets)
	s := rec.Snapshot()
	if s.OriginCalls != 1 || s.OriginFailures != 1 || s.Throttled != gets-1 || s.FlightsFailed != gets || s.FlightsStarted != gets {
		t.Errorf("origin calls %d (failed %d), throttled %d, flights %d (failed %d); want 1 (1), %d, %d (%d)",
			s.OriginCalls, s.OriginFailures, s.Throttled, s.FlightsStarted, s.FlightsFailed, gets-1, gets, gets)
	}
}

func TestBreakerChangesAndFilteredGetsAreCounted(t *testing.T) {
	r := flightstats.New()
	if got := r.Snapshot().Breaker; got != driver.BreakerClosed {
		t.Fatalf("breaker before any change = %v, want closed", got)
	}
	for _, to := range []driver.BreakerState{driver.BreakerOpen, driver.BreakerHalfOpen, driver.BreakerOpen, driver.BreakerHalfOpen} {
		r.ObserveCache(driver.Event{Kind: driver.EventBreakerChanged, Tier: driver.TierShared, Breaker: to})
		if got := r.Snapshot().Breaker; got != to {
			t.Fatalf("breaker after a change to %v = %v", to, got)
		}
	}
	r.ObserveCache(driver.Event{Kind: driver.EventBreakerChanged, Tier: driver.TierShared, Breaker: driver.BreakerClosed})
	for range 4 {
		r.ObserveCache(driver.Event{Kind: driver.EventFiltered})
	}
	s := r.Snapshot()
	want := flightstats.BreakerTransitions{ToClosed: 1, ToHalfOpen: 2, ToOpen: 2}
	if s.BreakerTransitions != want || s.Breaker != driver.BreakerClosed {
		t.Fatalf("breaker = %v, transitions %+v; want closed, %+v", s.Breaker, s.BreakerTransitions, want)
	}
	if s.Filtered != 4 {
		t.Fatalf("Filtered = %d, want 4", s.Filtered)
	}
}

func TestClusterEventsAreCounted(t *testing.T) {
	r := flightstats.New()
	r.ObserveCache(driver.Event{Kind: driver.EventLeaseAcquired})
	r.ObserveCache(driver.Event{Kind: driver.EventLeaseTakenOver})
	r.ObserveCache(driver.Event{Kind: driver.EventLeaseLost})
	r.ObserveCache(driver.Event{Kind: driver.EventFencedWriteRejected})
	r.ObserveCache(driver.Event{Kind: driver.EventFollowerWoken, Duration: 2 * time.Millisecond})
	r.ObserveCache(driver.Event{Kind: driver.EventFollowerWoken, Duration: 3 * time.Millisecond, Err: flightcache.ErrLeaderFailed})
	r.ObserveCache(driver.Event{Kind: driver.EventScopeChanged, Scope: flightcache.ScopeLocal})
	s := r.Snapshot()
	if s.LeasesAcquired != 1 || s.LeasesTakenOver != 1 || s.LeasesLost != 1 || s.FencedWritesRejected != 1 {
		t.Fatalf("lease counts %+v", s)
	}
	if s.FollowersWoken != 1 || s.FollowerWaits != 2 || s.FollowerWaitTotal != 5*time.Millisecond {
		t.Fatalf("follower counts woken %d waits %d total %v; want 1, 2, 5ms", s.FollowersWoken, s.FollowerWaits, s.FollowerWaitTotal)
	}
	if !s.Degraded || s.ScopeChanges != 1 {
		t.Fatalf("Degraded %v after %d changes, want true after 1", s.Degraded, s.ScopeChanges)
	}
	r.ObserveCache(driver.Event{Kind: driver.EventScopeChanged, Scope: flightcache.ScopeCluster})
	if s := r.Snapshot(); s.Degraded || s.ScopeChanges != 2 {
		t.Fatalf("Degraded %v after recovering, want false", s.Degraded)
	}
}

func TestInvalidationEventsAreCountedByKind(t *testing.T) {
	r := flightstats.New()
	if s := r.Snapshot(); !s.LastInvalidationReceived.IsZero() {
		t.Fatalf("LastInvalidationReceived before any message = %v, want zero", s.LastInvalidationReceived)
	}
	obs := func(k driver.EventKind, kind driver.InvalidationKind, err error) {
		r.ObserveCache(driver.Event{Kind: k, Invalidation: kind, Err: err})
	}
	publishErr := fmt.Errorf("publish: %w", context.DeadlineExceeded)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationKey, publishErr)
	obs(driver.EventInvalidationSent, driver.InvalidationPrefix, nil)
	obs(driver.EventInvalidationSent, driver.InvalidationAll, publishErr)
	before := time.Now()
	for _, k := range []driver.InvalidationKind{driver.InvalidationKey, driver.InvalidationKey, driver.InvalidationKey, driver.InvalidationPrefix, driver.InvalidationAll} {
		obs(driver.EventInvalidationReceived, k, nil)
	}
	after := time.Now()
	obs(driver.EventInvalidationApplied, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationPrefix, nil)
	obs(driver.EventInvalidationApplied, driver.InvalidationAll, nil)
	obs(driver.EventInvalidationIgnored, driver.InvalidationKey, nil)
	obs(driver.EventInvalidationIgnored, driver.InvalidationKind(99), nil) // counted, not dropped

	s := r.Snapshot()
	for _, c := range []struct {
		name      string
		got, want flightstats.InvalidationCounts
	}{
		{"sent", s.InvalidationsSent, flightstats.InvalidationCounts{Key: 2, Prefix: 1}},
		{"send failed", s.InvalidationsSendFailed, flightstats.InvalidationCounts{Key: 1, All: 1}},
		{"received", s.InvalidationsReceived, flightstats.InvalidationCounts{Key: 3, Prefix: 1, All: 1}},
		{"applied", s.InvalidationsApplied, flightstats.InvalidationCounts{Key: 2, Prefix: 1, All: 1}},
		{"ignored", s.InvalidationsIgnored, flightstats.InvalidationCounts{Key: 1, Other: 1}},
	} {
		if c.got != c.want {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if got := s.InvalidationsReceived.Total(); got != 5 {
		t.Errorf("received total = %d, want 5", got)
	}
	if got := s.InvalidationsApplied.Total() + s.InvalidationsIgnored.Total(); got != 6 {
		t.Errorf("applied + ignored = %d, want 6", got)
	}
	if at := s.LastInvalidationReceived; at.Before(before) || at.After(after) {
		t.Errorf("LastInvalidationReceived = %v, want within [%v, %v]", at, before, after)
	}
}

func TestBusChangesSetTheStateAndCountDisconnects(t *testing.T) {
	r := flightstats.New()
	if s := r.Snapshot(); s.Bus != driver.BusNone || s.BusDisconnects != 0 {
		t.Fatalf("before any change: Bus %v, %d disconnects; want none, 0", s.Bus, s.BusDisconnects)
	}
	for i, step := range []struct {
		to          driver.BusState
		disconnects uint64
	}{
		{driver.BusDown, 0}, // not yet connected: no disconnect
		{driver.BusUp, 0},
		{driver.BusDown, 1},
		{driver.BusDown, 1}, // reported twice: one disconnect
		{driver.BusUp, 1},
		{driver.BusUp, 1},
		{driver.BusDown, 2},
	} {
		r.ObserveCache(driver.Event{Kind: driver.EventBusChanged, Bus: step.to})
		if s := r.Snapshot(); s.Bus != step.to || s.BusDisconnects != step.disconnects {
			t.Fatalf("step %d: after a change to %v: Bus %v, %d disconnects; want %v, %d", i, step.to, s.Bus, s.BusDisconnects, step.to, step.disconnects)
		}
	}
}

// Bus events arrive from the Bus's goroutine while Gets report theirs
// (run with -race): every event is counted once.
func TestInvalidationCountsUnderConcurrentEvents(t *testing.T) {
	r := flightstats.New()
	const workers, per = 8, 1000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range per {
				kind := driver.InvalidationKind(1 + (i+w)%3)
				r.ObserveCache(driver.Event{Kind: driver.EventInvalidationReceived, Invalidation: kind})
				r.ObserveCache(driver.Event{Kind: driver.EventInvalidationApplied, Invalidation: kind})
				_ = r.Snapshot()
			}
		})
	}
	close(start)
	wg.Wait()
	s := r.Snapshot()
	if s.InvalidationsReceived.Total() != workers*per || s.InvalidationsApplied != s.InvalidationsReceived {
		t.Fatalf("received %+v, applied %+v; want %d each, equal", s.InvalidationsReceived, s.InvalidationsApplied, workers*per)
	}
}
