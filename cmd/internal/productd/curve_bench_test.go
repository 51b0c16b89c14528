package productd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// The productd curve of make perf-report (bench/perfreport): warm-hit
// requests per second and p99 latency against keep-alive connections, for
// productd as it runs (New and Serve, memory tier, SQLite origin, every
// key warm) and for its ceiling, a bare net/http handler (httptest) that
// writes the same headers and body bytes from a map. Both are driven by
// the same load generator in the same process, over loopback.

// curveRequestsPerOp is the requests one iteration sends.
const curveRequestsPerOp = 2_000

// curveKeys is the warmed key set the requests go round.
const curveKeys = 100

// capturedResponse is a warm answer of productd, as the bare handler
// replays it.
type capturedResponse struct {
	header http.Header
	body   []byte
}

// BenchmarkCurveProductd: 1, 8 and 50 connections, impl=productd and
// impl=bare; req/s and p99-ms.
func BenchmarkCurveProductd(b *testing.B) {
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = b.TempDir() + "/products.db"
	cfg.Catalog = &testCatalog
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	base := serveInProcess(b, s)

	paths := make([]string, curveKeys)
	for i := range paths {
		paths[i] = "/v1/tenants/" + testCatalog.Tenants[i%len(testCatalog.Tenants)] + "/products/" + product.ProductID(1+i)
	}
	// Warm every key, then keep a warm answer of each: the bare handler's
	// replies and what every measured answer must equal.
	warm := map[string]capturedResponse{}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for range 2 {
		for _, p := range paths {
			resp, err := client.Get(base + p)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: %d %v: %s", p, resp.StatusCode, err, body)
			}
			h := resp.Header.Clone()
			h.Del("Date")
			h.Del("Content-Length")
			warm[p] = capturedResponse{h, body}
		}
	}
	if cs := warm[paths[0]].header.Get("Cache-Status"); !strings.Contains(cs, "; hit") {
		b.Fatalf("a warm GET answered Cache-Status %q, want a hit", cs)
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := warm[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		for k, v := range c.header {
			h[k] = v
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(c.body)
	}))
	defer bare.Close()

	for _, conns := range []int{1, 8, 50} {
		for _, impl := range []struct{ name, base string }{{"productd", base}, {"bare", bare.URL}} {
			b.Run("connections="+strconv.Itoa(conns)+"/impl="+impl.name, func(b *testing.B) {
				origin := s.OriginQueries()
				var lat []time.Duration
				client := &http.Client{Transport: &http.Transport{
					MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
				}}
				defer client.CloseIdleConnections()
				// Every connection dialled before the clock starts.
				if _, err := hammer(client, impl.base, paths, warm, conns, 2*conns); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					l, err := hammer(client, impl.base, paths, warm, conns, curveRequestsPerOp)
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, l...)
				}
				if q := s.OriginQueries(); q != origin {
					b.Fatalf("%d origin queries during the run: not every request was a warm hit", q-origin)
				}
				slices.Sort(lat)
				b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "req/s")
				b.ReportMetric(float64(lat[int(0.99*float64(len(lat)-1))])/1e6, "p99-ms")
			})
		}
	}
}

// hammer sends total GETs over conns goroutines sharing client (whose
// transport keeps at most conns connections), going round paths, and
// returns each one's latency. Every answer must be 200 with the body
// warm holds for its path.
func hammer(client *http.Client, base string, paths []string, warm map[string]capturedResponse, conns, total int) ([]time.Duration, error) {
	var next atomic.Int64
	lats := make([][]time.Duration, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for g := range conns {
		wg.Go(func() {
			var buf bytes.Buffer
			for {
				n := int(next.Add(1)) - 1
				if n >= total {
					return
				}
				p := paths[n%len(paths)]
				start := time.Now()
				resp, err := client.Get(base + p)
				if err != nil {
					errs[g] = err
					return
				}
				buf.Reset()
				_, err = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				lats[g] = append(lats[g], time.Since(start))
				if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Equal(buf.Bytes(), warm[p].body)) {
					err = fmt.Errorf("GET %s: %d %q, want 200 %q", p, resp.StatusCode, buf.Bytes(), warm[p].body)
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
