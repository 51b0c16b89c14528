package flightcache_test

// Tests that settle suspicions about the coherence of the read and write
// paths: each is named for the invariant it pins. Coordinators and buses
// here are hand-made test doubles of their contracts (package redislease
// tests the real ones on Redis): what is under test is what the Cache asks
// of them and when.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// fencingCoord is an in-memory Coordinator with the fencing semantics of
// redislease: every Claim that leads and every Invalidate issues a new
// token for the key, and a lease's Complete writes its entry to the shared
// tier only if its token is still the newest for the key. Claim always
// leads unless claim is set.
type fencingCoord struct {
	shared *mapShared

	mu     sync.Mutex
	tokens map[string]uint64 // guarded by mu

	// claim, when set, answers Claim instead (a slow or busy coordinator).
	claim func(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error)
	// invalidate, when set, runs before Invalidate fences: it may return
	// an error (the call failed, nothing was fenced) or wait.
	invalidate func(ctx context.Context) error
	// ended, when set, receives the end of every lease: the entry its
	// Complete was asked to store (nil for none, or for a Fail).
	ended chan *driver.Entry
	// noReadBack: a refused Complete does not hand back the entry that
	// refused it (driver.Completion.Current), as a Coordinator that does
	// not read it would.
	noReadBack bool
}

func newFencingCoord(shared *mapShared) *fencingCoord {
	return &fencingCoord{shared: shared, tokens: make(map[string]uint64)}
}

func (f *fencingCoord) next(key string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[key]++
	return f.tokens[key]
}

func (f *fencingCoord) newest(key string, token uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens[key] == token
}

func (f *fencingCoord) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	if f.claim != nil {
		return f.claim(ctx, key, req)
	}
	return driver.Grant{Lease: f.lease(key)}, nil
}

// lease hands out the key's lease with a new token: what Claim returns to
// the instance that leads, here or, called by a test, on another instance.
func (f *fencingCoord) lease(key string) *fencedLease {
	return &fencedLease{f: f, key: key, token: f.next(key)}
}

func (f *fencingCoord) Invalidate(ctx context.Context, key string) error {
	if f.invalidate != nil {
		if err := f.invalidate(ctx); err != nil {
			return err
		}
	}
	f.next(key)
	return nil
}

type fencedLease struct {
	f     *fencingCoord
	key   string
	token uint64
}

func (l *fencedLease) Token() uint64         { return l.token }
func (l *fencedLease) TakenOver() bool       { return false }
func (l *fencedLease) Lost() <-chan struct{} { return nil }

func (l *fencedLease) Complete(ctx context.Context, e *driver.Entry) (driver.Completion, error) {
	if l.f.ended != nil {
		defer func() { l.f.ended <- e }()
	}
	if e == nil {
		return driver.Completion{}, nil
	}
	if !l.f.newest(l.key, l.token) {
		// Refused: the entry that refused it, read back as redislease's
		// script does, unless the test wants the Cache to read it itself.
		var done driver.Completion
		if !l.f.noReadBack {
			if cur, ok := l.f.shared.peek(l.key); ok {
				done.Current = &cur
			}
		}
		return done, nil
	}
	return driver.Completion{Written: true}, l.f.shared.Set(ctx, l.key, *e)
}

func (l *fencedLease) Fail(ctx context.Context, err error) error {
	if l.f.ended != nil {
		l.f.ended <- nil
	}
	return nil
}

// sharedPrice decodes the price of key's entry in s, 0 when there is none.
func sharedPrice(t *testing.T, s *mapShared, key string) int {
	t.Helper()
	e, ok, err := s.Get(context.Background(), key)
	if err != nil || !ok {
		return 0
	}
	var p product
	if err := json.Unmarshal(e.Value, &p); err != nil {
		t.Fatalf("shared entry of %q: %v", key, err)
	}
	return p.Price
}

// entryOf is the shared-tier entry of p as a load that read its origin at
// readAt would write it.
func entryOf(t *testing.T, p *product, readAt time.Time) *driver.Entry {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &driver.Entry{Value: data, Meta: driver.Meta{
		LoadedAt: readAt, FreshUntil: readAt.Add(time.Hour), StaleUntil: readAt.Add(time.Hour),
	}}
}

// A Set is an explicit write: once it has started, its caller leaving must
// not undo half of it. The fence through the Coordinator is what makes an
// older load on another instance lose its write-back; if the caller's
// context cuts the fence short while the write itself goes on (it runs on
// its own SharedTimeout), that older load overwrites the Set's value in
// the shared tier for its whole TTL.
func TestSetFencesTheKeyEvenWhenItsCallerLeaves(t *testing.T) {
	shared := newMapShared(time.Now)
	coord := newFencingCoord(shared)
	entered, proceed := make(chan struct{}), make(chan struct{})
	coord.invalidate = func(ctx context.Context) error {
		// A slow coordination service: the caller leaves while the fence
		// is on its way, and a client gives up on a call whose context
		// has ended (redislease's does: its calls run on ctx).
		entered <- struct{}{}
		<-proceed
		return ctx.Err()
	}
	c := newCache(t, flightcache.Options[*product]{Shared: shared, Coordinator: coord})

	// Another instance leads a load of k and read its origin before the Set.
	readAt := time.Now()
	older := coord.lease("k")

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered
		cancel() // the caller of Set leaves while the fence is under way
		close(proceed)
	}()
	setErr := c.Set(ctx, "k", &product{ID: "k", Price: 2})
	t.Logf("Set with its caller leaving during the fence: %v", setErr)
	if got := sharedPrice(t, shared, "k"); got != 2 {
		t.Fatalf("after Set the shared tier holds price %d, want 2", got)
	}

	done, err := older.Complete(context.Background(), entryOf(t, &product{ID: "k", Price: 1}, readAt))
	if err != nil {
		t.Fatal(err)
	}
	if done.Written || sharedPrice(t, shared, "k") != 2 {
		t.Fatalf("the older load's fenced write landed after the Set (written %v, shared price %d): "+
			"the Set wrote the shared tier but its fence was cut short by the caller's context", done.Written, sharedPrice(t, shared, "k"))
	}
}

// The engine's hard timeout exists only to release the callers of a
// loader or store that ignores its context. A flight in which every step
// stays inside its own bound (the Coordinator's calls inside the
// Coordinator's own timeout, the loader inside LoaderTimeout) must never
// be cut short by it.
//
// Here the Coordinator answers Claim in 700ms, inside its own per-call
// timeout (think redislease.Options.Timeout = 1s, while SharedTimeout is
// 5ms), and the loader returns after 500ms of its 1s LoaderTimeout.
func TestFlightWithinItsCoordinatorsOwnTimeoutIsNotCutShort(t *testing.T) {
	const (
		claimTakes    = 700 * time.Millisecond
		loadTakes     = 500 * time.Millisecond
		loaderTimeout = time.Second
	)
	shared := newMapShared(time.Now)
	coord := newFencingCoord(shared)
	coord.claim = func(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(claimTakes): // slow, but inside the coordinator's own bound
		}
		return driver.Grant{Lease: coord.lease(key)}, nil
	}
	c := newCache(t, flightcache.Options[*product]{
		Shared: shared, Coordinator: coord,
		SharedTimeout: 5 * time.Millisecond, CoalesceWait: 10 * time.Millisecond, LoaderTimeout: loaderTimeout,
	})
	load := func(ctx context.Context) (*product, error) {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(loadTakes):
			return &product{ID: "k", Price: 1}, nil
		}
	}
	r, err := c.Fetch(context.Background(), "k", load)
	if err != nil || r.Value == nil || r.Value.Price != 1 {
		t.Fatalf("Fetch = %+v, %v; want the loaded value: the Claim (%v) stayed within the coordinator's bound and "+
			"the load (%v) within LoaderTimeout (%v), yet the engine's hard timeout "+
			"(LoaderTimeout+SharedTimeout+CoalesceWait+2×SharedTimeout+10ms = 1.035s) fired first",
			r, err, claimTakes, loadTakes, loaderTimeout)
	}
}

// An early refresh runs while the current value is still fresh: nobody
// waits for it. In cluster mode, when another instance holds the key's
// lease past CoalesceWait, that instance will store the new value; a
// refresh that then loads the origin anyway and stores nothing is an
// origin call for nothing (and the key is not refreshed by it). A refresh
// either stores what it loads or does not load.
func TestClusterEarlyRefreshNeverLoadsWithoutStoring(t *testing.T) {
	clock := newFakeClock()
	local := newLocal[*product](t, clock)
	shared := newMapShared(clock.Now)
	coord := newFencingCoord(shared)
	var claims atomic.Int64
	coord.claim = func(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
		claims.Add(1)
		// Another instance holds the lease for longer than the wait.
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(req.Wait):
		}
		return driver.Grant{Waited: req.Wait}, flightcache.ErrCoalesceTimeout
	}
	idle := flightsEnded{ch: make(chan struct{}, 64)}
	c := clocked(t, clock, flightcache.Options[*product]{
		Local: local, Shared: shared, Coordinator: coord, Observer: idle,
		TTL: time.Minute, Jitter: flightcache.DisableJitter, EarlyRefresh: true,
		CoalesceWait: 20 * time.Millisecond,
	})
	// The current value: loaded in 30s (XFetch's Δ), 1ns before expiry,
	// so a hit all but certainly starts a refresh.
	now := clock.Now()
	local.Set("k", driver.Item[*product]{Value: &product{ID: "k", Price: 1}, Meta: driver.Meta{
		LoadedAt: now, LoadDuration: 30 * time.Second, FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Minute),
	}})
	clock.Advance(time.Minute - time.Nanosecond)

	var loads atomic.Int64
	load := func(ctx context.Context) (*product, error) {
		loads.Add(1)
		return &product{ID: "k", Price: 2}, nil
	}
	wantOutcome(t, mustFetch(t, c, "k", load).Outcome, flightcache.OutcomeRefreshed)
	select {
	case <-idle.ch: // the refresh's flight is over
	case <-time.After(10 * time.Second):
		t.Fatal("the refresh's flight did not end")
	}
	if claims.Load() == 0 {
		t.Fatal("the refresh never asked the coordinator")
	}
	stored := sharedPrice(t, shared, "k") == 2
	if it, ok := local.Get("k"); ok && it.Value.Price == 2 {
		stored = true
	}
	if loads.Load() > 0 && !stored {
		t.Fatalf("the refresh called the origin %d time(s) after waiting CoalesceWait for another instance's lease, "+
			"and stored nothing", loads.Load())
	}
}

// New validates its stores: a typed nil (a nil *testlocal.Store in the
// Local interface) is as absent as an untyped one, and it is refused with
// a *ConfigError naming the field, not accepted to panic on the first Get,
// nor a panic in New itself.
func TestTypedNilStoreIsAConfigError(t *testing.T) {
	var (
		nilLocal *testlocal.Store[*product]
		nilMap   *mapShared
	)
	for _, tc := range []struct {
		name, field string
		opts        flightcache.Options[*product]
	}{
		{"nil test store as Local", "Local", flightcache.Options[*product]{Local: nilLocal}},
		{"nil test store as Local beside a Shared", "Local", flightcache.Options[*product]{Local: nilLocal, Shared: newMapShared(time.Now)}},
		{"nil test store as Shared", "Shared", flightcache.Options[*product]{Shared: nilMap}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("New panicked: %v; want a *ConfigError on %s", p, tc.field)
				}
			}()
			tc.opts.Logger = quietLogger
			c, err := flightcache.New(tc.opts)
			if c != nil {
				c.Close()
			}
			var ce *flightcache.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, flightcache.ErrInvalidConfig) {
				t.Fatalf("New = %v, want a *ConfigError on %s", err, tc.field)
			}
		})
	}
}

// A bulk invalidation replayed while the bus is down (before BusUp) notes
// its fence and outdates the loads in flight under its prefix at once;
// the resynchronisation that comes with BusUp empties the local tier. So a
// load that read its origin before the invalidation stores nothing in
// either tier, whether it finishes before BusUp or after, and is never
// served once the bus is up.
func TestLoadOlderThanABulkInvalidationReplayedWhileTheBusIsDownIsNotServedAfterBusUp(t *testing.T) {
	for _, finish := range []string{"before BusUp", "after BusUp"} {
		t.Run("load finishes "+finish, func(t *testing.T) {
			shared := newMapShared(time.Now)
			b := newInstance(t, &busNet{}, shared, nil, nil)
			b.bus.setState(driver.BusDown)

			started, release := make(chan struct{}), make(chan struct{})
			old := func(ctx context.Context) (*product, error) {
				close(started)
				<-release
				return &product{ID: "1", Price: 1}, nil
			}
			done := make(chan flightcache.Result[*product])
			go func() {
				r, _ := b.c.Fetch(context.Background(), "item:1", old)
				done <- r
			}()
			<-started
			// Replayed before BusUp: received while the state is BusDown.
			b.bus.inject(driver.Invalidation{Kind: driver.InvalidationPrefix, Target: "item:", Version: time.Now()})
			if finish == "before BusUp" {
				close(release)
				if r := <-done; r.Value.Price != 1 {
					t.Fatalf("the load's own caller got %d, want its value 1", r.Value.Price)
				}
				if b.local.has("item:1") {
					t.Fatal("a load older than the replayed invalidation was stored in the local tier")
				}
				b.bus.setState(driver.BusUp)
			} else {
				b.bus.setState(driver.BusUp)
				close(release)
				if r := <-done; r.Value.Price != 1 {
					t.Fatalf("the load's own caller got %d, want its value 1", r.Value.Price)
				}
			}
			if b.c.BusState() != driver.BusUp {
				t.Fatalf("bus state %v, want up", b.c.BusState())
			}
			if b.local.has("item:1") {
				t.Fatal("the local tier holds a value read before the invalidation after BusUp")
			}
			if _, ok := shared.peek("item:1"); ok {
				t.Fatal("a load older than the replayed invalidation was stored in the shared tier")
			}
			var price, calls atomic.Int64
			price.Store(2)
			r := mustGet(t, b.c, "item:1", valueLoader(&price, &calls))
			if r.Value.Price != 2 || calls.Load() != 1 {
				t.Fatalf("after BusUp: price %d (%v, %d loads), want a new load of 2", r.Value.Price, r.Outcome, calls.Load())
			}
		})
	}
}

// A leader whose fenced write is refused hands its callers the entry that
// refused it, not its own older value, even when the shared tier cannot be
// read after the refusal (a timeout on a busy or just-thawed host): the
// Coordinator reads that entry back in the same step as the refusal
// (driver.Completion.Current). A Coordinator that does not read it back
// leaves the Cache its own read, and when that fails too the callers get
// the load's own value, the only one there is.
func TestRefusedLeaderServesTheEntryThatRefusedItWithoutReadingTheTier(t *testing.T) {
	for _, readBack := range []bool{true, false} {
		shared := newMapShared(time.Now)
		coord := newFencingCoord(shared)
		coord.noReadBack = !readBack
		c := newCache(t, flightcache.Options[*product]{Shared: shared, Coordinator: coord})
		started, gate := make(chan struct{}), make(chan struct{})
		load := func(ctx context.Context) (*product, error) {
			close(started)
			<-gate
			return &product{ID: "k", Price: 1}, nil
		}
		res := make(chan *product, 1)
		go func() {
			r, err := c.Fetch(context.Background(), "k", load)
			if err != nil {
				t.Errorf("Fetch: %v", err)
			}
			res <- r.Value
		}()
		<-started
		// Another instance takes the key over (a newer token) and stores
		// a newer value while this load runs; then the tier stops
		// answering this instance's reads.
		newer := coord.lease("k")
		if done, err := newer.Complete(context.Background(), entryOf(t, &product{ID: "k", Price: 2}, time.Now())); err != nil || !done.Written {
			t.Fatalf("the newer lease's write: %+v, %v", done, err)
		}
		shared.readErr = errors.New("injected: shared read timed out")
		close(gate)
		got := <-res
		want := 2
		if !readBack {
			want = 1
		}
		if got == nil || got.Price != want {
			t.Fatalf("read back %v: the refused leader's callers got %+v, want price %d", readBack, got, want)
		}
		shared.readErr = nil // the Fetch is over: nothing reads concurrently
		if sharedPrice(t, shared, "k") != 2 {
			t.Fatalf("read back %v: the refused write landed", readBack)
		}
	}
}

// An Outcome never claims a write that did not happen. A leader whose
// fenced write was refused, and who could not serve the newer writer's
// value, stored nothing: OutcomeLoadedUncached. A degraded flight (the
// Coordinator failed) holds no lease and writes the local tier only:
// OutcomeLoadedWriteFailed, its WriteErr matching
// ErrCoordinatorUnavailable.
func TestOutcomeNeverClaimsAWriteThatDidNotHappen(t *testing.T) {
	t.Run("refused fenced write", func(t *testing.T) {
		shared := newMapShared(time.Now)
		coord := newFencingCoord(shared)
		coord.noReadBack = true
		local := newLocal[*product](t, nil)
		c := newCache(t, flightcache.Options[*product]{Local: local, Shared: shared, Coordinator: coord})
		started, gate := make(chan struct{}), make(chan struct{})
		res := make(chan flightcache.Result[*product], 1)
		go func() {
			r, err := c.Fetch(context.Background(), "k", func(context.Context) (*product, error) {
				close(started)
				<-gate
				return &product{ID: "k", Price: 1}, nil
			})
			if err != nil {
				t.Errorf("Fetch: %v", err)
			}
			res <- r
		}()
		<-started
		newer := coord.lease("k")
		if done, err := newer.Complete(context.Background(), entryOf(t, &product{ID: "k", Price: 2}, time.Now())); err != nil || !done.Written {
			t.Fatalf("the newer lease's write: %+v, %v", done, err)
		}
		shared.readErr = errors.New("injected: shared read timed out")
		close(gate)
		r := <-res
		shared.readErr = nil
		if r.Value == nil || r.Value.Price != 1 || r.Outcome != flightcache.OutcomeLoadedUncached {
			t.Fatalf("refused leader: %+v (%v); want its own value 1, OutcomeLoadedUncached", r.Value, r.Outcome)
		}
		if _, held := local.Get("k"); held || sharedPrice(t, shared, "k") != 2 {
			t.Fatal("the refused load was stored after all")
		}
	})
	t.Run("degraded flight", func(t *testing.T) {
		shared := newMapShared(time.Now)
		local := newLocal[*product](t, nil)
		c := newCache(t, flightcache.Options[*product]{Local: local, Shared: shared, Coordinator: &downCoordinator{}})
		r, err := c.Fetch(context.Background(), "k", func(context.Context) (*product, error) {
			return &product{ID: "k", Price: 1}, nil
		})
		if err != nil || r.Value == nil || r.Value.Price != 1 {
			t.Fatalf("degraded Fetch = %+v, %v", r, err)
		}
		if r.Outcome != flightcache.OutcomeLoadedWriteFailed || !errors.Is(r.WriteErr, flightcache.ErrCoordinatorUnavailable) {
			t.Fatalf("degraded Fetch: %v, WriteErr %v; want OutcomeLoadedWriteFailed with ErrCoordinatorUnavailable", r.Outcome, r.WriteErr)
		}
		_, held := local.Get("k")
		if _, ok := shared.peek("k"); ok || !held {
			t.Fatal("a degraded flight must write the local tier only")
		}
	})
}
