package otelflight

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// Span names and attribute keys, exported so that tests and queries in a
// tracing backend need not repeat the strings.
const (
	// SpanGet covers one Get, from the first tier lookup to the answer.
	SpanGet = "flightcache.get"
	// SpanLoad covers one execution of the loader: exactly one per load,
	// however many callers share it.
	SpanLoad = "flightcache.load"

	// AttrCache is the cache's name (flightcache.Options.Name): on every
	// span, and on every measurement of Metrics (WithOperation).
	AttrCache = attribute.Key("flightcache.cache.name")
	// AttrOutcome is the Get's flightcache.Outcome, as its String.
	AttrOutcome = attribute.Key("flightcache.outcome")
	// AttrLed is true on the Get span of the caller that ran the load.
	AttrLed = attribute.Key("flightcache.led")
	// AttrShared is true on the Get span of a caller that waited for a load
	// another caller ran; that span links to the load span.
	AttrShared = attribute.Key("flightcache.shared")
)

// Tracer implements driver.Tracer on the OpenTelemetry trace API.
//
// The load span is started on the loader's context, which carries the
// leading caller's values (the engine guarantees it), so it is a child of the
// leader's Get span; the other callers' Get spans link to it. Span attributes
// never include the key: keys may carry personal data, and the outcome,
// role and link are what explain a slow Get.
type Tracer struct {
	tracer trace.Tracer
}

var _ driver.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer creating spans with tp's tracer for ScopeName;
// a nil tp means the global provider (otel.GetTracerProvider).
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(ScopeName)}
}

// StartGet starts a Get span.
func (t *Tracer) StartGet(ctx context.Context, cache string) (context.Context, func(driver.SpanInfo)) {
	ctx, span := t.tracer.Start(ctx, SpanGet, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(AttrCache.String(cache)))
	return ctx, func(info driver.SpanInfo) {
		shared := false
		if !info.Led && info.LoadCtx != nil {
			if sc := trace.SpanContextFromContext(info.LoadCtx); sc.IsValid() && !sc.Equal(span.SpanContext()) {
				span.AddLink(trace.Link{SpanContext: sc})
				shared = true
			}
		}
		span.SetAttributes(
			AttrOutcome.String(info.Outcome.String()),
			AttrLed.Bool(info.Led),
			AttrShared.Bool(shared),
		)
		err := info.Err
		if info.Outcome == flightcache.OutcomeCallerLeft {
			// The caller left before its answer: no failure of the
			// Get's, which its outcome attribute says.
			err = nil
		}
		endWith(span, err)
	}
}

// StartLoad starts the load span on the loader's context.
func (t *Tracer) StartLoad(ctx context.Context, cache string) (context.Context, func(error)) {
	ctx, span := t.tracer.Start(ctx, SpanLoad, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(AttrCache.String(cache)))
	return ctx, func(err error) { endWith(span, err) }
}

// endWith ends span, marking it failed for a real error. A "not found" is an
// answer, not a failure: it is cached and served like a value.
func endWith(span trace.Span, err error) {
	if err != nil && !errors.Is(err, flightcache.ErrNotFound) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// BatchLinks returns a link to the load span of each flight that shares
// the batched origin call of ctx (a flightcache.Batcher's call, see
// driver.BatchMembers), for a batch loader that starts a span of its own:
//
//	ctx, span := tp.Tracer("products").Start(ctx, "products.load", trace.WithLinks(otelflight.BatchLinks(ctx)...))
//
// The call's context has no parent span, since it belongs to no caller;
// the links tie it to every member's load. Nil when ctx is not a batched
// call's.
func BatchLinks(ctx context.Context) []trace.Link {
	var links []trace.Link
	for _, m := range driver.BatchMembers(ctx) {
		if sc := trace.SpanContextFromContext(m); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}
