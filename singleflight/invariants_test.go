package singleflight_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/singleflight"
)

// TestAbandonmentNeverReachesALiveCaller races callers whose context has
// already ended (each starts an execution and abandons it at once) against a
// caller whose context stays alive, on one key. Abandonment must be atomic
// with removing the execution from the key: the live caller either joins an
// execution nobody will abandon, or starts a new one. It must never be handed
// ErrAbandoned (or any error) because it arrived as the last caller left.
func TestAbandonmentNeverReachesALiveCaller(t *testing.T) {
	const (
		killers   = 2
		liveCalls = 50_000
		budget    = time.Second
	)
	g := singleflight.New[string, int](singleflight.WithCancelWhenAbandoned())
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()

	var done atomic.Bool
	var wg sync.WaitGroup
	for range killers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				// The loader returns on its own too, so that an execution the
				// live caller joined ends without anybody cancelling it.
				g.Do(dead, "k", func(context.Context) (int, error) { return 1, nil })
			}
		}()
	}
	var got error
	// The race needs an unlucky interleaving (about one live call in ten
	// thousand hit it before the fix), so the loop runs many calls, but
	// within a budget that keeps the test cheap under -race.
	end := time.Now().Add(budget)
	calls := 0
	for ; calls < liveCalls && got == nil; calls++ {
		if calls%1024 == 0 && time.Now().After(end) {
			break
		}
		v, _, err := g.Do(live, "k", func(context.Context) (int, error) { return 2, nil })
		switch {
		case err != nil:
			got = err
		case v != 1 && v != 2:
			t.Errorf("live caller got %d, want 1 or 2", v)
		}
	}
	done.Store(true)
	wg.Wait()
	if got != nil {
		t.Fatalf("call %d: a caller whose context is alive got %v (ErrAbandoned: %v), want a value", calls, got, errors.Is(got, singleflight.ErrAbandoned))
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d after every call returned, want 0", n)
	}
}

// TestMaxInFlightCountsForgottenLoaders: Forget (which every Cache.Set and
// Cache.Delete calls) frees the key for a new execution, but the forgotten
// loader is still running and keeps its slot until it returns.
func TestMaxInFlightCountsForgottenLoaders(t *testing.T) {
	const attempts = 50
	g := singleflight.New[string, int](singleflight.WithMaxInFlight(1))
	var running, peak atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, attempts)
	load := func(context.Context) (int, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		started <- struct{}{}
		<-release
		running.Add(-1)
		return 1, nil
	}
	var admitted []<-chan singleflight.Result[int]
	rejected := 0
	for range attempts {
		r := g.DoChan(context.Background(), "k", load)
		// Either the call was refused at once, or its loader started.
		select {
		case res := <-r:
			if !errors.Is(res.Err, singleflight.ErrTooManyInFlight) {
				t.Fatalf("a call that started no loader got %+v, want ErrTooManyInFlight", res)
			}
			rejected++
		case <-started:
			admitted = append(admitted, r)
		}
		g.Forget("k")
	}
	close(release)
	for _, r := range admitted {
		if res := <-r; res.Err != nil || res.Val != 1 {
			t.Errorf("admitted call got %+v", res)
		}
	}
	if p := peak.Load(); p > 1 || len(admitted) != 1 || rejected != attempts-1 {
		t.Fatalf("under WithMaxInFlight(1) with Forget after each call: %d loaders ran at once, %d admitted, %d rejected; want 1, 1, %d",
			p, len(admitted), rejected, attempts-1)
	}
	// Once the loader has returned, its slot is free again.
	if v, _, err := g.Do(context.Background(), "other", func(context.Context) (int, error) { return 2, nil }); err != nil || v != 2 {
		t.Fatalf("after the loader returned: %d, %v; want a new execution", v, err)
	}
}

// TestMaxInFlightCountsLoadersThatOutlivedTheirTimeout: a hung origin whose
// loaders ignore their context. The loader timeout releases the callers and
// frees the keys, but the loaders go on; the limit must count them until they
// return, so new keys are refused instead of piling up goroutines.
func TestMaxInFlightCountsLoadersThatOutlivedTheirTimeout(t *testing.T) {
	const (
		limit   = 5
		callers = 300
	)
	obs := &counter{}
	g := singleflight.New[int, int](singleflight.WithMaxInFlight(limit),
		singleflight.WithLoaderTimeout(time.Millisecond), singleflight.WithObserver(obs))
	var running, peak, starts atomic.Int32
	hung := make(chan struct{})
	load := func(context.Context) (int, error) {
		starts.Add(1)
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		defer running.Add(-1)
		<-hung // ignores its context
		return 1, nil
	}
	var timedOut, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := g.Do(context.Background(), i, load)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				timedOut.Add(1)
			case errors.Is(err, singleflight.ErrTooManyInFlight):
				refused.Add(1)
			default:
				t.Errorf("caller got %v, want a timeout or ErrTooManyInFlight", err)
			}
		}()
	}
	wg.Wait()
	if p, s := peak.Load(), starts.Load(); p > limit || s != limit || timedOut.Load() != limit || refused.Load() != callers-limit {
		t.Fatalf("%d hung loaders under WithMaxInFlight(%d): %d started, %d ran at once, %d timed out, %d refused; want %d, at most %d, %d, %d",
			callers, limit, s, p, timedOut.Load(), refused.Load(), limit, limit, limit, callers-limit)
	}
	// InFlight counts registered keys: the timeouts freed them all, while
	// their loaders still hold the bulkhead.
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d after every key timed out, want 0", n)
	}
	if _, _, err := g.Do(context.Background(), -1, load); !errors.Is(err, singleflight.ErrTooManyInFlight) {
		t.Fatalf("new key while the hung loaders still run: %v, want ErrTooManyInFlight", err)
	}
	close(hung)
	// EventLateResult is reported after a late loader has given its slot back.
	waitFor(t, "the hung loaders to return", func() bool { return obs.count(singleflight.EventLateResult) == limit })
	if v, _, err := g.Do(context.Background(), -2, func(context.Context) (int, error) { return 2, nil }); err != nil || v != 2 {
		t.Fatalf("after the hung loaders returned: %d, %v; want a new execution", v, err)
	}
}

// TestMaxInFlightCountsKeysNotEqualToThemselves: an execution for a NaN key
// is never registered, but its loader runs and takes a slot like any other.
func TestMaxInFlightCountsKeysNotEqualToThemselves(t *testing.T) {
	g := singleflight.New[float64, int](singleflight.WithMaxInFlight(2))
	nan := math.NaN()
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	hold := func(context.Context) (int, error) { started <- struct{}{}; <-release; return 1, nil }
	a := g.DoChan(context.Background(), nan, hold)
	b := g.DoChan(context.Background(), nan, hold)
	<-started
	<-started // two NaN calls never share an execution: both loaders run
	for _, key := range []float64{nan, 1} {
		if _, _, err := g.Do(context.Background(), key, hold); !errors.Is(err, singleflight.ErrTooManyInFlight) {
			t.Fatalf("third loader (key %v) under WithMaxInFlight(2): %v, want ErrTooManyInFlight", key, err)
		}
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d, want 0: an unequal key is never registered", n)
	}
	close(release)
	for _, r := range []<-chan singleflight.Result[int]{a, b} {
		if res := <-r; res.Err != nil || res.Val != 1 || res.Shared {
			t.Fatalf("NaN call got %+v, want its own unshared 1", res)
		}
	}
	if v, _, err := g.Do(context.Background(), nan, func(context.Context) (int, error) { return 3, nil }); err != nil || v != 3 {
		t.Fatalf("after the loaders returned: %d, %v", v, err)
	}
}
