package httpflight_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// The httpflight curves of make perf-report (bench/perfreport).

// curveRequestsPerOp is the requests one iteration of BenchmarkCurveHit
// sends.
const curveRequestsPerOp = 2_000

// BenchmarkCurveHit: a fresh hit's requests per second and latency over
// net/http on loopback against keep-alive connections (1, 8, 50), for
// app behind the Layer (impl=httpflight) and for its ceiling, a bare
// net/http handler writing the bytes of the Layer's hit, its headers
// (Age and Cache-Status included) and body (impl=bare). Both are driven by
// the same load generator in the same process.
func BenchmarkCurveHit(b *testing.B) {
	var calls atomic.Int64
	hit := httptest.NewServer(newBenchLayer(b).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		app(w, r)
	})))
	defer hit.Close()
	const path = "/products/42?currency=EUR"
	// The second answer is a hit: its header is what the bare handler
	// writes.
	var header http.Header
	for range 2 {
		resp, err := http.Get(hit.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		header = resp.Header.Clone()
	}
	if cs := header.Get("Cache-Status"); !strings.Contains(cs, "hit") {
		b.Fatalf("the second GET answered Cache-Status %q, want a hit", cs)
	}
	header.Del("Date")
	header.Del("Content-Length")
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range header {
			h[k] = v
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}))
	defer bare.Close()

	for _, conns := range []int{1, 8, 50} {
		for _, impl := range []struct{ name, url string }{{"httpflight", hit.URL + path}, {"bare", bare.URL + path}} {
			b.Run("connections="+strconv.Itoa(conns)+"/impl="+impl.name, func(b *testing.B) {
				client := &http.Client{Transport: &http.Transport{
					MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
				}}
				defer client.CloseIdleConnections()
				// Every connection dialled before the clock starts.
				if _, err := getConcurrently(client, impl.url, conns, 2*conns); err != nil {
					b.Fatal(err)
				}
				var lat []time.Duration
				for b.Loop() {
					l, err := getConcurrently(client, impl.url, conns, curveRequestsPerOp)
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, l...)
				}
				if n := calls.Load(); n != 1 {
					b.Fatalf("%d upstream requests, want 1: not every request was a hit", n)
				}
				b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "req/s")
				testenv.ReportLatencies(b, lat)
			})
		}
	}
}

// getConcurrently sends total GETs of url over conns goroutines sharing
// client and returns each one's latency. Every answer must be 200 with
// body.
func getConcurrently(client *http.Client, url string, conns, total int) ([]time.Duration, error) {
	var next atomic.Int64
	lats := make([][]time.Duration, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for g := range conns {
		wg.Go(func() {
			var buf bytes.Buffer
			for next.Add(1) <= int64(total) {
				start := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					errs[g] = err
					return
				}
				buf.Reset()
				_, err = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				lats[g] = append(lats[g], time.Since(start))
				if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Equal(buf.Bytes(), body)) {
					err = fmt.Errorf("GET %s: %d %q, want 200 %q", url, resp.StatusCode, buf.Bytes(), body)
				}
				if err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return slices.Concat(lats...), nil
}

// BenchmarkCurveHerd: upstream requests per herd and the herd's latency
// against herd size (10 to 10,000 concurrent requests for a cold URL, in
// process, the upstream taking 5ms).
func BenchmarkCurveHerd(b *testing.B) {
	for _, n := range testenv.CurvePoints(1_000, 10, 100, 1_000, 10_000) {
		b.Run("herd="+strconv.Itoa(n)+"/impl=httpflight", func(b *testing.B) { benchHerd(b, n) })
	}
}
