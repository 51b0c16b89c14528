package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
	"github.com/viccon/sturdyc"
)

// BenchmarkHerdHTTP is BenchmarkStampede as a server sees it: 10,000
// requests at once for one cold product, each served by the same HTTP
// handler (the key from the path, cache Get with a 50 ms loader, the
// product written as JSON), flightcache's Cache against sturdyc.
//
// The requests run on 10,000 long-lived worker goroutines, started before
// the first round, which call the handler directly with
// httptest.NewRecorder: a real server's request goroutines are long-lived
// too, and block with several KiB of stack in use (so their stacks have
// grown once and the garbage collector does not shrink them), which the
// fresh goroutines of BenchmarkStampede have not. A loopback server would
// need 10,000 client connections, and bounding them would change the herd.
// Each request has a cancellable context, as net/http gives it. Latency is
// the handler's, from its call to its return. p50-ms and p99-ms are the
// medians over the rounds of each round's percentile, so that one round
// disturbed by a garbage collection or by the machine does not make the
// p99 (in a p99 over all rounds' requests merged, a third of the samples
// come from each of three rounds). A first round is not measured: it lets
// the workers' stacks grow to what the handler needs. Run with
// -benchtime 5x.
func BenchmarkHerdHTTP(b *testing.B) {
	const (
		callers = 10_000
		latency = 50 * time.Millisecond
	)
	type getFunc func(ctx context.Context, key string, load func(context.Context) (*product, error)) (*product, error)
	run := func(b *testing.B, get getFunc) {
		var calls atomic.Int64
		load := func(context.Context) (*product, error) {
			calls.Add(1)
			time.Sleep(latency)
			return benchProduct, nil
		}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := get(r.Context(), r.URL.Path, load)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(p)
		})
		workers := make([]chan *herdReq, callers)
		for i := range workers {
			workers[i] = make(chan *herdReq)
			go herdWorker(workers[i], handler, 16)
		}
		defer func() {
			for _, w := range workers {
				close(w)
			}
		}()
		lat := make([]time.Duration, 0, callers)
		var p50s, p99s []time.Duration
		var mu sync.Mutex
		// round serves one request on every worker for path, all at once,
		// and adds its median and 99th percentile to p50s and p99s when
		// keep is set.
		round := func(path string, keep bool) {
			b.StopTimer()
			lat = lat[:0]
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(callers)
			for _, w := range workers {
				ctx, cancel := context.WithCancel(context.Background())
				w <- &herdReq{
					start: start,
					req:   httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx),
					rec:   httptest.NewRecorder(),
					done: func(d time.Duration, code int) {
						cancel()
						if code != http.StatusOK {
							b.Errorf("status %d", code)
						}
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
						wg.Done()
					},
				}
			}
			time.Sleep(time.Millisecond) // the last workers park on start
			b.StartTimer()
			close(start)
			wg.Wait()
			if keep {
				slices.Sort(lat)
				p50s = append(p50s, lat[len(lat)/2])
				p99s = append(p99s, lat[len(lat)*99/100])
			}
		}
		// A first round, not measured (b.Loop starts the clock), as a
		// server has served requests before: the workers' stacks grow to
		// what the handler needs.
		round("/product/herd:warm-up", false)
		calls.Store(0)
		n := 0
		for b.Loop() {
			round(fmt.Sprintf("/product/herd:%d", n), true)
			n++
		}
		slices.Sort(p50s)
		slices.Sort(p99s)
		p50, p99 := p50s[len(p50s)/2], p99s[len(p99s)/2]
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(float64(calls.Load())/float64(n), "origin-calls/key")
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		b.ReportMetric(ms(p99-latency), "p99-over-loader-ms")
		b.ReportMetric(ms(latency), "loader-ms")
	}
	b.Run("impl=flightcache", func(b *testing.B) {
		local, _ := memstore.New(memstore.Options[*product]{MaxEntries: 100_000})
		defer local.Close()
		c, _ := flightcache.New(flightcache.Options[*product]{Local: local})
		defer c.Close()
		run(b, func(ctx context.Context, key string, load func(context.Context) (*product, error)) (*product, error) {
			return c.Get(ctx, key, load)
		})
	})
	b.Run("impl=sturdyc", func(b *testing.B) {
		sc := sturdyc.New[*product](100_000, 8, 5*time.Minute, 10, sturdyc.WithNoContinuousEvictions())
		run(b, func(ctx context.Context, key string, load func(context.Context) (*product, error)) (*product, error) {
			return sc.GetOrFetch(ctx, key, load)
		})
	})
}

// herdReq is one request of a BenchmarkHerdHTTP round, run when start
// closes; done gets the handler's latency and status.
type herdReq struct {
	start chan struct{}
	req   *http.Request
	rec   *httptest.ResponseRecorder
	done  func(d time.Duration, code int)
}

// herdWorker serves requests from depth frames of about 256 bytes each,
// so that it waits for the next one with that much stack in use, as a
// server's connection goroutine does.
//
//go:noinline
func herdWorker(in chan *herdReq, h http.Handler, depth int) {
	var pad [256]byte
	if depth > 0 {
		herdWorker(in, h, depth-1)
		if pad[depth%len(pad)] != 0 {
			panic("unreachable")
		}
		return
	}
	for r := range in {
		<-r.start
		t0 := time.Now()
		h.ServeHTTP(r.rec, r.req)
		r.done(time.Since(t0), r.rec.Code)
	}
}
