package httpflight_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/httpflight"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// discard is a ResponseWriter that keeps nothing, so that the benchmarks
// measure the handlers, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

var body = []byte(`{"id":42,"name":"a product","price":"9.99"}`)

func app(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func newBenchLayer(b *testing.B) *httpflight.Layer {
	cache, err := flightcache.New(flightcache.Options[*httpflight.Response]{Local: testlocal.New[*httpflight.Response](nil)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cache.Close() })
	l, err := httpflight.New(httpflight.Options{Cache: cache})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

func serveParallel(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/products/42?currency=EUR", nil)
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	})
}

// BenchmarkHandlerBare is the bare handler: the baseline of
// BenchmarkHandlerHit.
func BenchmarkHandlerBare(b *testing.B) { serveParallel(b, http.HandlerFunc(app)) }

// BenchmarkHandlerHit is the same handler behind the Layer, every request
// a fresh hit (the stored response with Age and Cache-Status).
func BenchmarkHandlerHit(b *testing.B) {
	h := newBenchLayer(b).Wrap(http.HandlerFunc(app))
	h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest(http.MethodGet, "/products/42?currency=EUR", nil))
	b.ResetTimer()
	serveParallel(b, h)
}

// BenchmarkHerd10000 sends 10,000 concurrent requests for a cold URL per
// iteration to an upstream that takes 5ms: it reports the upstream
// requests per herd (1 is the goal) and the herd's p50 and p99 latency.
func BenchmarkHerd10000(b *testing.B) { benchHerd(b, 10_000) }

// benchHerd sends herd concurrent requests for a cold URL per iteration,
// in process, to an upstream behind the Layer that takes 5ms; it reports
// upstream-req/herd, p50-ms and p99-ms.
func benchHerd(b *testing.B, herd int) {
	var calls atomic.Int64
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(5 * time.Millisecond) // the origin's work
		app(w, r)
	})
	h := newBenchLayer(b).Wrap(upstream)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		target := fmt.Sprintf("/cold/%d", i)
		durations := make([]time.Duration, herd)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range herd {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodGet, target, nil)
				w := &discard{h: http.Header{}}
				<-start
				t0 := time.Now()
				h.ServeHTTP(w, req)
				durations[j] = time.Since(t0)
			})
		}
		close(start)
		wg.Wait()
		lat = append(lat, durations...)
	}
	b.ReportMetric(float64(calls.Load())/float64(b.N), "upstream-req/herd")
	testenv.ReportLatencies(b, lat)
}

// serveOverHTTP runs h behind a real net/http server on loopback and sends
// it requests from parallel keep-alive clients: requests per second as a
// service sees them, the server's own work included.
func serveOverHTTP(b *testing.B, h http.Handler) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := srv.URL + "/products/42?currency=EUR"
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkServerBare: the bare handler over net/http, the baseline of
// BenchmarkServerHit.
func BenchmarkServerBare(b *testing.B) { serveOverHTTP(b, http.HandlerFunc(app)) }

// BenchmarkServerHit: the handler behind the Layer over net/http, every
// request a fresh hit.
func BenchmarkServerHit(b *testing.B) { serveOverHTTP(b, newBenchLayer(b).Wrap(http.HandlerFunc(app))) }
