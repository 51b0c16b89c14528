package promflight_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/flightwait"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/promflight"
)

// During an origin outage with a failure throttle, only the first Get of a
// key calls the origin; the next one is answered by the throttle. The
// origin-calls series counts the one call, the throttle's series the
// answer, and the flight series both flights: a throttled answer is never
// an origin call (or an origin failure).
func TestThrottledGetIsNotAnOriginCall(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	obs := flightwait.New(m)
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Local: local, TTL: time.Minute, FailureThrottle: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	errDown := errors.New("database down")
	calls := 0
	load := func(context.Context) (int, error) { calls++; return 0, errDown }
	if _, err := c.Get(context.Background(), "k", load); !errors.Is(err, errDown) {
		t.Fatalf("first Get: %v, want the origin's error", err)
	}
	const throttled = 5
	for range throttled {
		var te *flightcache.ThrottledError
		if _, err := c.Get(context.Background(), "k", load); !errors.As(err, &te) {
			t.Fatalf("Get within the throttle window: %v, want a *ThrottledError", err)
		}
	}
	if calls != 1 {
		t.Fatalf("the loader ran %d times, want 1", calls)
	}
	obs.Await(t, 1+throttled)
	got := gather(t, reg)
	for _, w := range []struct {
		name  string
		extra []string
		v     float64
	}{
		{"flightcache_origin_calls_total", []string{"result=error"}, 1},
		{"flightcache_origin_calls_total", []string{"result=success"}, 0},
		{"flightcache_origin_call_duration_seconds", []string{"result=error"}, 1},
		{"flightcache_throttled_total", nil, throttled},
		{"single_flight_flights_started_total", nil, 1 + throttled},
		{"single_flight_flights_failed_total", nil, 1 + throttled},
	} {
		if v := got.get(t, w.name, "product", w.extra...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.extra, v, w.v)
		}
	}
}

// A follower that waits for another instance's load is a remote wait,
// counted in the follower-wait histogram; it is no origin call, whether it
// is woken by a completion or by the leader's failure.
func TestRemoteWaitIsNotAnOriginCall(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	obs := flightwait.New(m)
	c := newClusterCache(t, obs)
	calls := 0
	load := func(context.Context) (int, error) { calls++; return 1, nil }
	if _, err := c.Get(context.Background(), "k", load); !errors.Is(err, flightcache.ErrLeaderFailed) {
		t.Fatalf("Get: %v, want ErrLeaderFailed (the other instance's load failed)", err)
	}
	obs.Await(t, 1)
	if calls != 0 {
		t.Fatalf("the loader ran %d times, want 0: another instance led", calls)
	}
	got := gather(t, reg)
	for _, w := range []struct {
		name  string
		extra []string
		v     float64
	}{
		{"flightcache_cluster_follower_wait_seconds", []string{"result=woken"}, 1},
		{"flightcache_cluster_follower_wait_seconds", []string{"result=leader_failed"}, 1},
		{"flightcache_origin_calls_total", []string{"result=success"}, 0},
		{"flightcache_origin_calls_total", []string{"result=error"}, 0},
		{"single_flight_flights_started_total", nil, 1},
		{"single_flight_flights_failed_total", nil, 1},
	} {
		if v := got.get(t, w.name, "product", w.extra...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.extra, v, w.v)
		}
	}
}

// A loader that panics is an origin call with result panic.
func TestPanickingLoaderIsAnOriginCallWithResultPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t, m, "product")
	if _, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { panic("boom") }); err == nil {
		t.Fatal("Get of a panicking loader succeeded")
	}
	if _, err := c.Get(context.Background(), "nf", func(context.Context) (int, error) { return 0, flightcache.ErrNotFound }); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	got := gather(t, reg)
	for _, r := range []string{"panic", "not_found"} {
		if v := got.get(t, "flightcache_origin_calls_total", "product", "result="+r); v != 1 {
			t.Errorf("origin calls{result=%s} = %v, want 1", r, v)
		}
	}
}

// newClusterCache returns a Cache in cluster mode whose Coordinator plays
// another instance: it reports that instance's load completed (with nothing
// in the shared tier, so the follower claims again), then that it failed.
func newClusterCache(t *testing.T, obs driver.Observer) *flightcache.Cache[int] {
	t.Helper()
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Shared: &mapShared{m: map[string]driver.Entry{}}, Coordinator: &otherInstance{},
		TTL: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// otherInstance is a driver.Coordinator under which another instance
// always holds the lease: the first Claim reports its load done, the next
// one its failure.
type otherInstance struct {
	mu     sync.Mutex
	claims int
}

func (o *otherInstance) Claim(_ context.Context, _ string, req driver.ClaimRequest) (driver.Grant, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claims++
	if o.claims == 1 {
		return driver.Grant{Done: 1, Waited: time.Millisecond}, nil
	}
	return driver.Grant{Waited: time.Millisecond}, flightcache.ErrLeaderFailed
}

func (o *otherInstance) Invalidate(context.Context, string) error { return nil }

// mapShared is an in-process driver.SharedStore.
type mapShared struct {
	mu sync.Mutex
	m  map[string]driver.Entry
}

func (s *mapShared) Get(_ context.Context, key string) (driver.Entry, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	return e, ok, nil
}

func (s *mapShared) Set(_ context.Context, key string, e driver.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = e
	return nil
}

func (s *mapShared) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}
