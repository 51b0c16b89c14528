package flightcache_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// fakeClock is Options.Now for tests that move time by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

type product struct {
	ID    string
	Name  string
	Price int
}

// origin is a loader that counts its calls and returns a product whose
// Price is the call number, so a test can tell which load a value came from.
type origin struct {
	calls atomic.Int64
	err   error // returned instead of a value when set
}

func (o *origin) load(id string) flightcache.LoadFunc[*product] {
	return func(ctx context.Context) (*product, error) {
		n := o.calls.Add(1)
		if o.err != nil {
			return nil, o.err
		}
		return &product{ID: id, Name: "p-" + id, Price: int(n)}, nil
	}
}

// busyMachineSharedTimeout is newCache's SharedTimeout when a test sets
// none.
const busyMachineSharedTimeout = 2 * time.Second

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// newLocal returns a local tier on clock (real time when clock is nil): a
// map-backed testlocal.Store, which keeps items until their StaleUntil as
// memstore does (memstore is a module of its own; the Cache on memstore is
// tested in memstore's module).
func newLocal[V any](t testing.TB, clock *fakeClock) *testlocal.Store[V] {
	t.Helper()
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	return testlocal.New[V](now)
}

// newCache builds a Cache with opts and closes it when the test ends. A
// nil Local and Shared get a testlocal.Store; a nil Logger a silent one.
func newCache[V any](t testing.TB, opts flightcache.Options[V]) *flightcache.Cache[V] {
	t.Helper()
	if opts.Local == nil && opts.Shared == nil {
		var clock *fakeClock
		opts.Local = newLocal[V](t, clock)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	if opts.SharedTimeout == 0 && opts.Shared != nil {
		// Room for a busy machine (another test suite beside this one):
		// the default 250 ms is a production figure, and a shared call
		// that outlasts it skips the write-back the test looks for. Tests
		// of timeouts set their own.
		opts.SharedTimeout = busyMachineSharedTimeout
	}
	c, err := flightcache.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mapShared is an in-memory SharedStore with fault hooks, for tests of the
// shared-tier logic that do not need Redis (Redis itself is exercised in
// redis_test.go). Like Redis, it expires entries on the wall clock: the
// Cache writes wall-clock times whatever its own clock.
type mapShared struct {
	mu sync.Mutex
	m  map[string]driver.Entry

	gets, sets atomic.Int64
	readErr    error              // returned by Get when set
	writeErr   error              // returned by Set when set
	afterGet   func(n int64)      // called after each Get with its number
	onSet      func(driver.Entry) // called after each successful Set
}

// newMapShared returns an empty mapShared. The Cache's clock is not its
// business (see mapShared); the argument documents which clock the test's
// Cache runs on.
func newMapShared(cacheClock func() time.Time) *mapShared {
	return &mapShared{m: make(map[string]driver.Entry)}
}

// peek returns key's entry as the map holds it, without counting a Get
// or failing with readErr: what another client of the same store sees.
func (s *mapShared) peek(key string) (driver.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	return e, ok
}

func (s *mapShared) Get(ctx context.Context, key string) (driver.Entry, bool, error) {
	n := s.gets.Add(1)
	if s.afterGet != nil {
		defer s.afterGet(n)
	}
	if s.readErr != nil {
		return driver.Entry{}, false, s.readErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if ok && !time.Now().Before(e.StaleUntil) {
		return driver.Entry{}, false, nil
	}
	return e, ok, nil
}

func (s *mapShared) Set(ctx context.Context, key string, e driver.Entry) error {
	s.sets.Add(1)
	if s.writeErr != nil {
		return s.writeErr
	}
	s.mu.Lock()
	s.m[key] = e
	s.mu.Unlock()
	if s.onSet != nil {
		s.onSet(e)
	}
	return nil
}

func (s *mapShared) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return nil
}

// notifyLocal wraps a LocalStore and reports every Set on a channel, so a
// test can wait for a background write-back instead of sleeping.
type notifyLocal[V any] struct {
	driver.LocalStore[V]
	sets chan driver.Item[V]
}

func (n *notifyLocal[V]) Set(key string, it driver.Item[V]) {
	n.LocalStore.Set(key, it)
	n.sets <- it
}

// recorder is an Observer of both layers that counts events by kind.
type recorder struct {
	mu     sync.Mutex
	cache  map[driver.EventKind]int
	engine map[string]int
	errs   []error
}

func newRecorder() *recorder {
	return &recorder{cache: map[driver.EventKind]int{}, engine: map[string]int{}}
}

func (r *recorder) ObserveCache(e driver.Event) {
	r.mu.Lock()
	r.cache[e.Kind]++
	if e.Err != nil {
		r.errs = append(r.errs, e.Err)
	}
	r.mu.Unlock()
}

func (r *recorder) ObserveFlight(e singleflight.Event) {
	r.mu.Lock()
	r.engine[e.Kind.String()]++
	r.mu.Unlock()
}

func (r *recorder) engineCount(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine[kind]
}

func (r *recorder) count(k driver.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache[k]
}

var errOrigin = errors.New("origin unavailable")
