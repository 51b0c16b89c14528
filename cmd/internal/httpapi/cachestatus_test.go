package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/singleflight"
)

// staleBecause is a stale answer whose fresh value did not arrive because
// of cause (Served.StaleCause).
func staleBecause(cause error) product.Served {
	return product.Served{Outcome: flightcache.OutcomeStale, TTL: -3400 * time.Millisecond, TTLKnown: true, StaleCause: cause}
}

// RFC 9211 §2.3: fwd-status is the status of the next hop's response. For
// a stale value that stood in for a failed load, that is the status the
// same failure gets when there is no stale value (the handler's classify),
// and there is none when the origin has not answered or the load was not
// this process's.
func TestCacheStatusFwdStatusIsTheStatusOfTheFailureTheStaleValueHid(t *testing.T) {
	originDown := errors.New("connection refused")
	tests := []struct {
		name  string
		cause error
		want  int // 0: no fwd-status
	}{
		{"origin error", originDown, http.StatusBadGateway},
		{"origin error, wrapped", fmt.Errorf("product: get: %w", originDown), http.StatusBadGateway},
		{"loader timeout", fmt.Errorf("load: %w", context.DeadlineExceeded), http.StatusGatewayTimeout},
		{"loader panic", &singleflight.PanicError{Value: "boom"}, http.StatusInternalServerError},
		{"unknown cause (no WatchStale observer)", nil, 0},
		{"soft timeout: the origin has not answered", flightcache.ErrSoftTimeout, 0},
		{"cluster mode: the leader's load failed, its status is not known here", fmt.Errorf("%w: it timed out", flightcache.ErrLeaderFailed), 0},
		{"cluster mode: the leader's load has not answered", flightcache.ErrCoalesceTimeout, 0},
		{"cluster mode: no coordinator, nothing loaded", fmt.Errorf("%w: dial tcp: refused", flightcache.ErrCoordinatorUnavailable), 0},
		{"overload: nothing forwarded", singleflight.ErrTooManyInFlight, 0},
		{"too many waiters: nothing forwarded", singleflight.ErrTooManyWaiters, 0},
	}
	for _, tc := range tests {
		cs := CacheStatus("flightcache", staleBecause(tc.cause), nil)
		item, params, err := parseCacheStatus(cs)
		if err != nil || item != "flightcache" {
			t.Fatalf("%s: %q is not an RFC 8941 list member named flightcache: %v", tc.name, cs, err)
		}
		if params.get("fwd") != "stale" {
			t.Fatalf("%s: %q, want fwd=stale", tc.name, cs)
		}
		got, has := params.lookup("fwd-status")
		switch {
		case tc.want == 0 && has:
			t.Errorf("%s: %q has fwd-status, want none", tc.name, cs)
		case tc.want != 0 && got != strconv.Itoa(tc.want):
			t.Errorf("%s: %q, want fwd-status=%d", tc.name, cs, tc.want)
		case tc.want != 0 && got != strconv.Itoa(classify(tc.cause, 0).status):
			t.Errorf("%s: fwd-status=%s, but the handler answers this failure with %d", tc.name, got, classify(tc.cause, 0).status)
		}
	}
	// The throttle's stale value was never forwarded: hit, so no fwd-status.
	cs := CacheStatus("flightcache", staleBecause(&flightcache.ThrottledError{Err: originDown}), nil)
	if cs != "flightcache; hit; ttl=-4; detail=origin-throttled" {
		t.Fatalf("throttled stale value: %q", cs)
	}
}

// Every Cache-Status value CacheStatus can produce, for every outcome,
// error and scope, is an RFC 8941 list of one member whose parameters
// have the types RFC 9211 gives them; fwd-status comes only with fwd, and
// fwd is never uri-miss: a Result does not tell an absent entry from an
// unusable one.
func TestCacheStatusIsAlwaysAValidRFC9211Value(t *testing.T) {
	originDown := errors.New("connection refused")
	errs := []error{
		nil, originDown, fmt.Errorf("load: %w", context.DeadlineExceeded), &singleflight.PanicError{Value: 1},
		product.ErrNotFoundCached, singleflight.ErrTooManyInFlight, singleflight.ErrTooManyWaiters, singleflight.ErrClosed,
		&flightcache.ThrottledError{Err: originDown}, fmt.Errorf("%w: x", flightcache.ErrLeaderFailed),
		flightcache.ErrCoalesceTimeout, flightcache.ErrSoftTimeout, fmt.Errorf("%w: x", flightcache.ErrCoordinatorUnavailable),
	}
	fwds := map[string]bool{"bypass": true, "method": true, "uri-miss": true, "vary-miss": true, "miss": true, "request": true, "stale": true, "partial": true}
	n := 0
	for o := range driver.NumOutcomes {
		for _, scope := range []flightcache.Scope{flightcache.ScopeNone, flightcache.ScopeLocal, flightcache.ScopeCluster} {
			for _, ttl := range []time.Duration{0, 90 * time.Second, -2500 * time.Millisecond} {
				for _, err := range errs {
					for _, cause := range errs {
						sv := product.Served{Outcome: flightcache.Outcome(o), Scope: scope, TTL: ttl, TTLKnown: ttl != 0, StaleCause: cause}
						cs := CacheStatus("flightcache", sv, err)
						n++
						item, p, perr := parseCacheStatus(cs)
						if perr != nil || item != "flightcache" {
							t.Fatalf("%+v, %v: %q is not an RFC 8941 list member named flightcache: %v", sv, err, cs, perr)
						}
						_, hit := p.lookup("hit")
						fwd, hasFwd := p.lookup("fwd")
						fs, hasFS := p.lookup("fwd-status")
						switch {
						case hit && hasFwd:
							t.Fatalf("%q: both hit and fwd", cs)
						case hasFwd && !fwds[fwd]:
							t.Fatalf("%q: fwd=%s is not an RFC 9211 §2.2 value", cs, fwd)
						case fwd == "uri-miss":
							t.Fatalf("%q: uri-miss, which productd cannot tell", cs)
						case hasFS && fwd != "stale":
							t.Fatalf("%q: fwd-status without fwd=stale", cs)
						case p.has("key"):
							t.Fatalf("%q: key is never sent", cs)
						}
						if hasFS {
							if code, err := strconv.Atoi(fs); err != nil || code < 100 || code > 599 {
								t.Fatalf("%q: fwd-status %q is not an HTTP status", cs, fs)
							}
						}
						for _, b := range []string{"hit", "stored", "collapsed"} {
							if v, ok := p.lookup(b); ok && v != "?1" {
								t.Fatalf("%q: %s=%s, want a bare (true) boolean", cs, b, v)
							}
						}
						if v, ok := p.lookup("ttl"); ok {
							if _, err := strconv.ParseInt(v, 10, 64); err != nil {
								t.Fatalf("%q: ttl %q is not an integer", cs, v)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d Cache-Status values checked", n)
}

// The parser below is checked against hand-written values, so that the
// test above cannot pass by accepting anything.
func TestParseCacheStatusRejectsWhatRFC8941Rejects(t *testing.T) {
	good := []string{
		"flightcache; hit; ttl=42",
		"flightcache; fwd=stale; fwd-status=502; ttl=-4; detail=origin-error",
		"flightcache;fwd=miss;stored",
		"naive",
	}
	for _, v := range good {
		if _, _, err := parseCacheStatus(v); err != nil {
			t.Errorf("%q rejected: %v", v, err)
		}
	}
	bad := []string{
		"", "flightcache;", "flightcache; fwd-status=5o2", "flightcache; fwd=", "flightcache; Fwd=miss",
		"flightcache ;hit", "flightcache; fwd=stale fwd-status=502", "flightcache; detail=origin error",
		"flightcache; ttl=1234567890123456", "flightcache; fwd=miss; fwd=stale", "1cache; hit",
	}
	for _, v := range bad {
		if _, _, err := parseCacheStatus(v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}

// sfParams are an RFC 8941 item's parameters in order; a parameter without
// a value is the boolean true, kept as "?1".
type sfParams [][2]string

func (p sfParams) lookup(k string) (string, bool) {
	for _, kv := range p {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

func (p sfParams) get(k string) string { v, _ := p.lookup(k); return v }

func (p sfParams) has(k string) bool { _, ok := p.lookup(k); return ok }

// parseCacheStatus parses a Cache-Status value as productd sends it: an
// RFC 8941 list of one member, a token item with parameters whose values
// are tokens, integers or booleans (productd sends no strings or
// decimals). A repeated parameter is an error here: RFC 8941 would let the
// last one win, which a correct value never needs.
func parseCacheStatus(s string) (item string, params sfParams, err error) {
	i := 0
	token := func() (string, bool) {
		start := i
		if i >= len(s) || !(isAlpha(s[i]) || s[i] == '*') {
			return "", false
		}
		for i++; i < len(s) && (isTchar(s[i]) || s[i] == ':' || s[i] == '/'); i++ {
		}
		return s[start:i], true
	}
	key := func() (string, bool) {
		start := i
		if i >= len(s) || !(isLower(s[i]) || s[i] == '*') {
			return "", false
		}
		for i++; i < len(s) && (isLower(s[i]) || isDigit(s[i]) || strings.IndexByte("_-.*", s[i]) >= 0); i++ {
		}
		return s[start:i], true
	}
	bare := func() (string, bool) {
		switch {
		case i < len(s) && (s[i] == '-' || isDigit(s[i])):
			start := i
			if s[i] == '-' {
				i++
			}
			d := i
			for i < len(s) && isDigit(s[i]) {
				i++
			}
			if n := i - d; n == 0 || n > 15 {
				return "", false
			}
			return s[start:i], true
		case i+1 < len(s) && s[i] == '?' && (s[i+1] == '0' || s[i+1] == '1'):
			i += 2
			return s[i-2 : i], true
		}
		return token()
	}
	item, ok := token()
	if !ok {
		return "", nil, fmt.Errorf("no token at %d", i)
	}
	for i < len(s) && s[i] == ';' {
		for i++; i < len(s) && s[i] == ' '; i++ {
		}
		k, ok := key()
		if !ok {
			return "", nil, fmt.Errorf("no parameter key at %d", i)
		}
		v := "?1"
		if i < len(s) && s[i] == '=' {
			i++
			if v, ok = bare(); !ok {
				return "", nil, fmt.Errorf("no value for %s at %d", k, i)
			}
		}
		if params.has(k) {
			return "", nil, fmt.Errorf("%s repeated", k)
		}
		params = append(params, [2]string{k, v})
	}
	if i != len(s) {
		return "", nil, fmt.Errorf("unexpected %q at %d", s[i:], i)
	}
	return item, params, nil
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isTchar is RFC 9110's tchar.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Through the handler and a real Cache: a product past its TTL, the origin
// failing, the stale value served with the fwd-status the failure gets
// without it (502, then 504 for a timeout).
func TestStaleAnswerCarriesTheFwdStatusOfTheOriginFailure(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var fail error // guarded by mu
	repo := &faultRepo{Repository: product.NewMemoryRepository(catalog), get: func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error) {
		mu.Lock()
		err := fail
		mu.Unlock()
		if err != nil {
			return product.Product{}, err
		}
		return next()
	}}
	local, err := memstore.New(memstore.Options[product.Entry]{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	c, err := flightcache.New(flightcache.Options[product.Entry]{
		Name: "product", Local: local, TTL: time.Minute, NegativeTTL: 10 * time.Second, StaleFor: time.Hour,
		LoaderTimeout: 5 * time.Second, Now: clock, Observer: product.WatchStale(nil, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := product.NewQueryService(repo, product.ServiceOptions{Cache: c, TTL: time.Minute, NegativeTTL: 10 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Service: svc, Metrics: http.NotFoundHandler(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	get := func() (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p1, nil))
		return w.Code, w.Header().Get("Cache-Status")
	}
	if code, cs := get(); code != 200 || cs != "flightcache; fwd=miss; stored; ttl=60" {
		t.Fatalf("cold GET: %d %q", code, cs)
	}
	for _, step := range []struct {
		advance time.Duration
		fail    error
		want    string
	}{
		{2 * time.Minute, errors.New("connection refused"), "flightcache; fwd=stale; fwd-status=502; ttl=-60; detail=origin-error"},
		{10 * time.Second, fmt.Errorf("query: %w", context.DeadlineExceeded), "flightcache; fwd=stale; fwd-status=504; ttl=-70; detail=origin-error"},
	} {
		mu.Lock()
		now = now.Add(step.advance)
		fail = step.fail
		mu.Unlock()
		if code, cs := get(); code != 200 || cs != step.want {
			t.Fatalf("GET past the TTL, origin failing with %v: %d %q, want 200 %q", step.fail, code, cs, step.want)
		}
	}
}
