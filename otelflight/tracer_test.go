package otelflight_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/otelflight"
	"github.com/flightcache/flightcache/singleflight"
)

func newTracer(t *testing.T) (*otelflight.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return otelflight.NewTracer(tp), rec
}

// barrier is a cache observer whose only job is to say when n callers have
// joined the load in flight.
type barrier struct{ hook func(singleflight.Event) }

func (b barrier) ObserveFlight(e singleflight.Event) { b.hook(e) }
func (barrier) ObserveCache(driver.Event)            {}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestOneLoadSpanAndWaitersLinkToIt(t *testing.T) {
	const callers = 50
	tracer, rec := newTracer(t)
	hook, attached := sharedBarrier(callers - 1)
	c := newCache(t, barrier{hook}, tracer)

	release := make(chan struct{})
	loaderSpan := make(chan trace.SpanContext, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			_, err := c.Get(context.Background(), "hot", func(ctx context.Context) (int, error) {
				loaderSpan <- trace.SpanContextFromContext(ctx)
				<-release
				return 1, nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	close(loaderSpan)

	var loads, gets []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case otelflight.SpanLoad:
			loads = append(loads, s)
		case otelflight.SpanGet:
			gets = append(gets, s)
		}
	}
	if len(loads) != 1 {
		t.Fatalf("%d load spans, want 1", len(loads))
	}
	if len(gets) != callers {
		t.Fatalf("%d get spans, want %d", len(gets), callers)
	}
	load := loads[0].SpanContext()
	if got := <-loaderSpan; !got.Equal(load) {
		t.Errorf("the loader's ctx carries span %v, want the load span %v", got.SpanID(), load.SpanID())
	}

	var leaders, waiters int
	for _, g := range gets {
		led, _ := attr(g, otelflight.AttrLed)
		shared, _ := attr(g, otelflight.AttrShared)
		outcome, _ := attr(g, otelflight.AttrOutcome)
		name, _ := attr(g, otelflight.AttrCache)
		if name.AsString() != "product" {
			t.Errorf("cache attribute = %q, want product", name.AsString())
		}
		switch {
		case led.AsBool():
			leaders++
			if shared.AsBool() || len(g.Links()) != 0 {
				t.Errorf("leader span: shared=%v, %d links; want false, 0", shared.AsBool(), len(g.Links()))
			}
			if outcome.AsString() != "loaded" {
				t.Errorf("leader outcome = %q, want loaded", outcome.AsString())
			}
			// The trace context flowed into the loader: the load span is
			// the leader's child.
			if loads[0].Parent().SpanID() != g.SpanContext().SpanID() {
				t.Errorf("load span's parent = %v, want the leader's get span %v", loads[0].Parent().SpanID(), g.SpanContext().SpanID())
			}
		default:
			waiters++
			if !shared.AsBool() {
				t.Error("waiter span not marked shared")
			}
			if outcome.AsString() != "coalesced" {
				t.Errorf("waiter outcome = %q, want coalesced", outcome.AsString())
			}
			if l := g.Links(); len(l) != 1 || !l[0].SpanContext.Equal(load) {
				t.Errorf("waiter links = %v, want one link to the load span", l)
			}
		}
	}
	if leaders != 1 || waiters != callers-1 {
		t.Errorf("%d leaders, %d waiters; want 1, %d", leaders, waiters, callers-1)
	}
}

func TestFailedLoadMarksSpansAsErrors(t *testing.T) {
	tracer, rec := newTracer(t)
	c := newCache(t, nil, tracer)
	boom := errors.New("origin down")
	if _, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("Get = %v, want %v", err, boom)
	}
	// A "not found" is an answer, not an error.
	if _, err := c.Get(context.Background(), "gone", func(context.Context) (int, error) { return 0, flightcache.ErrNotFound }); !errors.Is(err, flightcache.ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4 (get+load twice)", len(spans))
	}
	for i, s := range spans {
		want := codes.Error
		if i >= 2 {
			want = codes.Unset
		}
		if s.Status().Code != want {
			t.Errorf("span %d (%s) status = %v, want %v", i, s.Name(), s.Status().Code, want)
		}
	}
}

func TestHitSpanIsNeitherLedNorShared(t *testing.T) {
	tracer, rec := newTracer(t)
	c := newCache(t, nil, tracer)
	if err := c.Set(context.Background(), "k", 5); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(context.Background(), "k", nil); err != nil || v != 5 {
		t.Fatalf("Get = %d, %v", v, err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != otelflight.SpanGet {
		t.Fatalf("spans = %v, want one get span", spans)
	}
	led, _ := attr(spans[0], otelflight.AttrLed)
	shared, _ := attr(spans[0], otelflight.AttrShared)
	outcome, _ := attr(spans[0], otelflight.AttrOutcome)
	if led.AsBool() || shared.AsBool() || outcome.AsString() != "hit_local" {
		t.Errorf("hit span: led=%v shared=%v outcome=%q", led.AsBool(), shared.AsBool(), outcome.AsString())
	}
}

// A Get whose caller left is no failed span: its outcome says caller_left
// and its status stays unset.
func TestCallerLeftIsNotAFailedSpan(t *testing.T) {
	tracer, rec := newTracer(t)
	c := newCache(t, nil, tracer)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "k", func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != otelflight.SpanGet {
		t.Fatalf("spans = %v, want one get span", spans)
	}
	outcome, _ := attr(spans[0], otelflight.AttrOutcome)
	if outcome.AsString() != "caller_left" || spans[0].Status().Code != codes.Unset {
		t.Errorf("get span: outcome %q, status %v; want caller_left, Unset", outcome.AsString(), spans[0].Status().Code)
	}
}
