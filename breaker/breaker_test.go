package breaker_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/breaker"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// transitions records the OnStateChange calls of a Breaker.
type transitions struct {
	mu   sync.Mutex
	seen []string
}

func (r *transitions) hook(from, to driver.BreakerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, from.String()+"->"+to.String())
}

func (r *transitions) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func newBreaker(t *testing.T, o breaker.Options) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// call makes one call through b that fails or succeeds; it fails the test if
// the breaker refuses it.
func call(t *testing.T, b *breaker.Breaker, failed bool) {
	t.Helper()
	done, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow refused a call in state %v: %v", b.State(), err)
	}
	done(failed)
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	var rec transitions
	b := newBreaker(t, breaker.Options{ConsecutiveFailures: 3, CoolDown: time.Hour, OnStateChange: rec.hook})

	call(t, b, true)
	call(t, b, true)
	if got := b.State(); got != driver.BreakerClosed {
		t.Fatalf("state after 2 of 3 failures = %v, want closed", got)
	}
	call(t, b, true)
	if got := b.State(); got != driver.BreakerOpen {
		t.Fatalf("state after 3 failures = %v, want open", got)
	}
	done, err := b.Allow()
	if !errors.Is(err, driver.ErrBreakerOpen) || done != nil {
		t.Fatalf("Allow on an open breaker = (%v, %v), want (nil, ErrBreakerOpen)", done != nil, err)
	}
	if got, want := rec.list(), []string{"closed->open"}; !equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
}

func TestSuccessResetsTheRunOfFailures(t *testing.T) {
	b := newBreaker(t, breaker.Options{ConsecutiveFailures: 3, CoolDown: time.Hour})
	for range 10 {
		call(t, b, true)
		call(t, b, true)
		call(t, b, false)
	}
	if got := b.State(); got != driver.BreakerClosed {
		t.Fatalf("state after runs of 2 failures broken by successes = %v, want closed", got)
	}
}

// gobreaker reads time.Now and takes no clock, so the cool-down tests use a
// short real cool-down. time.Sleep waits at least its duration, and the
// cool-down starts before the breaker opens returns, so after the sleep the
// cool-down has passed: the state is deterministic, not a race.
const coolDown = 20 * time.Millisecond

func tripAndCoolDown(t *testing.T, o breaker.Options) *breaker.Breaker {
	t.Helper()
	o.ConsecutiveFailures, o.CoolDown = 1, coolDown
	b := newBreaker(t, o)
	call(t, b, true)
	if got := b.State(); got != driver.BreakerOpen {
		t.Fatalf("state after the tripping failure = %v, want open", got)
	}
	time.Sleep(coolDown)
	if got := b.State(); got != driver.BreakerHalfOpen {
		t.Fatalf("state after the cool-down = %v, want half_open", got)
	}
	return b
}

func TestHalfOpenBreakerLetsOnlyTheProbesThrough(t *testing.T) {
	b := tripAndCoolDown(t, breaker.Options{HalfOpenProbes: 2})
	first, err1 := b.Allow()
	second, err2 := b.Allow()
	if err1 != nil || err2 != nil {
		t.Fatalf("the two probes were refused: %v, %v", err1, err2)
	}
	if _, err := b.Allow(); !errors.Is(err, driver.ErrBreakerOpen) {
		t.Fatalf("a third call while two probes are in flight: err = %v, want ErrBreakerOpen", err)
	}
	first(false)
	if got := b.State(); got != driver.BreakerHalfOpen {
		t.Fatalf("state after 1 of 2 successful probes = %v, want half_open", got)
	}
	second(false)
	if got := b.State(); got != driver.BreakerClosed {
		t.Fatalf("state after both probes succeeded = %v, want closed", got)
	}
}

func TestFailedProbeOpensTheBreakerAgain(t *testing.T) {
	var rec transitions
	b := tripAndCoolDown(t, breaker.Options{OnStateChange: rec.hook})
	call(t, b, true)
	if got := b.State(); got != driver.BreakerOpen {
		t.Fatalf("state after a failed probe = %v, want open", got)
	}
	want := []string{"closed->open", "open->half_open", "half_open->open"}
	if got := rec.list(); !equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
}

func TestNewRejectsOutOfRangeOptions(t *testing.T) {
	cases := []struct {
		name  string
		o     breaker.Options
		field string
	}{
		{"negative failures", breaker.Options{ConsecutiveFailures: -1}, "ConsecutiveFailures"},
		{"huge failures", breaker.Options{ConsecutiveFailures: 1<<20 + 1}, "ConsecutiveFailures"},
		{"negative cool-down", breaker.Options{CoolDown: -time.Second}, "CoolDown"},
		{"cool-down over an hour", breaker.Options{CoolDown: time.Hour + 1}, "CoolDown"},
		{"negative probes", breaker.Options{HalfOpenProbes: -1}, "HalfOpenProbes"},
		{"huge probes", breaker.Options{HalfOpenProbes: 1<<16 + 1}, "HalfOpenProbes"},
		{"negative interval", breaker.Options{Interval: -time.Second}, "Interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := breaker.New(tc.o)
			var ce *flightcache.ConfigError
			if !errors.As(err, &ce) || b != nil {
				t.Fatalf("New(%+v) = (%v, %v), want (nil, *ConfigError)", tc.o, b, err)
			}
			if !errors.Is(err, flightcache.ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
			if ce.Field != "breaker.Options."+tc.field {
				t.Fatalf("Field = %q, want breaker.Options.%s", ce.Field, tc.field)
			}
		})
	}
}

func TestZeroOptionsTakeTheDefaults(t *testing.T) {
	b := newBreaker(t, breaker.Options{})
	for range breaker.DefaultConsecutiveFailures - 1 {
		call(t, b, true)
	}
	if got := b.State(); got != driver.BreakerClosed {
		t.Fatalf("state after %d failures = %v, want closed", breaker.DefaultConsecutiveFailures-1, got)
	}
	call(t, b, true)
	if got := b.State(); got != driver.BreakerOpen {
		t.Fatalf("state after %d failures = %v, want open", breaker.DefaultConsecutiveFailures, got)
	}
}

func TestConcurrentCallsNeverLetTrafficThroughAnOpenBreaker(t *testing.T) {
	b := newBreaker(t, breaker.Options{ConsecutiveFailures: 5, CoolDown: time.Hour})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				done, err := b.Allow()
				if err != nil {
					if !errors.Is(err, driver.ErrBreakerOpen) {
						t.Errorf("Allow: %v, want ErrBreakerOpen", err)
					}
					continue
				}
				done(true)
			}
		})
	}
	wg.Wait()
	if got := b.State(); got != driver.BreakerOpen {
		t.Fatalf("state after 1600 failing calls = %v, want open", got)
	}
	if _, err := b.Allow(); !errors.Is(err, driver.ErrBreakerOpen) {
		t.Fatalf("Allow after the storm: %v, want ErrBreakerOpen", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
