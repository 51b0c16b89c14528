package flightcache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/key"
	"github.com/flightcache/flightcache/singleflight"
)

// TestStampedeOnColdKeyLoadsOnce: 10,000 concurrent Gets of a cold key with
// a 50 ms origin make exactly one origin call, every caller gets that value,
// and the outcomes add up to 1 loaded plus the rest coalesced or hit.
func TestStampedeOnColdKeyLoadsOnce(t *testing.T) {
	const callers = 10_000
	c := newCache(t, flightcache.Options[*product]{})
	var calls atomic.Int64
	want := &product{Name: "the one"}
	load := func(ctx context.Context) (*product, error) {
		calls.Add(1)
		time.Sleep(50 * time.Millisecond) // the origin's latency
		return want, nil
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var outcomes [16]atomic.Int64
	var wrong atomic.Int64
	for range callers {
		wg.Go(func() {
			<-start
			r, err := c.Fetch(context.Background(), "product:42", load)
			if err != nil || r.Value != want {
				wrong.Add(1)
			}
			outcomes[r.Outcome].Add(1)
		})
	}
	close(start)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("origin calls = %d, want 1", n)
	}
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d callers did not get the loaded value", n)
	}
	loaded := outcomes[flightcache.OutcomeLoaded].Load()
	rest := outcomes[flightcache.OutcomeCoalesced].Load() + outcomes[flightcache.OutcomeHitLocal].Load()
	if loaded != 1 || loaded+rest != callers {
		t.Fatalf("outcomes: loaded %d, coalesced+hit %d; want 1 and %d", loaded, rest, callers-1)
	}
}

// flightsEnded is an Observer that signals each time the engine has no
// flight registered any more.
type flightsEnded struct{ ch chan struct{} }

func (flightsEnded) ObserveCache(driver.Event) {}

func (f flightsEnded) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventInFlight && e.InFlight == 0 {
		f.ch <- struct{}{}
	}
}

// TestHotKeyNeverMissesWithEarlyRefresh drives traffic on one key across
// ten TTL periods on a fake clock (a request every 1 ms, each load taking
// 50 ms of clock time). With EarlyRefresh no request after warm-up ever
// waits for a load: every one is a hit, and the origin is called about once
// per period. (XFetch makes one trial per request, so the busier the key the
// earlier it refreshes: here about Δ·ln(Δ/step) ≈ 200 ms before expiry, so a
// little more than once per TTL.)
func TestHotKeyNeverMissesWithEarlyRefresh(t *testing.T) {
	const (
		ttl     = time.Second
		periods = 10
		step    = time.Millisecond
		loadFor = 50 * time.Millisecond
	)
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 1)}
	// The fake clock runs far ahead of real time, so a refresh's flight
	// may still be registered (its write done, its goroutine not yet
	// scheduled to finish) when the next one is due: each refresh is waited
	// for until its flight has ended, as real time would have allowed.
	idle := flightsEnded{ch: make(chan struct{}, 64)}
	c := clocked(t, clock, flightcache.Options[*product]{Local: local, TTL: ttl, Jitter: flightcache.DisableJitter, EarlyRefresh: true, Observer: idle})
	var calls atomic.Int64
	load := func(ctx context.Context) (*product, error) {
		n := calls.Add(1)
		clock.Advance(loadFor) // Δ, as the Cache measures it
		return &product{Price: int(n)}, nil
	}
	wantOutcome(t, mustFetch(t, c, "hot", load).Outcome, flightcache.OutcomeLoaded)
	<-local.sets
	<-idle.ch

	end := clock.Now().Add(periods * ttl)
	refreshes := 0
	for clock.Now().Before(end) {
		r := mustFetch(t, c, "hot", load)
		switch r.Outcome {
		case flightcache.OutcomeHitLocal:
		case flightcache.OutcomeRefreshed:
			refreshes++
			<-local.sets // the background refresh wrote back
			<-idle.ch    // and its flight is over
		default:
			t.Fatalf("request at +%v was served %v: a hot key missed", end.Sub(clock.Now()), r.Outcome)
		}
		clock.Advance(step)
	}
	n := calls.Load() - 1
	if n != int64(refreshes) || n < periods*2/3 || n > periods*3/2 {
		t.Fatalf("%d refresh loads (%d started) over %d periods, want about one per period", n, refreshes, periods)
	}
	t.Logf("%d refreshes over %d TTL periods", n, periods)
}

// TestEarlyRefreshRunsOncePerKey: however many hits ask for a refresh while
// one is running, only one background load runs.
func TestEarlyRefreshRunsOncePerKey(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 1)}
	c := clocked(t, clock, flightcache.Options[*product]{Local: local, TTL: time.Minute, Jitter: flightcache.DisableJitter, EarlyRefresh: true})
	var calls atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	load := func(ctx context.Context) (*product, error) {
		switch calls.Add(1) {
		case 1:
			clock.Advance(30 * time.Second) // Δ = 30s
		case 2:
			close(entered)
			<-release
		}
		return &product{}, nil
	}
	mustFetch(t, c, "k", load)
	<-local.sets
	clock.Advance(time.Minute - time.Nanosecond) // 1ns before expiry: a refresh is all but certain

	var wg sync.WaitGroup
	var refreshed atomic.Int64
	for range 100 {
		wg.Go(func() {
			r, err := c.Fetch(context.Background(), "k", load)
			if err != nil || !r.Outcome.Hit() {
				t.Errorf("hit during refresh = %v, %v", r.Outcome, err)
			}
			if r.Outcome == flightcache.OutcomeRefreshed {
				refreshed.Add(1)
			}
		})
	}
	wg.Wait()
	<-entered
	close(release)
	<-local.sets
	if calls.Load() != 2 || refreshed.Load() != 1 {
		t.Fatalf("%d loads, %d refreshes started; want 2 and 1", calls.Load(), refreshed.Load())
	}
}

// TestEarlyRefreshDoesNotFireFarFromExpiry: XFetch only refreshes close to
// expiry (relative to Δ); far from it, hits are plain hits.
func TestEarlyRefreshDoesNotFireFarFromExpiry(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Hour, Jitter: flightcache.DisableJitter, EarlyRefresh: true})
	var calls atomic.Int64
	load := func(ctx context.Context) (*product, error) {
		calls.Add(1)
		clock.Advance(time.Second)
		return &product{}, nil
	}
	mustFetch(t, c, "k", load)
	for range 10_000 {
		wantOutcome(t, mustFetch(t, c, "k", load).Outcome, flightcache.OutcomeHitLocal)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d loads", calls.Load())
	}
}

// TestCloseStopsBackgroundRefresh: Close cancels a running refresh (cause
// ErrClosed) and waits for it, so no goroutine outlives the Cache.
func TestCloseStopsBackgroundRefresh(t *testing.T) {
	clock := newFakeClock()
	local := newLocal[*product](t, clock)
	c, err := flightcache.New(flightcache.Options[*product]{Local: local, Now: clock.Now, TTL: time.Minute, Jitter: flightcache.DisableJitter, EarlyRefresh: true, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	entered := make(chan struct{})
	causes := make(chan error, 1)
	load := func(ctx context.Context) (*product, error) {
		if calls.Add(1) == 1 {
			clock.Advance(30 * time.Second)
			return &product{}, nil
		}
		close(entered)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	mustFetch(t, c, "k", load)
	clock.Advance(time.Minute - time.Nanosecond)
	wantOutcome(t, mustFetch(t, c, "k", load).Outcome, flightcache.OutcomeRefreshed)
	<-entered
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The engine cancels the loader; Close waited for the refresh goroutine,
	// and leakcheck checks the loader's goroutine at the end of the run.
	if err := <-causes; !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("refresh loader cancelled with cause %v, want ErrClosed", err)
	}
}

// TestTenantIsolation: the same product for two tenants, keyed with package
// key, never returns the other tenant's value, even under concurrency.
func TestTenantIsolation(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	productKey := key.New("product").Version("1").Require(key.DimTenant)
	var wg sync.WaitGroup
	for i := range 200 {
		tenant := []string{"acme", "globex"}[i%2]
		wg.Go(func() {
			k, err := productKey.Tenant(tenant).ID("42").Build()
			if err != nil {
				t.Error(err)
				return
			}
			p, err := c.Get(context.Background(), k, func(ctx context.Context) (*product, error) {
				return &product{ID: "42", Name: tenant + "'s price list"}, nil
			})
			if err != nil || p.Name != tenant+"'s price list" {
				t.Errorf("tenant %s got %+v, %v", tenant, p, err)
			}
		})
	}
	wg.Wait()
	// Forgetting the tenant is an error, not a key shared by all tenants.
	if _, err := productKey.ID("42").Build(); !errors.Is(err, key.ErrInvalid) {
		t.Fatalf("key without tenant: %v", err)
	}
}

// spanTracer marks each load's context so a test can see which load a
// Get's span links to.
type spanTracer struct {
	mu    sync.Mutex
	gets  []driver.SpanInfo
	loads atomic.Int64
}

type spanKey struct{}

func (s *spanTracer) StartGet(ctx context.Context, cache string) (context.Context, func(driver.SpanInfo)) {
	return ctx, func(info driver.SpanInfo) {
		s.mu.Lock()
		s.gets = append(s.gets, info)
		s.mu.Unlock()
	}
}

func (s *spanTracer) StartLoad(ctx context.Context, cache string) (context.Context, func(error)) {
	return context.WithValue(ctx, spanKey{}, s.loads.Add(1)), func(error) {}
}

// joinSignal is an engine Observer that reports callers joining a flight.
type joinSignal chan struct{}

func (j joinSignal) ObserveCache(driver.Event) {}
func (j joinSignal) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventShared {
		j <- struct{}{}
	}
}

func TestTracerLinksWaitersToTheLeadersLoad(t *testing.T) {
	tr := &spanTracer{}
	joined := make(joinSignal, 1)
	c := newCache(t, flightcache.Options[*product]{Tracer: tr, Observer: joined})
	entered, release := make(chan struct{}), make(chan struct{})
	load := func(ctx context.Context) (*product, error) {
		close(entered)
		<-release
		return &product{}, nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.Get(context.Background(), "k", load) })
	<-entered
	wg.Go(func() { c.Get(context.Background(), "k", load) })
	<-joined
	close(release)
	wg.Wait()

	if len(tr.gets) != 2 || tr.loads.Load() != 1 {
		t.Fatalf("%d Get spans, %d load spans; want 2 and 1", len(tr.gets), tr.loads.Load())
	}
	led := 0
	for _, g := range tr.gets {
		if g.Led {
			led++
			wantOutcome(t, g.Outcome, flightcache.OutcomeLoaded)
		} else {
			wantOutcome(t, g.Outcome, flightcache.OutcomeCoalesced)
		}
		if g.LoadCtx == nil || g.LoadCtx.Value(spanKey{}) != int64(1) {
			t.Fatalf("Get span (led=%v) not linked to the load span", g.Led)
		}
	}
	if led != 1 {
		t.Fatalf("%d Gets led the load, want 1", led)
	}
}
