package redisstore_test

// Helpers of the tests of a Cache on redisstore (cache_redis_test.go,
// cache_batch_redis_test.go): the few the core's own tests define for
// themselves, which another module cannot import.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testlocal"
)

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

// batchOrigin is a BatchLoadFunc that records the keys of every call. Keys
// in missing do not exist.
type batchOrigin struct {
	mu      sync.Mutex
	calls   [][]string
	missing map[string]bool
}

func (o *batchOrigin) load(ctx context.Context, keys []string) (map[string]*product, error) {
	o.mu.Lock()
	o.calls = append(o.calls, slices.Clone(keys))
	o.mu.Unlock()
	m := make(map[string]*product, len(keys))
	for _, k := range keys {
		if !o.missing[k] {
			m[k] = &product{ID: k, Name: "p-" + k}
		}
	}
	return m, nil
}

func (o *batchOrigin) callKeys() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

func keyRange(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return keys
}

func outcomes(rs []flightcache.KeyResult[*product]) []flightcache.Outcome {
	out := make([]flightcache.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// newLocal returns a map-backed local tier on clock (real time when nil).
func newLocal[V any](t testing.TB, clock *fakeClock) *testlocal.Store[V] {
	t.Helper()
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	return testlocal.New[V](now)
}

// newCache builds a Cache with opts and closes it when the test ends. A
// nil Local and Shared get a testlocal.Store; a nil Logger a silent one; a
// nil SharedTimeout room for a busy machine (the default 250 ms is a
// production figure, and a shared call that outlasts it skips the
// write-back the test looks for).
func newCache[V any](t testing.TB, opts flightcache.Options[V]) *flightcache.Cache[V] {
	t.Helper()
	if opts.Local == nil && opts.Shared == nil {
		opts.Local = newLocal[V](t, nil)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	if opts.SharedTimeout == 0 && opts.Shared != nil {
		opts.SharedTimeout = 2 * time.Second
	}
	c, err := flightcache.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

// recorder is a driver.Observer that counts events by kind and keeps their
// errors.
type recorder struct {
	mu    sync.Mutex
	cache map[driver.EventKind]int
	errs  []error
}

func newRecorder() *recorder { return &recorder{cache: map[driver.EventKind]int{}} }

func (r *recorder) ObserveCache(e driver.Event) {
	r.mu.Lock()
	r.cache[e.Kind]++
	if e.Err != nil {
		r.errs = append(r.errs, e.Err)
	}
	r.mu.Unlock()
}

func (r *recorder) count(k driver.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache[k]
}
