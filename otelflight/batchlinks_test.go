package otelflight_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/otelflight"
)

// TestBatchLinksLinkTheCallToEachMembersLoad: a Batcher's call has no
// parent span; BatchLinks links the loader's own span to the load span of
// the flight it serves.
func TestBatchLinksLinkTheCallToEachMembersLoad(t *testing.T) {
	tracer, rec := newTracer(t)
	c := newCache(t, nil, tracer)
	var links []trace.Link
	b, err := flightcache.NewBatcher(func(ctx context.Context, keys []string) (map[string]int, error) {
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Error("the call's context carries a caller's span")
		}
		links = otelflight.BatchLinks(ctx)
		return map[string]int{keys[0]: 1}, nil
	}, flightcache.BatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "k", b.Load("k")); err != nil {
		t.Fatal(err)
	}
	var load trace.SpanContext
	for _, s := range rec.Ended() {
		if s.Name() == otelflight.SpanLoad {
			load = s.SpanContext()
		}
	}
	if len(links) != 1 || !load.IsValid() || !links[0].SpanContext.Equal(load) {
		t.Fatalf("links %v, want one to the load span %v", links, load)
	}
	if otelflight.BatchLinks(context.Background()) != nil {
		t.Fatal("links on a context that is no batched call's")
	}
}
