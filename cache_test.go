package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// clocked fills opts with clock and a memstore on it.
func clocked[V any](t testing.TB, clock *fakeClock, opts flightcache.Options[V]) *flightcache.Cache[V] {
	t.Helper()
	opts.Now = clock.Now
	if opts.Local == nil {
		opts.Local = newLocal[V](t, clock)
	}
	return newCache(t, opts)
}

func mustFetch[V any](t testing.TB, c *flightcache.Cache[V], key string, load flightcache.LoadFunc[V]) flightcache.Result[V] {
	t.Helper()
	r, err := c.Fetch(context.Background(), key, load)
	if err != nil {
		t.Fatalf("Fetch(%q): %v", key, err)
	}
	return r
}

func wantOutcome(t testing.TB, got, want flightcache.Outcome) {
	t.Helper()
	if got != want {
		t.Fatalf("outcome = %v, want %v", got, want)
	}
}

func TestInvalidKeyIsRejectedWithoutLoading(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxKeyLen: 16})
	var o origin
	for _, key := range []string{"", strings.Repeat("k", 17), "bad\xffutf8"} {
		r, err := c.Fetch(context.Background(), key, o.load("x"))
		var ke *flightcache.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, flightcache.ErrInvalidKey) {
			t.Errorf("Fetch(%q) err = %v, want *KeyError", key, err)
		}
		if strings.Contains(err.Error(), key) && key != "" {
			t.Errorf("error %q echoes the key", err)
		}
		wantOutcome(t, r.Outcome, flightcache.OutcomeLoadFailed)
		if err := c.Set(context.Background(), key, &product{}); !errors.Is(err, flightcache.ErrInvalidKey) {
			t.Errorf("Set(%q) err = %v", key, err)
		}
		if err := c.Delete(context.Background(), key); !errors.Is(err, flightcache.ErrInvalidKey) {
			t.Errorf("Delete(%q) err = %v", key, err)
		}
	}
	if n := o.calls.Load(); n != 0 {
		t.Fatalf("origin called %d times for invalid keys", n)
	}
	// The limit is inclusive.
	mustFetch(t, c, strings.Repeat("k", 16), o.load("x"))
}

func TestFreshLocalHitDoesNotLoadAgain(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Minute})
	var o origin
	first := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, first.Outcome, flightcache.OutcomeLoaded)
	clock.Advance(2 * time.Second)
	second := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, second.Outcome, flightcache.OutcomeHitLocal)
	if second.Value != first.Value || o.calls.Load() != 1 {
		t.Fatalf("hit returned %+v after %d loads, want the loaded value after 1", second.Value, o.calls.Load())
	}
	if second.Age != 2*time.Second {
		t.Fatalf("Age = %v, want 2s", second.Age)
	}
}

func TestValuePastTTLIsLoadedAgain(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	clock.Advance(time.Minute - time.Nanosecond)
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
	clock.Advance(time.Nanosecond)
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	if r.Value.Price != 2 {
		t.Fatalf("got load #%d, want #2", r.Value.Price)
	}
}

func TestDefaultTTLIsFiveMinutesMinusJitter(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	clock.Advance(4*time.Minute + 29*time.Second) // below 5m·(1-0.1)
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
	clock.Advance(31 * time.Second) // 5m: past any jittered TTL
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
}

func TestJitterSpreadsExpiries(t *testing.T) {
	clock := newFakeClock()
	local := newLocal[*product](t, clock)
	c := clocked(t, clock, flightcache.Options[*product]{Local: local, TTL: time.Hour, Jitter: 0.5})
	var o origin
	distinct := map[time.Time]bool{}
	for i := range 20 {
		key := fmt.Sprint("p:", i)
		mustFetch(t, c, key, o.load(key))
		it, _ := local.Get(key)
		ttl := it.FreshUntil.Sub(clock.Now())
		if ttl < 30*time.Minute || ttl > time.Hour {
			t.Fatalf("jittered TTL %v outside [30m, 1h]", ttl)
		}
		distinct[it.FreshUntil] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("only %d distinct expiries among 20 values loaded together", len(distinct))
	}
}

func TestSharedHitFillsLocalTier(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	a := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	b := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	var o origin
	wantOutcome(t, mustFetch(t, a, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
	r := mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if r.Value.Name != "p-1" || o.calls.Load() != 1 {
		t.Fatalf("shared hit = %+v after %d loads", r.Value, o.calls.Load())
	}
	gets := shared.gets.Load()
	wantOutcome(t, mustFetch(t, b, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
	if shared.gets.Load() != gets {
		t.Fatal("the second Get on b read the shared tier: the shared hit did not fill b's local tier")
	}
}

func TestSharedOnlyCacheWorks(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := newCache(t, flightcache.Options[*product]{Shared: shared, Now: clock.Now})
	var o origin
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitShared)
}

func TestSharedReadErrorCountsAsMiss(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	shared.readErr = errors.New("shared tier down")
	rec := newRecorder()
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared, Observer: rec})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil {
		t.Fatalf("Fetch = %+v, %v; a read error must not fail the Get", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	// The caller's lookup and the double-check inside the flight.
	if n := rec.count(driver.EventReadFailed); n != 2 {
		t.Fatalf("EventReadFailed = %d, want 2", n)
	}
}

func TestCorruptSharedEntryCountsAsMiss(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	shared.m["p:1"] = driver.Entry{Value: []byte("{not json"), Meta: driver.Meta{FreshUntil: clock.Now().Add(time.Hour), StaleUntil: clock.Now().Add(time.Hour)}}
	rec := newRecorder()
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared, Observer: rec})
	var o origin
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	if rec.count(driver.EventReadFailed) == 0 {
		t.Fatal("a payload the codec cannot decode was not reported")
	}
}

func TestWriteBackFailureStillReturnsValue(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	errWrite := errors.New("shared tier full")
	shared.writeErr = errWrite
	rec := newRecorder()
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared, Observer: rec})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil || r.Value.Name != "p-1" {
		t.Fatalf("Fetch = %+v, %v; a write error must not fail the Get", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	if !errors.Is(r.WriteErr, errWrite) {
		t.Fatalf("WriteErr = %v, want %v", r.WriteErr, errWrite)
	}
	if rec.count(driver.EventWriteFailed) != 1 {
		t.Fatalf("EventWriteFailed = %d, want 1", rec.count(driver.EventWriteFailed))
	}
	// The local tier was still written.
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
}

func TestDoubleCheckInsideFlightSkipsTheLoad(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	// Another instance fills the shared tier right after this instance's
	// first lookup missed, before its flight starts.
	shared.afterGet = func(n int64) {
		if n == 1 {
			data := []byte(`{"ID":"1","Name":"from-peer","Price":99}`)
			shared.mu.Lock()
			shared.m["p:1"] = driver.Entry{Value: data, Meta: driver.Meta{FreshUntil: clock.Now().Add(time.Minute), StaleUntil: clock.Now().Add(time.Minute)}}
			shared.mu.Unlock()
		}
	}
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	var o origin
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeCoalesced)
	if r.Value.Name != "from-peer" || o.calls.Load() != 0 {
		t.Fatalf("got %+v after %d origin calls, want the peer's value and none", r.Value, o.calls.Load())
	}
}

func TestNegativeCachingAnswersNotFoundWithoutLoading(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{NegativeTTL: 5 * time.Second, Jitter: flightcache.DisableJitter})
	var calls int
	missing := func(ctx context.Context) (*product, error) {
		calls++
		return nil, fmt.Errorf("product 7: %w", flightcache.ErrNotFound)
	}
	r, err := c.Fetch(context.Background(), "p:7", missing)
	if !errors.Is(err, flightcache.ErrNotFound) || r.Value != nil {
		t.Fatalf("Fetch = %+v, %v; want ErrNotFound", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	clock.Advance(5*time.Second - time.Nanosecond)
	r, err = c.Fetch(context.Background(), "p:7", missing)
	if !errors.Is(err, flightcache.ErrNotFound) || calls != 1 {
		t.Fatalf("tombstone answer = %v after %d loads, want ErrNotFound after 1", err, calls)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeNegativeHit)
	clock.Advance(time.Nanosecond)
	if _, err := c.Get(context.Background(), "p:7", missing); !errors.Is(err, flightcache.ErrNotFound) || calls != 2 {
		t.Fatalf("after NegativeTTL: err %v, %d loads; want a new load", err, calls)
	}
}

func TestNegativeTombstoneTravelsThroughSharedTier(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	a := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	b := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	calls := 0
	missing := func(ctx context.Context) (*product, error) { calls++; return nil, flightcache.ErrNotFound }
	a.Get(context.Background(), "p:7", missing)
	r, err := b.Fetch(context.Background(), "p:7", missing)
	if !errors.Is(err, flightcache.ErrNotFound) || calls != 1 {
		t.Fatalf("b got %v after %d loads, want ErrNotFound from a's tombstone", err, calls)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeNegativeHit)
}

func TestFailureThrottleAnswersWithoutCallingOrigin(t *testing.T) {
	for _, tc := range []struct {
		name      string
		throttle  time.Duration
		wantCalls int64
	}{
		{"off: every Get reaches the origin", 0, 2},
		{"on: the origin is spared", 10 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			rec := newRecorder()
			c := clocked(t, clock, flightcache.Options[*product]{FailureThrottle: tc.throttle, Observer: rec})
			o := origin{err: errOrigin}
			if _, err := c.Get(context.Background(), "p:1", o.load("1")); !errors.Is(err, errOrigin) {
				t.Fatalf("first Get err = %v", err)
			}
			clock.Advance(time.Second)
			r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
			if !errors.Is(err, errOrigin) {
				t.Fatalf("second Get err = %v, want one matching %v", err, errOrigin)
			}
			wantOutcome(t, r.Outcome, flightcache.OutcomeLoadFailed)
			if n := o.calls.Load(); n != tc.wantCalls {
				t.Fatalf("origin calls = %d, want %d", n, tc.wantCalls)
			}
			var te *flightcache.ThrottledError
			if throttled := errors.As(err, &te); throttled != (tc.throttle > 0) {
				t.Fatalf("err %v: throttled = %v", err, throttled)
			}
			if tc.throttle == 0 {
				return
			}
			if rec.count(driver.EventThrottled) != 1 {
				t.Fatal("throttled answer not reported")
			}
			clock.Advance(tc.throttle) // the window has passed
			o.err = nil
			wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
		})
	}
}

func TestStaleValueServedWhenLoadFails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		staleFor time.Duration
		want     flightcache.Outcome
	}{
		{"without StaleFor the error is returned", 0, flightcache.OutcomeLoadFailed},
		{"with StaleFor the old value stands in", time.Minute, flightcache.OutcomeStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			rec := newRecorder()
			c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Second, StaleFor: tc.staleFor, Observer: rec})
			var o origin
			first := mustFetch(t, c, "p:1", o.load("1"))
			clock.Advance(2 * time.Second)
			o.err = errOrigin
			r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
			wantOutcome(t, r.Outcome, tc.want)
			if tc.want == flightcache.OutcomeLoadFailed {
				if !errors.Is(err, errOrigin) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || r.Value != first.Value || r.Age != 2*time.Second {
				t.Fatalf("stale answer = %+v, %v; want the first value, 2s old", r, err)
			}
			if rec.count(driver.EventStaleServed) != 1 {
				t.Fatal("stale answer not reported")
			}
			clock.Advance(tc.staleFor) // past StaleUntil: nothing left to serve
			if _, err := c.Get(context.Background(), "p:1", o.load("1")); !errors.Is(err, errOrigin) {
				t.Fatalf("past StaleFor err = %v, want the load's error", err)
			}
		})
	}
}

func TestStaleValueServedWhenThrottled(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Second, StaleFor: time.Minute, FailureThrottle: time.Minute})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	clock.Advance(2 * time.Second)
	o.err = errOrigin
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeStale)
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeStale)
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("origin calls = %d, want 2 (the second failure was throttled)", n)
	}
}

func TestSoftTimeoutServesStaleWhileLoadFinishesInBackground(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 4)}
	c := clocked(t, clock, flightcache.Options[*product]{
		Local: local, TTL: time.Second, StaleFor: time.Minute,
		SoftTimeout: 10 * time.Millisecond, LoaderTimeout: 10 * time.Second,
	})
	var o origin
	first := mustFetch(t, c, "p:1", o.load("1"))
	<-local.sets
	clock.Advance(2 * time.Second)

	release := make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		<-release
		return o.load("1")(ctx)
	}
	r := mustFetch(t, c, "p:1", slow)
	wantOutcome(t, r.Outcome, flightcache.OutcomeStale)
	if r.Value != first.Value {
		t.Fatalf("soft timeout served %+v, want the stale value", r.Value)
	}
	close(release)
	it := <-local.sets // the abandoned load still writes back
	if it.Value.Price != 2 {
		t.Fatalf("background write-back stored load #%d, want #2", it.Value.Price)
	}
	r = mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if r.Value.Price != 2 || o.calls.Load() != 2 {
		t.Fatalf("after the background load: %+v with %d loads", r.Value, o.calls.Load())
	}
}

func TestLoaderTimeoutReleasesCallers(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{LoaderTimeout: 20 * time.Millisecond})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hung := func(ctx context.Context) (*product, error) { <-release; return &product{}, nil } // ignores ctx
	start := time.Now()
	r, err := c.Fetch(context.Background(), "p:1", hung)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadFailed)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("released after %v", d)
	}
}

func TestSetTTLOverridesTTLForOneValue(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var o origin
	long := func(ctx context.Context) (*product, error) {
		flightcache.SetTTL(ctx, time.Hour)
		return o.load("1")(ctx)
	}
	mustFetch(t, c, "p:1", long)
	clock.Advance(59 * time.Minute)
	wantOutcome(t, mustFetch(t, c, "p:1", long).Outcome, flightcache.OutcomeHitLocal)
	clock.Advance(time.Minute)
	wantOutcome(t, mustFetch(t, c, "p:1", long).Outcome, flightcache.OutcomeLoaded)
	// Outside a loader it is a no-op, not a panic.
	flightcache.SetTTL(context.Background(), time.Hour)
	flightcache.NoStore(context.Background())
}

func TestNoStoreReturnsValueWithoutStoring(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	var o origin
	degraded := func(ctx context.Context) (*product, error) {
		flightcache.NoStore(ctx)
		return o.load("1")(ctx)
	}
	for i := range 2 {
		r := mustFetch(t, c, "p:1", degraded)
		wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
		if r.Value.Price != i+1 {
			t.Fatalf("Get %d returned load #%d", i+1, r.Value.Price)
		}
	}
	if shared.sets.Load() != 0 {
		t.Fatal("NoStore value was written to the shared tier")
	}
}

func TestCloneGivesEveryCallerItsOwnCopy(t *testing.T) {
	for _, withClone := range []bool{false, true} {
		t.Run(fmt.Sprint("clone=", withClone), func(t *testing.T) {
			opts := flightcache.Options[*product]{}
			if withClone {
				opts.Clone = func(p *product) *product { c := *p; return &c }
			}
			c := newCache(t, opts)
			var o origin
			a := mustFetch(t, c, "p:1", o.load("1")).Value
			a.Name = "mutated by caller a"
			b := mustFetch(t, c, "p:1", o.load("1")).Value
			if isolated := b.Name == "p-1"; isolated != withClone {
				t.Fatalf("caller b sees %q; isolation = %v, want %v", b.Name, isolated, withClone)
			}
		})
	}
}

func TestPanickingLoaderBecomesErrorAndCacheKeepsWorking(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{FailureThrottle: time.Second})
	_, err := c.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) { panic("boom") })
	var pe *singleflight.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" {
		t.Fatalf("err = %v, want a *singleflight.PanicError", err)
	}
	var o origin
	// The key is throttled after the panic; another key is unaffected.
	if _, err := c.Get(context.Background(), "p:1", o.load("1")); err == nil || o.calls.Load() != 0 {
		t.Fatalf("Get right after the panic: %v, %d loads; want throttled", err, o.calls.Load())
	}
	wantOutcome(t, mustFetch(t, c, "p:2", o.load("2")).Outcome, flightcache.OutcomeLoaded)
}

func TestNilLoadFuncFailsOnlyOnMiss(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	if _, err := c.Get(context.Background(), "p:1", nil); !errors.Is(err, singleflight.ErrNilFunc) {
		t.Fatalf("err = %v, want ErrNilFunc", err)
	}
	if err := c.Set(context.Background(), "p:1", &product{Name: "set"}); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Get(context.Background(), "p:1", nil); err != nil || p.Name != "set" {
		t.Fatalf("hit with nil loader = %+v, %v", p, err)
	}
}

func TestSetAndDeleteReachBothTiers(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	a := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	b := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	if err := a.Set(context.Background(), "p:1", &product{Name: "set"}); err != nil {
		t.Fatal(err)
	}
	var o origin
	r := mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if err := a.Delete(context.Background(), "p:1"); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, mustFetch(t, a, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
}

func TestCallerLeavingDoesNotCancelTheLoad(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 1)}
	c := clocked(t, clock, flightcache.Options[*product]{Local: local})
	entered, release := make(chan struct{}), make(chan struct{})
	var loadErr error
	load := func(ctx context.Context) (*product, error) {
		close(entered)
		<-release
		loadErr = ctx.Err()
		return &product{Name: "loaded"}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := c.Get(ctx, "p:1", load); done <- err }()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("leaving caller got %v", err)
	}
	close(release)
	<-local.sets
	if loadErr != nil {
		t.Fatalf("the load's context ended with the caller: %v", loadErr)
	}
	var o origin
	r := mustFetch(t, c, "p:1", o.load("1"))
	if r.Outcome != flightcache.OutcomeHitLocal || r.Value.Name != "loaded" {
		t.Fatalf("after the caller left: %v %+v; the load should have filled the cache", r.Outcome, r.Value)
	}
}

func TestMaxInFlightRejectsNewKeysBeyondLimit(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxInFlight: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Get(context.Background(), "a", func(ctx context.Context) (*product, error) {
			close(entered)
			<-release
			return &product{}, nil
		})
	}()
	<-entered
	var o origin
	r, err := c.Fetch(context.Background(), "b", o.load("b"))
	close(release)
	<-done
	if !errors.Is(err, singleflight.ErrTooManyInFlight) || o.calls.Load() != 0 {
		t.Fatalf("err = %v after %d loads, want ErrTooManyInFlight and none", err, o.calls.Load())
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadFailed)
}

// The MaxInFlight bulkhead counts loaders still running, not flights still
// listed: a Set or Delete of a key forgets its flight, but its hung loader
// keeps its slot, so a Get of another key is still refused at once.
func TestMaxInFlightHoldsThroughAnExplicitWriteThatForgetsTheFlight(t *testing.T) {
	for name, write := range map[string]func(*flightcache.Cache[*product]) error{
		"Set":    func(c *flightcache.Cache[*product]) error { return c.Set(context.Background(), "a", &product{ID: "a"}) },
		"Delete": func(c *flightcache.Cache[*product]) error { return c.Delete(context.Background(), "a") },
	} {
		t.Run(name, func(t *testing.T) {
			c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), MaxInFlight: 1})
			entered, release := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.Get(context.Background(), "a", func(ctx context.Context) (*product, error) {
					close(entered)
					<-release // hung: ignores ctx
					return &product{}, nil
				})
			}()
			defer func() { close(release); <-done }()
			<-entered
			if err := write(c); err != nil {
				t.Fatal(err)
			}
			var o origin
			r, err := c.Fetch(context.Background(), "b", o.load("b"))
			if !errors.Is(err, singleflight.ErrTooManyInFlight) || o.calls.Load() != 0 {
				t.Fatalf("err = %v after %d loads, want ErrTooManyInFlight and none: the hung loader holds the only slot", err, o.calls.Load())
			}
			wantOutcome(t, r.Outcome, flightcache.OutcomeLoadFailed)
		})
	}
}

func TestCloseFailsLaterCalls(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Get(context.Background(), "p:1", o.load("1")); !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := c.Set(context.Background(), "p:1", &product{}); !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("Set after Close: %v", err)
	}
}

func TestObserverSeesCacheAndEngineEvents(t *testing.T) {
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Observer: rec, Name: "products"})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	mustFetch(t, c, "p:1", o.load("1"))
	for kind, want := range map[driver.EventKind]int{driver.EventGet: 2, driver.EventHit: 1, driver.EventMiss: 1} {
		if got := rec.count(kind); got != want {
			t.Errorf("%v events = %d, want %d", kind, got, want)
		}
	}
	if n := rec.engineCount("loader_started"); n != 1 {
		t.Errorf("engine loader_started = %d, want 1: the Observer was not wired into the engine", n)
	}
}

// A Cache without Options.Now keeps time by its local store's clock when
// the store has one (memstore.Store.Clock), so the two agree on expiry.
func TestCacheWithoutNowFollowsLocalStoreClock(t *testing.T) {
	clock := newFakeClock()
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, clock), TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var o origin
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
	clock.Advance(30 * time.Second)
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if r.Age != 30*time.Second {
		t.Fatalf("Age = %v by the store's clock, want 30s", r.Age)
	}
	clock.Advance(31 * time.Second) // past the TTL by the store's clock only
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
}

// A key that is not valid UTF-8 is refused with a *KeyError even though
// the hit path does not check UTF-8, and never reaches the loader.
func TestInvalidUTF8KeyIsRefusedWithoutLoading(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var o origin
	_, err := c.Get(context.Background(), "p:\xff", o.load("1"))
	var ke *flightcache.KeyError
	if !errors.As(err, &ke) || o.calls.Load() != 0 {
		t.Fatalf("Get(invalid UTF-8) = %v after %d loads; want *KeyError, no load", err, o.calls.Load())
	}
}
