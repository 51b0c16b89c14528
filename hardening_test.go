package flightcache_test

// Edge cases a hostile user or an unlucky operator finds: panics in user
// code under the write guard, keys in diagnostics, key limits, panicking
// observers, callers that already left, loads that outlive Close.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/singleflight"
)

// logBuffer collects a Logger's output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) count(substr string) int { return strings.Count(b.String(), substr) }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// within fails the test if f does not return within a generous bound: the
// defects it guards against hang for good.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked after 5s", what)
	}
}

// mustPanic runs f and returns what it panicked with.
func mustPanic(t *testing.T, f func()) (p any) {
	t.Helper()
	defer func() { p = recover() }()
	f()
	t.Fatal("no panic")
	return nil
}

// panickingLocal is a local tier whose Set panics on one value, as a buggy
// store would (memstore: a buggy Cost function); the panic carries the
// key, which the Cache must not repeat.
type panickingLocal struct{ *testlocal.Store[*product] }

func (s panickingLocal) Set(key string, it driver.Item[*product]) {
	if it.Value != nil && it.Value.Name == "boom" {
		panic("set of " + key)
	}
	s.Store.Set(key, it)
}

func panickingSetStore(t *testing.T) panickingLocal {
	return panickingLocal{newLocal[*product](t, nil)}
}

// A panic inside the write guard (here the local store's Set) reaches
// that caller, and the key keeps working: later Sets and Gets neither block
// nor time out.
func TestSetAfterPanickingLocalSetKeepsKeyUsable(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{Local: panickingSetStore(t)})
	mustPanic(t, func() { _ = c.Set(context.Background(), "p:1", &product{Name: "boom"}) })
	within(t, "Set after the panic", func() {
		if err := c.Set(context.Background(), "p:1", &product{Name: "ok"}); err != nil {
			t.Errorf("Set: %v", err)
		}
	})
	within(t, "Get after the panic", func() {
		r, err := c.Fetch(context.Background(), "p:1", (&origin{}).load("1"))
		if err != nil || r.Outcome != flightcache.OutcomeHitLocal || r.Value.Name != "ok" {
			t.Errorf("Fetch = %+v, %v; want the value Set after the panic", r, err)
		}
	})
}

// panickingShared panics in Set, as a buggy store would.
type panickingShared struct{ *mapShared }

func (panickingShared) Set(context.Context, string, driver.Entry) error { panic("store bug") }

// A write-back that panics (the local store's Set, a shared store's Set)
// fails the write, not the load: the value is returned as
// loaded_write_failed, and the key stays usable.
func TestPanickingWriteBackReturnsTheValueAndKeepsKeyUsable(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func() flightcache.Options[*product]
	}{
		{"local Set", func() flightcache.Options[*product] {
			return flightcache.Options[*product]{Local: panickingSetStore(t)}
		}},
		{"shared Set", func() flightcache.Options[*product] {
			return flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: panickingShared{newMapShared(time.Now)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, tc.opts())
			boom := func(ctx context.Context) (*product, error) { return &product{Name: "boom"}, nil }
			r, err := c.Fetch(context.Background(), "p:1", boom)
			if err != nil || r.Value == nil || r.Value.Name != "boom" {
				t.Fatalf("Fetch = %+v, %v; the load succeeded", r, err)
			}
			wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
			if r.WriteErr == nil || strings.Contains(r.WriteErr.Error(), "p:1") {
				t.Fatalf("WriteErr = %v, want the panic, without the key", r.WriteErr)
			}
			within(t, "Delete and Get after the panic", func() {
				if err := c.Delete(context.Background(), "p:1"); err != nil {
					t.Errorf("Delete: %v", err)
				}
				if _, err := c.Get(context.Background(), "p:1", (&origin{}).load("1")); err != nil {
					t.Errorf("Get: %v", err)
				}
			})
		})
	}
}

// tierRecorder records the Tier of every EventWriteFailed.
type tierRecorder struct {
	mu    sync.Mutex
	tiers []driver.Tier
}

func (r *tierRecorder) ObserveCache(e driver.Event) {
	if e.Kind == driver.EventWriteFailed {
		r.mu.Lock()
		r.tiers = append(r.tiers, e.Tier)
		r.mu.Unlock()
	}
}

// A panic in the write-back is reported for the tier that panicked: the
// local tier's for its Set, the shared tier's for its Set, by
// Fetch and FetchMany alike.
func TestWriteBackPanicIsReportedForTheTierThatPanicked(t *testing.T) {
	batchLoad := func(_ context.Context, keys []string) (map[string]*product, error) {
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k, Name: "boom"}
		}
		return m, nil
	}
	boom := func(context.Context) (*product, error) { return &product{Name: "boom"}, nil }
	for _, tc := range []struct {
		name  string
		local driver.LocalStore[*product]
		share driver.SharedStore
		want  driver.Tier
	}{
		{"local Set", panickingSetStore(t), nil, driver.TierLocal},
		{"shared Set", newLocal[*product](t, nil), panickingShared{newMapShared(time.Now)}, driver.TierShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &tierRecorder{}
			c := newCache(t, flightcache.Options[*product]{Local: tc.local, Shared: tc.share, Observer: rec})
			if r, err := c.Fetch(context.Background(), "p:1", boom); err != nil || r.WriteErr == nil {
				t.Fatalf("Fetch = %+v, %v; want the value and the panic as WriteErr", r, err)
			}
			if kr := c.FetchMany(context.Background(), []string{"p:2"}, batchLoad)[0]; kr.Err != nil || kr.WriteErr == nil {
				t.Fatalf("FetchMany = %+v; want the value and the panic as WriteErr", kr)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.tiers) != 2 || rec.tiers[0] != tc.want || rec.tiers[1] != tc.want {
				t.Fatalf("EventWriteFailed tiers = %v, want [%v %v]", rec.tiers, tc.want, tc.want)
			}
		})
	}
}

// Nothing the Cache formats (errors, events, logs) contains the key, on
// every failure path that can carry one: keys can hold tenant ids and
// personal data.
func TestCacheDiagnosticsNeverContainTheKey(t *testing.T) {
	const secret = "tenant-4711-alice@example.com"
	logs := &logBuffer{}
	rec := newRecorder()
	shared := &hungShared{mapShared: newMapShared(time.Now), hangWrites: true}
	shared.mapShared.m[secret+":corrupt"] = driver.Entry{Value: []byte("{not json"), Meta: driver.Meta{
		FreshUntil: time.Now().Add(time.Hour), StaleUntil: time.Now().Add(time.Hour),
	}}
	c := newCache(t, flightcache.Options[*product]{
		Local: panickingSetStore(t), Shared: shared, Observer: rec, Logger: logs.logger(),
		SharedTimeout: 10 * time.Millisecond, FailureThrottle: time.Second, MaxKeyLen: 64,
	})
	ctx := context.Background()
	var errs []error
	keep := func(_ any, err error) { errs = append(errs, err) }
	keep(c.Get(ctx, secret+":corrupt", (&origin{}).load("1")))            // undecodable entry, slow write-back
	keep(c.Get(ctx, secret+":fail", (&origin{err: errOrigin}).load("1"))) // failed load
	keep(c.Get(ctx, secret+":fail", (&origin{}).load("1")))               // throttled
	keep(c.Get(ctx, strings.Repeat(secret, 3), (&origin{}).load("1")))    // too long
	keep(c.Get(ctx, secret+":boom", func(context.Context) (*product, error) {
		return &product{Name: "boom"}, nil // the write-back panics with the key
	}))
	errs = append(errs, c.Set(ctx, secret+":set", &product{})) // slow shared write
	rec.mu.Lock()
	errs = append(errs, rec.errs...)
	rec.mu.Unlock()
	for _, err := range errs {
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error contains the key: %v", err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("logs contain the key:\n%s", logs.String())
	}
}

// limitedShared is a SharedStore that accepts keys up to limit bytes, like
// redisstore with its prefix.
type limitedShared struct {
	*mapShared
	limit int
}

func (s limitedShared) MaxKeyLen() int { return s.limit }

// Every key the Cache admits fits every tier: MaxKeyLen defaults to the
// smallest tier limit, and one above a tier's limit is refused at New.
func TestMaxKeyLenFitsEveryTier(t *testing.T) {
	shared := limitedShared{newMapShared(time.Now), 100}
	c := newCache(t, flightcache.Options[*product]{Shared: shared})
	var o origin
	if _, err := c.Get(context.Background(), strings.Repeat("k", 100), o.load("1")); err != nil {
		t.Fatalf("a key at the tier's limit: %v", err)
	}
	if _, err := c.Get(context.Background(), strings.Repeat("k", 101), o.load("1")); !errors.Is(err, flightcache.ErrInvalidKey) {
		t.Fatalf("a key over the tier's limit: %v, want ErrInvalidKey", err)
	}

	_, err := flightcache.New(flightcache.Options[*product]{Shared: shared, MaxKeyLen: 200})
	var ce *flightcache.ConfigError
	if !errors.As(err, &ce) || ce.Field != "MaxKeyLen" {
		t.Fatalf("New with MaxKeyLen above the tier's limit = %v, want a *ConfigError for MaxKeyLen", err)
	}
	if _, err := flightcache.New(flightcache.Options[*product]{Shared: shared, MaxKeyLen: 50}); err != nil {
		t.Fatalf("New with MaxKeyLen below the tier's limit: %v", err)
	}
}

// panickingObserver panics on every event of both layers.
type panickingObserver struct{}

func (panickingObserver) ObserveCache(driver.Event)        { panic("observer bug") }
func (panickingObserver) ObserveFlight(singleflight.Event) { panic("observer bug") }

// A panicking Observer does not kill the process when the event comes from
// a flight or a refresh goroutine, nor fail the Get: the panic is logged,
// rate-limited.
func TestPanickingObserverIsLoggedNotFatal(t *testing.T) {
	logs := &logBuffer{}
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	shared.writeErr = errors.New("write refused") // an event from inside the flight
	start := time.Now()                           // the log limiter runs on real time
	c := clocked(t, clock, flightcache.Options[*product]{
		Shared: shared, Observer: panickingObserver{}, Logger: logs.logger(),
		EarlyRefresh: true, TTL: time.Minute, Jitter: flightcache.DisableJitter,
	})
	slow := func(ctx context.Context) (*product, error) {
		clock.Advance(time.Second) // a load time (XFetch's Δ) on the Cache's clock
		return &product{ID: "1"}, nil
	}
	r, err := c.Fetch(context.Background(), "p:1", slow)
	if err != nil || r.Value == nil {
		t.Fatalf("Fetch = %+v, %v; the Observer's panic must not fail the Get", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	// At expiry, a hit refreshes in the background, reporting from there.
	clock.Advance(time.Minute - time.Nanosecond)
	wantOutcome(t, mustFetch(t, c, "p:1", slow).Outcome, flightcache.OutcomeRefreshed)
	if err := c.Close(); err != nil { // waits for the refresh
		t.Fatal(err)
	}
	// Several panics, one line a second at most: one line, unless a slow
	// machine took more than a second (then one more per second begun).
	limit := int((time.Since(start)+time.Second-1)/time.Second) + 1
	if n := logs.count("Observer panicked"); n < 1 || n > limit {
		t.Fatalf("%d log lines for the Observer's panics, want between 1 and %d (rate-limited):\n%s", n, limit, logs.String())
	}
}

// A panicking Observer does not escape FetchMany either: every key is
// answered, the panics are logged.
func TestPanickingObserverDoesNotEscapeFetchMany(t *testing.T) {
	logs := &logBuffer{}
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, nil), Observer: panickingObserver{}, Logger: logs.logger(),
	})
	load := func(_ context.Context, keys []string) (map[string]*product, error) {
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k}
		}
		return m, nil
	}
	for range 2 { // loaded, then hits
		res := c.FetchMany(context.Background(), []string{"p:1", "p:2"}, load)
		for i, kr := range res {
			if kr.Err != nil || kr.Value == nil {
				t.Fatalf("key %d = %+v; the Observer's panic must not fail the batch", i, kr)
			}
		}
	}
	if logs.count("Observer panicked") < 1 {
		t.Fatalf("the Observer's panics were not logged:\n%s", logs.String())
	}
}

// A caller whose context has already ended gets ctx.Err() at once, and
// nothing starts: no load, no write.
func TestCallerWithEndedContextStartsNothing(t *testing.T) {
	rec := newRecorder()
	local := newLocal[*product](t, nil)
	c := newCache(t, flightcache.Options[*product]{Local: local, Observer: rec})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o origin
	if _, err := c.Get(ctx, "p:1", o.load("1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", err)
	}
	if err := c.Set(ctx, "p:2", &product{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set = %v, want context.Canceled", err)
	}
	if err := c.Set(context.Background(), "p:3", &product{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "p:3"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete = %v, want context.Canceled", err)
	}
	if n := rec.engineCount("loader_started"); n != 0 {
		t.Fatalf("%d loads started for a caller that had left", n)
	}
	if _, ok := local.Get("p:2"); ok {
		t.Fatal("Set wrote for a caller that had left")
	}
	if _, ok := local.Get("p:3"); !ok {
		t.Fatal("Delete removed for a caller that had left")
	}
}

// lateSignal reports when a flight's result arrived after its callers were
// released (here by Close): the flight, write-back included, is over.
type lateSignal struct{ late chan struct{} }

func (lateSignal) ObserveCache(driver.Event) {}

func (s lateSignal) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventLateResult {
		close(s.late)
	}
}

// A load that finishes after Close writes nothing into the stores, and its
// callers got ErrClosed (which is also singleflight.ErrClosed).
func TestLoadFinishingAfterCloseWritesNothing(t *testing.T) {
	local := newLocal[*product](t, nil)
	shared := newMapShared(time.Now)
	sig := lateSignal{late: make(chan struct{})}
	c, err := flightcache.New(flightcache.Options[*product]{Local: local, Shared: shared, Observer: sig, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "p:1", func(context.Context) (*product, error) {
			close(started)
			<-release // ignores its context, as a stubborn loader does
			return &product{ID: "1"}, nil
		})
		done <- err
	}()
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, flightcache.ErrClosed) || !errors.Is(err, singleflight.ErrClosed) {
		t.Fatalf("Get = %v, want ErrClosed", err)
	}
	close(release)
	<-sig.late
	if _, ok := local.Get("p:1"); ok {
		t.Fatal("a load that finished after Close wrote the local tier")
	}
	if shared.sets.Load() != 0 {
		t.Fatal("a load that finished after Close wrote the shared tier")
	}
	if _, err := c.Get(context.Background(), "p:1", (&origin{}).load("1")); !errors.Is(err, flightcache.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}
