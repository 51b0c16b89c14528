package otelflight_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/otelflight"
)

// Wire a Cache to OpenTelemetry metrics and tracing. Any SDK and exporter
// works; a ManualReader and a SpanRecorder stand in for them here.
func Example() {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer meters.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tracers.Shutdown(context.Background())

	m, err := otelflight.NewMetrics(meters.Meter(otelflight.ScopeName), otelflight.WithOperation("product"))
	if err != nil {
		panic(err)
	}
	local, err := memstore.New(memstore.Options[string]{})
	if err != nil {
		panic(err)
	}
	defer local.Close()
	cache, err := flightcache.New(flightcache.Options[string]{
		Name:     "product",
		Local:    local,
		TTL:      time.Minute,
		Observer: m,                             // metrics of both the cache and its engine
		Tracer:   otelflight.NewTracer(tracers), // a get span per Get, one load span per load
	})
	if err != nil {
		panic(err)
	}
	defer cache.Close()
	cache.Get(context.Background(), "product:1", func(context.Context) (string, error) { return "teapot", nil })

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if s, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "single_flight.flights.started" {
				fmt.Println(mt.Name, s.DataPoints[0].Value)
			}
		}
	}
	for _, s := range spans.Ended() {
		fmt.Println("span", s.Name())
	}
	// Output:
	// single_flight.flights.started 1
	// span flightcache.load
	// span flightcache.get
}
