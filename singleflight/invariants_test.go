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

// TestAbandonmentNeverReachesALiveCaller: the last caller of an execution
// leaves (WithCancelWhenAbandoned) just as a caller whose context is alive
// arrives for the same key. Abandonment must be atomic with removing the
// execution from its key: the newcomer either joins before the last caller
// left (and gets the loader's value) or starts a new execution (and gets its
// own). It must never inherit ErrAbandoned, or any error.
//
// The gap it must not fall into is a few instructions wide, so the test aims
// at it. Each round, a leaving caller whose context has already ended starts
// an execution and leaves it at once; the live caller waits until the leaving
// one has entered Do, spins for a while and calls. When it joined (came too
// early) it spins longer next round; when it found the key free (too late),
// shorter. The arrivals thus dither around the moment the last caller leaves.
func TestAbandonmentNeverReachesALiveCaller(t *testing.T) {
	const (
		rounds = 200_000
		budget = time.Second // keeps -race -count=20 cheap
	)
	// The leaving caller's execution announces its registration (before it
	// can be left) through EventLoaderStarted, which tells a live caller that
	// came too early from one that came too late.
	type leaverKey struct{}
	var registered atomic.Bool
	obs := observerFunc(func(e singleflight.Event) {
		if e.Kind == singleflight.EventLoaderStarted && e.Ctx.Value(leaverKey{}) != nil {
			registered.Store(true)
		}
	})
	g := singleflight.New[string, int](singleflight.WithCancelWhenAbandoned(), singleflight.WithObserver(obs))
	dead, cancel := context.WithCancel(context.WithValue(context.Background(), leaverKey{}, true))
	cancel()
	type round struct {
		release chan struct{} // lets the loader return 1 once the leaver is gone
		entered atomic.Bool   // the leaving caller is about to call Do
	}
	next := make(chan *round)
	// left is buffered so that a failed round does not strand the leaver.
	left := make(chan struct{}, 1)
	go func() { // the leaving caller
		for r := range next {
			r.entered.Store(true)
			g.Do(dead, "k", func(ctx context.Context) (int, error) {
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-r.release:
					return 1, nil
				}
			})
			close(r.release)
			left <- struct{}{}
		}
	}()
	defer close(next)

	spin, early, late := 0, 0, 0
	end := time.Now().Add(budget)
	for n := 0; n < rounds && (n%256 != 0 || time.Now().Before(end)); n++ {
		r := &round{release: make(chan struct{})}
		registered.Store(false)
		next <- r
		for !r.entered.Load() {
		}
		for i := 0; i < spin; i++ {
			spinSink.Add(1)
		}
		var afterLeaver bool
		v, _, err := g.Do(context.Background(), "k", func(context.Context) (int, error) {
			afterLeaver = registered.Load()
			return 2, nil
		})
		switch {
		case err != nil:
			t.Fatalf("round %d (spin %d, %d early, %d late): a caller whose context is alive got %v (ErrAbandoned: %v), want a value",
				n, spin, early, late, err, errors.Is(err, singleflight.ErrAbandoned))
		case v == 1, v == 2 && !afterLeaver: // joined, or ran before the leaver came
			early++
			spin++
		case v == 2: // the leaver had come and gone: the key was free
			late++
			spin = max(0, spin-1)
		default:
			t.Fatalf("live caller got %d, want 1 or 2", v)
		}
		<-left
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d after every call returned, want 0", n)
	}
}

var spinSink atomic.Int64

type observerFunc func(singleflight.Event)

func (f observerFunc) ObserveFlight(e singleflight.Event) { f(e) }

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
	// A 1 ms timeout can release a caller before its loader's goroutine has
	// been scheduled: the slot is taken at registration, the start counted
	// only when fn runs.
	waitFor(t, "the admitted loaders to start", func() bool { return starts.Load() >= limit })
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
	// Admitted is what counts: on a loaded machine even this loader may miss
	// the 1 ms timeout, but it must run.
	ran := make(chan struct{})
	if _, _, err := g.Do(context.Background(), -2, func(context.Context) (int, error) { close(ran); return 2, nil }); errors.Is(err, singleflight.ErrTooManyInFlight) {
		t.Fatalf("after the hung loaders returned: %v; want a new execution", err)
	}
	<-ran
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
