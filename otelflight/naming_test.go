package otelflight_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/flightwait"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/otelflight"
)

// During an origin outage with a failure throttle, only the first Get of a
// key calls the origin: the throttled ones are flights and throttled
// answers, never origin calls.
func TestThrottledGetIsNotAnOriginCall(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	obs := flightwait.New(m)
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Local: local, TTL: time.Minute, FailureThrottle: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	errDown := errors.New("database down")
	const gets = 6
	for range gets {
		if _, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { return 0, errDown }); !errors.Is(err, errDown) {
			t.Fatalf("Get: %v, want the origin's error (or its throttled copy)", err)
		}
	}
	obs.Await(t, gets)
	got := collect(t, reader)
	for _, w := range []struct {
		name string
		kv   []attribute.KeyValue
		v    float64
	}{
		{"flightcache.origin.calls", []attribute.KeyValue{otelflight.AttrResult.String("error")}, 1},
		{"flightcache.origin.calls", nil, 1},
		{"flightcache.origin.duration", nil, 1},
		{"flightcache.throttled", nil, gets - 1},
		{"single_flight.flights.started", nil, gets},
		{"single_flight.flights.failed", nil, gets},
	} {
		if v := got.value(t, w.name, append(w.kv, op)...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.kv, v, w.v)
		}
	}
}

// Every instrument follows OpenTelemetry's naming rules: lower-case
// dot-separated namespaces, no .count or _total suffix on a counter, no
// unit in the name, a description and a unit; every attribute is in the
// flightcache namespace.
func TestInstrumentsFollowOTelNaming(t *testing.T) {
	m, reader := newMetrics(t, otelflight.WithOperation("product"))
	obs := flightwait.Ends(m)
	c := newCache(t, obs, nil)
	ctx := context.Background()
	for range 2 {
		if _, err := c.Get(ctx, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The engine reports the load's end after it released the Get: wait
	// for it, or its instruments may have no data point yet.
	obs.Await(t, 1)
	for _, e := range []driver.Event{
		{Kind: driver.EventThrottled}, {Kind: driver.EventStaleServed}, {Kind: driver.EventFollowerWoken},
		{Kind: driver.EventLeaseAcquired}, {Kind: driver.EventFencedWriteRejected}, {Kind: driver.EventScopeChanged, Scope: flightcache.ScopeLocal},
		{Kind: driver.EventBreakerChanged, Breaker: driver.BreakerOpen}, {Kind: driver.EventInvalidationSent, Invalidation: driver.InvalidationKey},
		{Kind: driver.EventInvalidationReceived, Invalidation: driver.InvalidationKey}, {Kind: driver.EventWriteFailed, Tier: driver.TierShared},
		{Kind: driver.EventBusChanged, Bus: driver.BusUp}, {Kind: driver.EventBusChanged, Bus: driver.BusDown},
	} {
		m.ObserveCache(e)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^(single_flight|flightcache)(\.[a-z][a-z_]*)+$`)
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			seen++
			switch {
			case !name.MatchString(mt.Name):
				t.Errorf("instrument %q: want lower-case dot-separated names under single_flight. or flightcache.", mt.Name)
			case strings.HasSuffix(mt.Name, ".count") || strings.HasSuffix(mt.Name, "_total"):
				t.Errorf("instrument %q: a counter's name takes no .count or _total suffix", mt.Name)
			case strings.HasSuffix(mt.Name, "_seconds") || strings.HasSuffix(mt.Name, "_ms"):
				t.Errorf("instrument %q: the unit goes in the unit, not the name", mt.Name)
			}
			if mt.Description == "" || mt.Unit == "" {
				t.Errorf("instrument %q: description %q, unit %q; want both", mt.Name, mt.Description, mt.Unit)
			}
			for _, s := range attributeSets(mt.Data) {
				for _, kv := range s.ToSlice() {
					if !strings.HasPrefix(string(kv.Key), "flightcache.") {
						t.Errorf("instrument %q: attribute %q is not in the flightcache namespace", mt.Name, kv.Key)
					}
				}
				if v, ok := s.Value(otelflight.AttrCache); !ok || v.AsString() != "product" {
					t.Errorf("instrument %q: data point without %s=product: %v", mt.Name, otelflight.AttrCache, s.ToSlice())
				}
			}
		}
	}
	if seen < 25 {
		t.Errorf("only %d instruments collected", seen)
	}
}

func attributeSets(data metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}
