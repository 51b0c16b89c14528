package flightcache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// gatedLoad is a loader that signals started when it is called and
// returns v (or err) once gate is closed.
func gatedLoad(o *origin, started chan<- struct{}, gate <-chan struct{}) flightcache.LoadFunc[*product] {
	return func(ctx context.Context) (*product, error) {
		started <- struct{}{}
		<-gate
		return o.load("1")(ctx)
	}
}

// refreshAsync runs Refresh in a goroutine and delivers its answer.
func refreshAsync(c *flightcache.Cache[*product], key string, load flightcache.LoadFunc[*product]) <-chan refreshAnswer {
	ch := make(chan refreshAnswer, 1)
	go func() {
		v, err := c.Refresh(context.Background(), key, load)
		ch <- refreshAnswer{v, err}
	}()
	return ch
}

type refreshAnswer struct {
	v   *product
	err error
}

func TestRefreshReplacesTheHeldValueInBothTiers(t *testing.T) {
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	var o origin
	if r := mustFetch(t, c, "p:1", o.load("1")); r.Value.Price != 1 {
		t.Fatalf("first Get = %+v", r.Value)
	}
	v, err := c.Refresh(context.Background(), "p:1", o.load("1"))
	if err != nil || v.Price != 2 {
		t.Fatalf("Refresh = %+v, %v; want load #2", v, err)
	}
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if r.Value.Price != 2 {
		t.Fatalf("Get after Refresh = load #%d, want #2", r.Value.Price)
	}
	// Another instance on the same shared tier reads the new value there.
	other := newCache(t, flightcache.Options[*product]{Shared: shared, TTL: time.Hour})
	r = mustFetch(t, other, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if r.Value.Price != 2 {
		t.Fatalf("shared tier holds load #%d, want #2", r.Value.Price)
	}
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("origin called %d times, want 2", n)
	}
}

func TestRefreshFailureKeepsTheHeldValue(t *testing.T) {
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	failing := &origin{err: errOrigin}
	if _, err := c.Refresh(context.Background(), "p:1", failing.load("1")); !errors.Is(err, errOrigin) {
		t.Fatalf("failed Refresh = %v, want the loader's error", err)
	}
	r := mustFetch(t, c, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if r.Value.Price != 1 {
		t.Fatalf("Get after a failed Refresh = load #%d, want the held #1", r.Value.Price)
	}
	e, ok := shared.peek("p:1")
	if !ok || e.LoadedAt.IsZero() {
		t.Fatal("the failed Refresh removed the shared entry")
	}
	other := newCache(t, flightcache.Options[*product]{Shared: shared, TTL: time.Hour})
	if r := mustFetch(t, other, "p:1", o.load("1")); r.Value.Price != 1 {
		t.Fatalf("shared tier after a failed Refresh holds load #%d, want #1", r.Value.Price)
	}
}

func TestRefreshHonoursNoStoreAndSetTTL(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Hour})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	noStore := func(ctx context.Context) (*product, error) {
		flightcache.NoStore(ctx)
		return o.load("1")(ctx)
	}
	if v, err := c.Refresh(context.Background(), "p:1", noStore); err != nil || v.Price != 2 {
		t.Fatalf("NoStore Refresh = %+v, %v", v, err)
	}
	if v, ok := c.Peek(context.Background(), "p:1"); !ok || v.Price != 1 {
		t.Fatalf("after a NoStore Refresh Peek = %+v, %v; want the held #1", v, ok)
	}
	short := func(ctx context.Context) (*product, error) {
		flightcache.SetTTL(ctx, time.Minute)
		return o.load("1")(ctx)
	}
	if v, err := c.Refresh(context.Background(), "p:1", short); err != nil || v.Price != 3 {
		t.Fatalf("SetTTL Refresh = %+v, %v", v, err)
	}
	if v, ok := c.Peek(context.Background(), "p:1"); !ok || v.Price != 3 {
		t.Fatalf("after the SetTTL Refresh Peek = %+v, %v; want #3", v, ok)
	}
	clock.Advance(time.Minute)
	if _, ok := c.Peek(context.Background(), "p:1"); ok {
		t.Fatal("the refreshed value outlived the TTL its loader set")
	}
}

// A Get that finds a fresh value while a Refresh of its key loads is
// answered at once with that value: the loader is still blocked when the
// Get returns.
func TestGetsDuringARefreshServeTheHeldValueWithoutWaiting(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{TTL: time.Hour})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	started, gate := make(chan struct{}, 1), make(chan struct{})
	done := refreshAsync(c, "p:1", gatedLoad(&o, started, gate))
	<-started
	for range 3 {
		r := mustFetch(t, c, "p:1", o.load("1"))
		wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
		if r.Value.Price != 1 {
			t.Fatalf("Get during the Refresh = load #%d, want the held #1", r.Value.Price)
		}
	}
	close(gate)
	if a := <-done; a.err != nil || a.v.Price != 2 {
		t.Fatalf("Refresh = %+v, %v", a.v, a.err)
	}
	if r := mustFetch(t, c, "p:1", o.load("1")); r.Value.Price != 2 {
		t.Fatalf("Get after the Refresh = load #%d, want #2", r.Value.Price)
	}
}

// A Refresh and a Get of one key share one load, whichever comes first.
func TestRefreshAndGetOfOneKeyCoalesceToOneLoad(t *testing.T) {
	for _, refreshFirst := range []bool{true, false} {
		name := "get first"
		if refreshFirst {
			name = "refresh first"
		}
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			c := newCache(t, flightcache.Options[*product]{TTL: time.Hour, Observer: rec})
			var o origin
			started, gate := make(chan struct{}, 1), make(chan struct{})
			load := gatedLoad(&o, started, gate)
			var refreshed <-chan refreshAnswer
			got := make(chan flightcache.Result[*product], 1)
			get := func() {
				r, err := c.Fetch(context.Background(), "p:1", load)
				if err != nil {
					t.Error(err)
				}
				got <- r
			}
			if refreshFirst {
				refreshed = refreshAsync(c, "p:1", load)
				<-started
				go get()
			} else {
				go get()
				<-started
				refreshed = refreshAsync(c, "p:1", load)
			}
			waitJoined(t, rec, 1)
			close(gate)
			a := <-refreshed
			r := <-got
			if a.err != nil || a.v.Price != 1 || r.Value.Price != 1 {
				t.Fatalf("Refresh = %+v, %v; Get = %+v", a.v, a.err, r.Value)
			}
			if refreshFirst {
				wantOutcome(t, r.Outcome, flightcache.OutcomeCoalesced)
			}
			if n := o.calls.Load(); n != 1 {
				t.Fatalf("origin called %d times, want 1", n)
			}
		})
	}
}

// waitJoined waits until n callers joined a flight already running.
func waitJoined(t *testing.T, rec *recorder, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rec.engineCount("shared") < n {
		if time.Now().After(deadline) {
			t.Fatal("the second caller never joined the flight")
		}
		time.Sleep(time.Millisecond) // polling an observable state, not waiting for an effect
	}
}

// A Get's flight whose double-check found the value in the shared tier
// loaded nothing: a Refresh that joined it loads in a flight of its own.
func TestRefreshThatJoinedADoubleCheckHitLoadsAnyway(t *testing.T) {
	shared := newMapShared(nil)
	writer := newCache(t, flightcache.Options[*product]{Shared: shared, TTL: time.Hour})
	var o origin
	inDoubleCheck, release := make(chan struct{}), make(chan struct{})
	shared.afterGet = func(n int64) {
		switch n {
		case 1: // the Get's read before its flight missed; fill the tier now
			if err := writer.Set(context.Background(), "p:1", &product{ID: "1", Price: 100}); err != nil {
				t.Error(err)
			}
		case 2: // the flight's double-check found it
			close(inDoubleCheck)
			<-release
		}
	}
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour, Observer: rec})
	got := make(chan flightcache.Result[*product], 1)
	go func() {
		r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	<-inDoubleCheck
	refreshed := refreshAsync(c, "p:1", o.load("1"))
	waitJoined(t, rec, 1)
	close(release)
	if r := <-got; r.Value.Price != 100 {
		t.Fatalf("Get = %+v, want the value Set in the shared tier", r.Value)
	}
	a := <-refreshed
	if a.err != nil || a.v.Price != 1 {
		t.Fatalf("Refresh = %+v, %v; want a load of its own (#1)", a.v, a.err)
	}
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times, want 1", n)
	}
}

// A Set made while a Refresh loads wins: the Refresh's older load is
// returned to its caller but stored nowhere.
func TestSetDuringARefreshWins(t *testing.T) {
	shared := newMapShared(nil)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, TTL: time.Hour})
	var o origin
	mustFetch(t, c, "p:1", o.load("1"))
	started, gate := make(chan struct{}, 1), make(chan struct{})
	done := refreshAsync(c, "p:1", gatedLoad(&o, started, gate))
	<-started
	if err := c.Set(context.Background(), "p:1", &product{ID: "1", Price: 100}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if a := <-done; a.err != nil || a.v.Price != 2 {
		t.Fatalf("Refresh = %+v, %v; want its own load #2", a.v, a.err)
	}
	if r := mustFetch(t, c, "p:1", o.load("1")); r.Value.Price != 100 {
		t.Fatalf("Get after the Set = %+v, want the Set's value", r.Value)
	}
	other := newCache(t, flightcache.Options[*product]{Shared: shared, TTL: time.Hour})
	if r := mustFetch(t, other, "p:1", o.load("1")); r.Value.Price != 100 {
		t.Fatalf("shared tier = %+v, want the Set's value", r.Value)
	}
}

func TestRefreshRefusesAnInvalidKeyWithATypedError(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var o origin
	for _, key := range []string{"", strings.Repeat("k", 100_000), "\xff"} {
		_, err := c.Refresh(context.Background(), key, o.load("1"))
		var ke *flightcache.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, flightcache.ErrInvalidKey) {
			t.Fatalf("Refresh of a %d-byte invalid key = %v, want a *KeyError", len(key), err)
		}
	}
	if _, err := c.Refresh(context.Background(), "p:1", nil); !errors.Is(err, singleflight.ErrNilFunc) {
		t.Fatalf("Refresh with a nil load = %v", err)
	}
	if n := o.calls.Load(); n != 0 {
		t.Fatalf("origin called %d times", n)
	}
	c.Close()
	if _, err := c.Refresh(context.Background(), "p:1", o.load("1")); !errors.Is(err, flightcache.ErrClosed) {
		t.Fatalf("Refresh after Close = %v", err)
	}
}

// A Refresh is reported through its flight's events, never as a Get.
func TestRefreshIsReportedAsAnOriginCallNotAGet(t *testing.T) {
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Observer: rec})
	var o origin
	if _, err := c.Refresh(context.Background(), "p:1", o.load("1")); err != nil {
		t.Fatal(err)
	}
	if n := rec.count(driver.EventOriginCall); n != 1 {
		t.Fatalf("%d origin calls reported, want 1", n)
	}
	if n := rec.count(driver.EventGet); n != 0 {
		t.Fatalf("%d Gets reported for a Refresh, want 0", n)
	}
}
