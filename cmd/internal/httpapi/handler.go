// Package httpapi is productd's HTTP JSON API: routing (Go 1.22 patterns),
// validation, RFC 9211 Cache-Status headers, JSON errors and the recover
// middleware that keeps a panic from taking the process down.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/cmd/internal/ratelog"
)

// Query parameter defaults: a GET without locale or currency asks for the
// catalog's base variant.
const (
	DefaultLocale   = "en-US"
	DefaultCurrency = "USD"
	// maxBody bounds a PUT body; a product patch is a few dozen bytes.
	maxBody = 4 << 10
)

// Service is what the API needs from the domain: product.QueryService.
type Service interface {
	Get(ctx context.Context, ref product.Ref) (product.Served, error)
	Update(ctx context.Context, ref product.Ref, p product.Patch) (product.Product, error)
	GetMany(ctx context.Context, sel product.Selection) (product.BatchServed, error)
}

// Options configures New.
type Options struct {
	// Service answers product requests. Required.
	Service Service
	// Creator, when set, serves POST /v1/tenants/{tenant}/products.
	Creator Creator
	// Repricer, when set, serves
	// POST /v1/tenants/{tenant}/categories/{category}/reprice.
	Repricer Repricer
	// AuthorizeWrite, when set, is asked before every route that changes
	// data (PUT and POST of products, a reprice) does anything else, the body unread:
	// an error matching ErrWritesDisabled is answered 403 writes_disabled,
	// any other error 401 unauthorized with "WWW-Authenticate: Bearer".
	// Nil lets every write through.
	AuthorizeWrite func(r *http.Request) error
	// CacheName is the cache's name in Cache-Status; default "flightcache".
	CacheName string
	// Ready reports, for /readyz, whether the service can serve and the
	// state of each dependency. Nil means always ready.
	Ready func(ctx context.Context) Readiness
	// Metrics serves /metrics; nil leaves the route out.
	Metrics http.Handler
	// RetryAfter is sent with 503s; default 1s.
	RetryAfter time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// WarnEvery is the least time between two warnings about failed
	// requests (the ones in between are counted in the next); default 1s.
	WarnEvery time.Duration
}

// Readiness is what /readyz reports: whether this instance can serve, and
// each dependency's state ("up", "down", a breaker's "closed", "open"...),
// so an operator sees a degraded mode (say redis: down) on an instance a
// load balancer rightly keeps in rotation.
type Readiness struct {
	// Ready is false when the instance cannot serve; /readyz then answers
	// 503.
	Ready bool
	// Dependencies maps a dependency's name to its state.
	Dependencies map[string]string
	// Coalescing is the scope loads are coalesced in right now ("cluster",
	// "local", "local (degraded)", "none"); empty leaves it out.
	Coalescing string
	// Bus is the state of the cross-instance invalidation bus ("up",
	// "down", "none"); empty leaves it out. It never makes the instance
	// unready: while the bus is down the cache bounds how long it serves
	// what it holds in memory.
	Bus string
	// BusLastMessageAge is how long ago the last message of any kind
	// (heartbeats included) arrived on the bus; reported only when
	// BusHeard is true.
	BusLastMessageAge time.Duration
	// BusHeard is whether any message arrived on the bus yet.
	BusHeard bool
}

type api struct {
	Options
	// failures rate-limits the warnings about 5xx answers: under overload
	// or an outage they would otherwise be one line per request.
	failures *ratelog.Limiter
}

// New returns the API's handler: the routes wrapped in the recover
// middleware.
//
//	GET  /v1/tenants/{tenant}/products/{id}?locale=en-US&currency=USD
//	PUT  /v1/tenants/{tenant}/products/{id}?locale=en-US&currency=USD
//	GET  /v1/tenants/{tenant}/products?ids=a,b,c&locale=en-US&currency=USD
//	POST /v1/tenants/{tenant}/products?locale=en-US&currency=USD (with a Creator)
//	POST /v1/tenants/{tenant}/categories/{category}/reprice (with a Repricer)
//	GET  /healthz, /readyz, /metrics
func New(opts Options) http.Handler {
	if opts.CacheName == "" {
		opts.CacheName = "flightcache"
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.WarnEvery <= 0 {
		opts.WarnEvery = time.Second
	}
	a := &api{Options: opts, failures: ratelog.New(opts.Logger, opts.WarnEvery)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{tenant}/products/{id}", a.getProduct)
	mux.HandleFunc("PUT /v1/tenants/{tenant}/products/{id}", a.write(a.putProduct))
	mux.HandleFunc("/v1/tenants/{tenant}/products/{id}", methodNotAllowed("GET, HEAD, PUT"))
	mux.HandleFunc("GET /v1/tenants/{tenant}/products", a.listProducts)
	allow := "GET, HEAD"
	if opts.Creator != nil {
		mux.HandleFunc("POST /v1/tenants/{tenant}/products", a.write(a.createProduct))
		allow = "GET, HEAD, POST"
	}
	mux.HandleFunc("/v1/tenants/{tenant}/products", methodNotAllowed(allow))
	if opts.Repricer != nil {
		mux.HandleFunc("POST /v1/tenants/{tenant}/categories/{category}/reprice", a.write(a.repriceCategory))
		mux.HandleFunc("/v1/tenants/{tenant}/categories/{category}/reprice", methodNotAllowed("POST"))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/healthz", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("/readyz", methodNotAllowed("GET, HEAD"))
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
		mux.HandleFunc("/metrics", methodNotAllowed("GET, HEAD"))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{status: http.StatusNotFound, code: "no_route", message: "no such route"})
	})
	return Recover(opts.Logger, rejectUncleanPaths(mux))
}

// rejectUncleanPaths answers 400 to a path with empty, "." or ".."
// segments. ServeMux would redirect it to the cleaned path; an API answers
// that the input is invalid instead, so that a client never has a product
// request silently rewritten into another one.
func rejectUncleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "" || p[0] != '/' || strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
			strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") {
			writeError(w, apiError{status: http.StatusBadRequest, code: "invalid_path", message: "the path has empty, '.' or '..' segments"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", message: "allowed methods: " + allow})
	}
}

// ParseRef validates the path values and the query of a product request
// into a product.Ref. locale and currency default to DefaultLocale and
// DefaultCurrency; a malformed query, a repeated parameter or any other
// parameter (names are case-sensitive: LOCALE is not locale) is an error,
// so that a typo is refused rather than silently served the defaults.
// Every error is a *product.InvalidError.
func ParseRef(tenant, id, rawQuery string) (product.Ref, error) {
	q, err := parseQuery(rawQuery, "locale", "currency")
	if err != nil {
		return product.Ref{}, err
	}
	locale, currency := DefaultLocale, DefaultCurrency
	if v, ok := q["locale"]; ok {
		locale = v
	}
	if v, ok := q["currency"]; ok {
		currency = v
	}
	return product.NewRef(tenant, id, locale, currency)
}

// parseQuery parses rawQuery into one value per parameter, refusing (with a
// *product.InvalidError on the field "query") a malformed query, a
// parameter given twice, and a parameter not in allowed.
func parseQuery(rawQuery string, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, &product.InvalidError{Field: "query", Reason: "malformed query string"}
	}
	out := make(map[string]string, len(q))
	for name, vs := range q {
		if !slices.Contains(allowed, name) {
			return nil, &product.InvalidError{Field: "query", Reason: "unknown parameter; allowed: " + strings.Join(allowed, ", ")}
		}
		if len(vs) != 1 {
			return nil, &product.InvalidError{Field: "query", Reason: "each parameter may appear once"}
		}
		out[name] = vs[0]
	}
	return out, nil
}

func (a *api) getProduct(w http.ResponseWriter, r *http.Request) {
	ref, err := ParseRef(r.PathValue("tenant"), r.PathValue("id"), r.URL.RawQuery)
	if err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	sv, err := a.Service.Get(r.Context(), ref)
	w.Header().Set("Cache-Status", CacheStatus(a.CacheName, sv, err))
	if err != nil {
		a.fail(w, r, "product lookup failed", err)
		return
	}
	writeJSON(w, http.StatusOK, sv.Product)
}

func (a *api) putProduct(w http.ResponseWriter, r *http.Request) {
	ref, err := ParseRef(r.PathValue("tenant"), r.PathValue("id"), r.URL.RawQuery)
	if err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	if !requireJSON(w, r) {
		return
	}
	p, e := decodePatch(w, r)
	if e != nil {
		writeError(w, *e)
		return
	}
	if err := p.Validate(); err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	out, err := a.Service.Update(r.Context(), ref, p)
	// RFC 9211 §2.2: fwd=method, a PUT is never served from the cache.
	status := a.CacheName + "; fwd=method"
	if err == nil {
		status += "; detail=invalidated"
	}
	w.Header().Set("Cache-Status", status)
	if err != nil {
		a.fail(w, r, "product update failed", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// decodePatch reads a PUT body: one JSON object whose only keys are
// displayName and priceCents, each at most once and spelled exactly so.
// encoding/json alone would take the last of two duplicate keys and match
// "PRICECENTS" to priceCents; an API that says it rejects unknown fields
// must not guess which of two values was meant.
func decodePatch(w http.ResponseWriter, r *http.Request) (product.Patch, *apiError) {
	var p product.Patch
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return p, &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large", message: "the body must be at most 4 KiB"}
		}
		return p, &apiError{status: http.StatusBadRequest, code: "invalid_body", message: "the body could not be read"}
	}
	bad := func(msg string) (product.Patch, *apiError) {
		return product.Patch{}, &apiError{status: http.StatusBadRequest, code: "invalid_body", message: msg}
	}
	if !utf8.Valid(body) {
		return bad("the body must be UTF-8")
	}
	if err := checkKeys(body, patchFields); err != nil {
		return bad(err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return bad(`the body must be a JSON object {"displayName": string, "priceCents": integer}`)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("the body must hold exactly one JSON object")
	}
	return p, nil
}

// patchFields are the JSON names of the Patch, the only keys a PUT body may
// hold (see checkKeys).
var patchFields = []string{"displayName", "priceCents"}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	rd := Readiness{Ready: true, Dependencies: map[string]string{}}
	if a.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		rd = a.Ready(ctx)
	}
	body := struct {
		Status     string `json:"status"`
		Coalescing string `json:"coalescing,omitempty"`
		Bus        string `json:"bus,omitempty"`
		// Seconds, to the millisecond; absent until a message arrived.
		BusLastMessageAge *float64          `json:"bus_last_message_age_seconds,omitempty"`
		Dependencies      map[string]string `json:"dependencies"`
		Error             *ErrorDetail      `json:"error,omitempty"`
	}{Status: "ready", Coalescing: rd.Coalescing, Bus: rd.Bus, Dependencies: rd.Dependencies}
	if rd.BusHeard {
		age := math.Round(rd.BusLastMessageAge.Seconds()*1000) / 1000
		body.BusLastMessageAge = &age
	}
	if !rd.Ready {
		a.failures.Log(r.Context(), slog.LevelWarn, "not ready", slog.Any("dependencies", rd.Dependencies))
		body.Status = "not_ready"
		body.Error = &ErrorDetail{Code: "not_ready", Message: "the origin database cannot serve"}
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, a.RetryAfter.Round(time.Second)/time.Second))))
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// Recover turns a panic in next into a 500 JSON error and a log line with
// the panic's type and the stack (not the panic's value, which may hold
// IDs), so one bad request never kills the process. http.ErrAbortHandler
// is re-panicked: it is net/http's way to abort a response on purpose.
func Recover(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // a sentinel panic value, compared as net/http does
				panic(v)
			}
			// The panic's type, never its value: a value built from the
			// request (an error, a message) may hold tenant or product IDs.
			// The stack shows where it happened.
			log.LogAttrs(r.Context(), slog.LevelError, "panic serving request",
				slog.String("method", r.Method), slog.String("route", r.Pattern),
				slog.String("panic_type", fmt.Sprintf("%T", v)), slog.String("stack", string(debug.Stack())))
			if !rw.wrote {
				writeError(rw, apiError{status: http.StatusInternalServerError, code: "internal", message: "internal error"})
			}
		}()
		next.ServeHTTP(rw, r)
	})
}

// trackingWriter remembers whether the header was written, so Recover
// knows whether it may still send an error.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
