package httpflight_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/httpflight"
	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/flightcache/flightcache/internal/testlocal"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// fakeClock is a clock the test moves by hand, shared by the Layer and its
// Cache.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// joins counts the requests that joined a load in flight (the engine's
// EventShared), so that a test knows when its herd is waiting.
type joins struct{ n atomic.Int64 }

func (j *joins) ObserveCache(driver.Event) {}
func (j *joins) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventShared {
		j.n.Add(1)
	}
}

// harness is a Layer on a map-backed Cache in front of upstream.
type harness struct {
	t      *testing.T
	clk    *fakeClock
	joined *joins
	cache  *flightcache.Cache[*httpflight.Response]
	layer  *httpflight.Layer
	h      http.Handler
}

func newHarness(t *testing.T, upstream http.Handler, opts httpflight.Options, copts ...func(*flightcache.Options[*httpflight.Response])) *harness {
	t.Helper()
	clk := newClock()
	j := &joins{}
	co := flightcache.Options[*httpflight.Response]{
		Local:    testlocal.New[*httpflight.Response](clk.Now),
		Now:      clk.Now,
		Observer: j,
	}
	for _, f := range copts {
		f(&co)
	}
	cache, err := flightcache.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	opts.Cache = cache
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	layer, err := httpflight.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = layer.Close() })
	return &harness{t: t, clk: clk, joined: j, cache: cache, layer: layer, h: layer.Wrap(upstream)}
}

// do serves one request; header holds name, value pairs.
func (h *harness) do(method, target string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, req)
	return w
}

func (h *harness) get(target string, header ...string) *httptest.ResponseRecorder {
	return h.do(http.MethodGet, target, header...)
}

// waitFor polls cond (observable state, no fixed sleep) for up to 20
// seconds, failing the test if it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// herd sends n requests, made by req(i): request 0 first, which leads
// (herd waits until up has its call), then the n-1 others, which join it.
// up's first call must block on gate until the others have joined, which
// herd waits for (the joins count) before it opens the gate. It returns
// the responses, in the order of i.
func (h *harness) herd(n int, gate chan struct{}, up *counting, req func(i int) *http.Request) []*httptest.ResponseRecorder {
	h.t.Helper()
	out := make([]*httptest.ResponseRecorder, n)
	before, calls := h.joined.n.Load(), up.calls.Load()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, req(i))
			out[i] = w
		}()
		if i == 0 {
			waitFor(h.t, "the first request to reach the upstream", func() bool { return up.calls.Load() > calls })
		}
	}
	waitFor(h.t, "the herd to join the first load", func() bool { return h.joined.n.Load()-before >= int64(n-1) })
	close(gate)
	wg.Wait()
	return out
}

// counting is an upstream that counts its calls and answers with respond.
type counting struct {
	calls   atomic.Int64
	respond func(n int64, w http.ResponseWriter, r *http.Request)
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.respond(c.calls.Add(1), w, r)
}

// barrier lets n callers through together, or fails them all after 20
// seconds: upstream calls made one after another never meet at it.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, all: make(chan struct{})} }

func (b *barrier) wait() bool {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return true
	case <-time.After(20 * time.Second):
		return false
	}
}
