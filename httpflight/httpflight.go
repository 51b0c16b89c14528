package httpflight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cachestatus"
	"github.com/flightcache/flightcache/key"
	"github.com/flightcache/flightcache/singleflight"
)

// Defaults of Options.
const (
	// DefaultMaxBody bounds a stored body: 1 MiB.
	DefaultMaxBody = 1 << 20
	// DefaultKeepStale is how long a response past its freshness is kept
	// for validation when it carries a validator (ETag or Last-Modified).
	DefaultKeepStale = 10 * time.Minute
	// DefaultWaitTimeout bounds a request's wait for its response.
	DefaultWaitTimeout = 30 * time.Second
	// DefaultNamespace is the key namespace of stored responses.
	DefaultNamespace = "http"
	// DefaultName is the cache's name in Cache-Status.
	DefaultName = "httpflight"
)

// Options configures a Layer.
type Options struct {
	// Cache holds the stored responses: its tiers (give it Codec for a
	// shared tier), its Coordinator for collapsing across instances,
	// StaleFor and SoftTimeout (a stored response kept past its retention
	// and served when the upstream fails or is slow), LoaderTimeout (the
	// bound of one upstream request), and MaxWaiters (the cap on requests
	// waiting for one response: beyond it a request is answered 503).
	// Required.
	Cache *flightcache.Cache[*Response]
	// Namespace is the namespace of the keys (package key). Default
	// DefaultNamespace. Two Layers sharing a Cache's tiers need two
	// namespaces.
	Namespace string
	// KeyHeaders names the request header fields that select the response
	// besides the URL, which the upstream does not list in Vary: each is
	// a dimension of the key (see the package documentation, "Cache
	// poisoning"). Names are matched case-insensitively.
	KeyHeaders []string
	// MaxBody bounds the body of a stored response, in bytes: a larger
	// response is not stored, and every request waiting for it is
	// forwarded on its own. Default DefaultMaxBody; at most 1 GiB.
	MaxBody int64
	// KeepStale is how long a response past its freshness, and carrying a
	// validator, is kept for validation (a 304 refreshes it without a
	// body). Default DefaultKeepStale; at most 24h.
	KeepStale time.Duration
	// WaitTimeout bounds a request's wait for its response (its own
	// upstream request or the one it shares): past it the request is
	// answered 504, and the shared request goes on for the others.
	// Default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Name is the cache's name in the Cache-Status field. Default
	// DefaultName.
	Name string
	// Logger logs failed invalidations. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of freshness and Age. Default time.Now.
	Now func() time.Time
}

// ConfigError reports invalid Options.
type ConfigError struct {
	// Field is the Options field at fault.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error formats as "httpflight: Options.<Field>: <Reason>".
func (e *ConfigError) Error() string {
	return "httpflight: Options." + e.Field + ": " + e.Reason
}

var headerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)

func (o Options) withDefaults() (Options, error) {
	if o.Cache == nil {
		return o, &ConfigError{"Cache", "required (flightcache.New[*httpflight.Response])"}
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if _, err := key.New(o.Namespace).Build(); err != nil {
		return o, &ConfigError{"Namespace", err.Error()}
	}
	for _, h := range o.KeyHeaders {
		if !headerName.MatchString(h) || len(h) > key.MaxNameLen-2 {
			return o, &ConfigError{"KeyHeaders", fmt.Sprintf("%q is not a header field name of letters, digits and '-' (at most %d bytes)", h, key.MaxNameLen-2)}
		}
	}
	if len(o.KeyHeaders) > key.MaxDims-5 {
		return o, &ConfigError{"KeyHeaders", fmt.Sprintf("%d fields; at most %d", len(o.KeyHeaders), key.MaxDims-5)}
	}
	switch {
	case o.MaxBody < 0 || o.MaxBody > 1<<30:
		return o, &ConfigError{"MaxBody", "must be in [0, 1 GiB] (0: the default)"}
	case o.MaxBody == 0:
		o.MaxBody = DefaultMaxBody
	}
	switch {
	case o.KeepStale < 0 || o.KeepStale > 24*time.Hour:
		return o, &ConfigError{"KeepStale", "must be in [0, 24h] (0: the default)"}
	case o.KeepStale == 0:
		o.KeepStale = DefaultKeepStale
	}
	switch {
	case o.WaitTimeout < 0:
		return o, &ConfigError{"WaitTimeout", "must not be negative (0: the default)"}
	case o.WaitTimeout == 0:
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// Layer is a shared HTTP cache in front of a handler: it stores responses
// in its Cache, serves them while RFC 9111 allows, and collapses the
// requests that miss at once into one upstream request. Build it with New;
// it is safe for concurrent use.
type Layer struct {
	opts       Options
	keyHeaders []string // canonical names

	// background holds the revalidations of stale-while-revalidate in
	// progress, one per key; Close waits for them.
	background sync.Map
	wg         sync.WaitGroup
}

// New validates opts and returns a Layer, or a *ConfigError.
func New(opts Options) (*Layer, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Layer{opts: o}
	for _, h := range o.KeyHeaders {
		l.keyHeaders = append(l.keyHeaders, textproto.CanonicalMIMEHeaderKey(h))
	}
	return l, nil
}

// Middleware returns a Layer's Wrap. Options that New refuses make every
// request fail with 500 and the *ConfigError in the body and the log: use
// New to see the error at start-up.
func Middleware(opts Options) func(http.Handler) http.Handler {
	l, err := New(opts)
	if err != nil {
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Error("httpflight: invalid options", "err", err)
		return func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			})
		}
	}
	return l.Wrap
}

// Wrap returns next behind the cache.
func (l *Layer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}

// Close waits for the background revalidations to end. The Cache is the
// caller's to close.
func (l *Layer) Close() error {
	l.wg.Wait()
	return nil
}

// served is what a lookup came to.
type served struct {
	resp *Response
	// status is the Cache-Status entry, Detail and Fwd set as they apply.
	status cachestatus.Entry
	// fromCache: resp comes from the cache (a hit, a shared response, a
	// stale one), so Age is sent.
	fromCache bool
}

func (l *Layer) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodOptions, http.MethodTrace, "PRI":
		l.forward(w, r, next, cachestatus.Entry{Fwd: cachestatus.FwdMethod})
		return
	default:
		l.unsafe(w, r, next)
		return
	}
	rcc := parseCacheControl(r.Header)
	if why := bypass(r, rcc); why != "" {
		l.forward(w, r, next, cachestatus.Entry{Fwd: cachestatus.FwdBypass, Detail: why})
		return
	}
	b := l.requestBuilder(r)
	k, err := b.Build()
	if err != nil {
		l.forward(w, r, next, cachestatus.Entry{Fwd: cachestatus.FwdBypass, Detail: "key-refused"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.opts.WaitTimeout)
	defer cancel()
	s, ok := l.lookup(ctx, r, rcc, next, b, k)
	if !ok {
		l.forward(w, r, next, s.status)
		return
	}
	l.write(w, r, s)
}

// bypass says why r is forwarded without the cache, or "".
func bypass(r *http.Request, rcc directives) string {
	switch {
	case rcc.has("no-store"):
		return "request-no-store"
	case r.Header.Get("Upgrade") != "":
		return "upgrade" // a protocol switch (WebSocket) needs the client's connection
	case r.Header.Get("Range") != "" || r.Header.Get("If-Range") != "":
		return "range"
	case r.Header.Get("If-Match") != "" || r.Header.Get("If-Unmodified-Since") != "":
		return "precondition"
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return "request-body"
	}
	return ""
}

// lookup finds or loads the response for r. ok false: r must be forwarded
// on its own (the response cannot be shared with it); s.status says why.
func (l *Layer) lookup(ctx context.Context, r *http.Request, rcc directives, next http.Handler, b key.Builder, k string) (s served, ok bool) {
	res, led, err := l.fetch(ctx, r, next, k, nil)
	if err == nil && (!led || res.Outcome == flightcache.OutcomeStale) && res.Value.Variant != variant(res.Value.facts().vary, r) {
		// Another variant is stored (or being loaded) under the primary
		// key: this one has a key of its own, the primary key with the
		// request's values of the fields the stored Vary names.
		b = b.Dim("vary", keyValue(variant(res.Value.facts().vary, r)))
		if k, err = b.Build(); err != nil {
			return served{status: cachestatus.Entry{Fwd: cachestatus.FwdBypass, Detail: "key-refused"}}, false
		}
		res, led, err = l.fetch(ctx, r, next, k, nil)
		if err == nil && !led && res.Value.Variant != variant(res.Value.facts().vary, r) {
			return served{status: cachestatus.Entry{Fwd: cachestatus.FwdVaryMiss}}, false
		}
	}
	if ke := (*flightcache.KeyError)(nil); errors.As(err, &ke) {
		// A key the Cache's tiers cannot hold (longer than their limit).
		return served{status: cachestatus.Entry{Fwd: cachestatus.FwdBypass, Detail: "key-refused"}}, false
	}
	if err != nil {
		if !led && retryable(err) {
			// The load this request shared failed. One more load, shared
			// by every request that waited for the failed one, before
			// they are answered with an error: one transient failure is
			// not handed to all of them, and the upstream sees one more
			// request, not one per waiter.
			rk, kerr := b.Dim("retry", "1").Build()
			if kerr == nil {
				res, led, err = l.fetch(ctx, r, next, rk, nil)
			}
		}
		if err != nil {
			return l.failed(ctx, err, led)
		}
	}
	resp := res.Value
	if resp.truncated {
		return served{status: cachestatus.Entry{Fwd: cachestatus.FwdMiss, Detail: "too-large"}}, false
	}
	if res.Outcome == flightcache.OutcomeStale {
		// The Cache kept this response past its retention and the load
		// (this request's or the one it shared) failed or was slow
		// (flightcache.Options.StaleFor, SoftTimeout): served only when
		// its directives allow a stale response.
		cc := resp.facts().cc
		if mustRevalidate(cc) || cc.has("no-cache") {
			return served{resp: gatewayTimeout(), status: cachestatus.Entry{Fwd: cachestatus.FwdStale, Detail: "stale-forbidden"}}, true
		}
		return l.withTTL(served{resp: resp, fromCache: true, status: cachestatus.Entry{Fwd: cachestatus.FwdStale, Detail: "stale-on-error"}}, resp), true
	}
	st := cachestatus.Entry{}
	if led {
		st.Fwd = cachestatus.FwdMiss
		st.Stored = resp.unshared == "" && res.Outcome != flightcache.OutcomeLoadedUncached
		if resp.unshared != "" {
			st.Detail = resp.unshared
		}
		return l.withTTL(served{resp: resp, status: st}, resp), true
	}
	if resp.unshared != "" {
		// The response this request waited for may not be shared with it
		// (private, no-store, Set-Cookie, too large, ...): it goes
		// upstream itself, at once, as every other waiter does.
		return served{status: cachestatus.Entry{Fwd: cachestatus.FwdMiss, Detail: "unshareable-" + resp.unshared}}, false
	}
	switch res.Outcome {
	case flightcache.OutcomeCoalesced, flightcache.OutcomeLoaded, flightcache.OutcomeLoadedWriteFailed, flightcache.OutcomeLoadedUncached:
		st.Fwd, st.Collapsed = cachestatus.FwdMiss, true
		if res.Scope == flightcache.ScopeCluster {
			st.Detail = "coalesced-cluster"
		}
	default:
		st.Hit = true
	}
	return l.reuse(ctx, r, rcc, next, b, k, served{resp: resp, status: st, fromCache: true})
}

// reuse serves a stored response that this request did not load: as it is
// while fresh, else stale where the directives allow, else after
// validation upstream (RFC 9111 §4.2-§4.3).
func (l *Layer) reuse(ctx context.Context, r *http.Request, rcc directives, next http.Handler, b key.Builder, k string, s served) (served, bool) {
	resp := s.resp
	now := l.opts.Now()
	f := resp.facts()
	cc, lifetime := f.cc, f.lifetime
	age := resp.currentAge(now)
	fresh := lifetime > age
	if v, ok := rcc.seconds("max-age"); ok && age > v {
		fresh = false
	}
	if v, ok := rcc.seconds("min-fresh"); ok && lifetime-age < v {
		fresh = false
	}
	validate := cc.has("no-cache") || rcc.has("no-cache") || (len(rcc) == 0 && pragmaNoCache(r.Header))
	if fresh && !validate {
		return l.withTTL(s, resp), true
	}
	staleness := age - lifetime
	if !validate && !mustRevalidate(cc) {
		if v, ok := rcc["max-stale"]; ok && (v == "" || staleness <= deltaSeconds(v)) {
			s.status.Detail = "max-stale"
			return l.withTTL(s, resp), true
		}
		if v, ok := cc.seconds("stale-while-revalidate"); ok && staleness <= v {
			l.revalidateInBackground(r, next, b, k, resp)
			s.status.Detail = "stale-while-revalidate"
			return l.withTTL(s, resp), true
		}
	}
	fresher, led, err := l.revalidate(ctx, r, next, b, k, resp)
	if err != nil || fresher.StatusCode >= 500 {
		if !mustRevalidate(cc) && staleIfError(rcc, cc, staleness) {
			st := cachestatus.Entry{Fwd: cachestatus.FwdStale, Detail: "stale-if-error"}
			if fresher != nil {
				st.FwdStatus = fresher.StatusCode
			}
			return l.withTTL(served{resp: resp, status: st, fromCache: true}, resp), true
		}
		if err != nil {
			return l.failed(ctx, err, led)
		}
		// The validation failed and the stale response may not stand in:
		// every request that shared the validation gets its answer (not
		// one upstream request each).
		return served{resp: fresher, status: cachestatus.Entry{Fwd: cachestatus.FwdStale, Collapsed: !led, Detail: "validation-failed"}}, true
	}
	if !led && fresher.unshared != "" {
		// The new response may not be shared (it became private, ...):
		// each waiter goes upstream itself, at once.
		return served{status: cachestatus.Entry{Fwd: cachestatus.FwdStale, Detail: "unshareable-" + fresher.unshared}}, false
	}
	st := cachestatus.Entry{Fwd: cachestatus.FwdStale, Collapsed: !led, Stored: fresher.unshared == ""}
	if fresher.validated {
		st.FwdStatus = http.StatusNotModified
	}
	return l.withTTL(served{resp: fresher, status: st, fromCache: !led || fresher.validated}, fresher), true
}

// staleIfError reports whether the response's or the request's
// stale-if-error covers a stale response's staleness (RFC 5861 §4).
func staleIfError(rcc, cc directives, staleness time.Duration) bool {
	for _, d := range []directives{rcc, cc} {
		if v, ok := d.seconds("stale-if-error"); ok && staleness <= v {
			return true
		}
	}
	return false
}

// mustRevalidate: a stale response may never be served without validation
// by a shared cache (RFC 9111 §5.2.2.2, §5.2.2.8, §5.2.2.10).
func mustRevalidate(cc directives) bool {
	return cc.has("must-revalidate") || cc.has("proxy-revalidate") || cc.has("s-maxage")
}

func pragmaNoCache(h http.Header) bool {
	for _, v := range h.Values("Pragma") {
		if v == "no-cache" {
			return true
		}
	}
	return false
}

// withTTL sets the Cache-Status ttl of a response about to be served.
func (l *Layer) withTTL(s served, resp *Response) served {
	if resp.unshared != "" {
		return s
	}
	s.status.TTL, s.status.HasTTL = resp.facts().lifetime-resp.currentAge(l.opts.Now()), true
	return s
}

// fetch gets the response under k, loading it with r on a miss (a
// conditional load when validate is set); led reports that r's own load
// ran.
func (l *Layer) fetch(ctx context.Context, r *http.Request, next http.Handler, k string, validate *Response) (flightcache.Result[*Response], bool, error) {
	var ran atomic.Bool
	res, err := l.opts.Cache.Fetch(ctx, k, func(lctx context.Context) (*Response, error) {
		ran.Store(true)
		return l.load(lctx, r, next, validate)
	})
	return res, ran.Load(), err
}

// revalidate validates stale, stored under k, upstream: one conditional
// request for every request that revalidates the same stored response at
// once, on this instance or (with a Coordinator) any other. A 304 refreshes
// the stored response, a new response replaces it, a response that may
// not be stored removes it.
func (l *Layer) revalidate(ctx context.Context, r *http.Request, next http.Handler, b key.Builder, k string, stale *Response) (*Response, bool, error) {
	rk, err := b.Dim("rv", strconv.FormatInt(stale.ResponseTime.UnixNano(), 36)).Build()
	if err != nil {
		return nil, false, err
	}
	var ran atomic.Bool
	res, err := l.opts.Cache.Fetch(ctx, rk, func(lctx context.Context) (*Response, error) {
		ran.Store(true)
		fresher, err := l.load(lctx, r, next, stale)
		switch {
		case err != nil:
			return nil, err
		case fresher.unshared == "":
			if err := l.opts.Cache.Set(lctx, k, fresher); err != nil {
				l.opts.Logger.Warn("httpflight: storing a revalidated response failed", "err", err)
			}
			// Kept a moment under the revalidation's key, for the other
			// instances that waited for it.
			flightcache.SetTTL(lctx, flightcache.MinTTL)
		case fresher.StatusCode < 500:
			if err := l.opts.Cache.Delete(lctx, k); err != nil {
				l.opts.Logger.Warn("httpflight: removing a response that may no longer be stored failed", "err", err)
			}
		}
		return fresher, nil
	})
	if err != nil {
		var ue *upstreamError
		if errors.As(err, &ue) {
			return ue.resp, ran.Load(), nil
		}
		return nil, ran.Load(), err
	}
	return res.Value, ran.Load(), nil
}

// revalidateInBackground revalidates stale while it is served
// (stale-while-revalidate): at most one revalidation per key at a time on
// this instance.
func (l *Layer) revalidateInBackground(r *http.Request, next http.Handler, b key.Builder, k string, stale *Response) {
	if _, busy := l.background.LoadOrStore(k, struct{}{}); busy {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	r = r.Clone(ctx)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.background.Delete(k)
		_, _, _ = l.revalidate(ctx, r, next, b, k, stale)
	}()
}

// upstreamError is a load's error for an upstream response that may not be
// stored and reports a server error (5xx): the Cache then keeps what it
// has (StaleFor) instead of the error.
type upstreamError struct{ resp *Response }

func (e *upstreamError) Error() string {
	return fmt.Sprintf("httpflight: upstream answered %d", e.resp.StatusCode)
}

// retryable: the error of a shared load, which a waiter may try once more.
func retryable(err error) bool {
	switch {
	case errors.Is(err, singleflight.ErrTooManyWaiters), errors.Is(err, singleflight.ErrTooManyInFlight),
		errors.Is(err, singleflight.ErrClosed), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// failed is the answer to a lookup that ended with err.
func (l *Layer) failed(ctx context.Context, err error, led bool) (served, bool) {
	var ue *upstreamError
	switch {
	case errors.As(err, &ue):
		st := cachestatus.Entry{Fwd: cachestatus.FwdMiss, Collapsed: !led, Detail: "uncacheable-error"}
		return served{resp: ue.resp, status: st}, true
	case errors.Is(err, singleflight.ErrTooManyWaiters), errors.Is(err, singleflight.ErrTooManyInFlight):
		resp := &Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("overloaded\n")}
		return served{resp: resp, status: cachestatus.Entry{Detail: "overloaded"}}, true
	case ctx.Err() != nil:
		return served{resp: gatewayTimeout(), status: cachestatus.Entry{Detail: "wait-timeout"}}, true
	default:
		l.opts.Logger.Warn("httpflight: load failed", "err", err)
		resp := &Response{StatusCode: http.StatusBadGateway, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("bad gateway\n")}
		return served{resp: resp, status: cachestatus.Entry{Fwd: cachestatus.FwdMiss, Collapsed: !led, Detail: "load-failed"}}, true
	}
}

func gatewayTimeout() *Response {
	return &Response{StatusCode: http.StatusGatewayTimeout, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("gateway timeout\n")}
}
