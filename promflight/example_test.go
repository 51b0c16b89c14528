package promflight_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/promflight"
)

// Expose a Cache's metrics on /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	local, err := memstore.New(memstore.Options[string]{})
	if err != nil {
		panic(err)
	}
	defer local.Close()
	cache, err := flightcache.New(flightcache.Options[string]{Name: "product", Local: local, TTL: time.Minute, Observer: m})
	if err != nil {
		panic(err)
	}
	defer cache.Close()
	load := func(context.Context) (string, error) { return "teapot", nil }
	cache.Get(context.Background(), "product:1", load) // miss: loads
	cache.Get(context.Background(), "product:1", load) // hit

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "single_flight_requests_total") ||
			strings.HasPrefix(line, "single_flight_flights_started_total") ||
			strings.HasPrefix(line, `flightcache_hits_total{operation="product",tier="local"}`) {
			fmt.Println(line)
		}
	}
	// Output:
	// flightcache_hits_total{operation="product",tier="local"} 1
	// single_flight_flights_started_total{operation="product"} 1
	// single_flight_requests_total{operation="product"} 1
}
