package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/singleflight"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var catalog = product.Catalog{
	Tenants:           []string{"acme", "globex"},
	ProductsPerTenant: 50,
	Locales:           []string{"en-US", "de-DE"},
	Currencies:        []string{"USD", "EUR"},
}

// faultRepo wraps the real in-memory origin; get, when set, replaces Get
// (it may call next) so a test can block, fail or panic the origin.
type faultRepo struct {
	product.Repository
	get func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error)
}

func (f *faultRepo) Get(ctx context.Context, ref product.Ref) (product.Product, error) {
	next := func() (product.Product, error) { return f.Repository.Get(ctx, ref) }
	if f.get != nil {
		return f.get(ctx, ref, next)
	}
	return next()
}

// flightEvents counts the engine's events, so tests can wait for callers
// to have joined a flight instead of sleeping.
type flightEvents struct {
	shared  chan struct{} // one send per caller that joined a flight
	started chan struct{} // one send per loader started
}

func newFlightEvents() *flightEvents {
	return &flightEvents{shared: make(chan struct{}, 1024), started: make(chan struct{}, 1024)}
}

func (f *flightEvents) ObserveCache(driver.Event) {}
func (f *flightEvents) ObserveFlight(e singleflight.Event) {
	switch e.Kind {
	case singleflight.EventShared:
		f.shared <- struct{}{}
	case singleflight.EventLoaderStarted:
		f.started <- struct{}{}
	}
}

type testAPI struct {
	h       http.Handler
	cache   *flightcache.Cache[product.Entry]
	repo    *faultRepo
	counted *product.CountingRepository
	events  *flightEvents
}

type apiConfig struct {
	loaderTimeout time.Duration
	maxInFlight   int
	ready         func(context.Context) Readiness
	logger        *slog.Logger // default: discarded
}

func newTestAPI(t testing.TB, cfg apiConfig) *testAPI {
	t.Helper()
	repo := &faultRepo{Repository: product.NewMemoryRepository(catalog)}
	counted := product.Count(repo, nil)
	local, err := memstore.New(memstore.Options[product.Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	ev := newFlightEvents()
	if cfg.loaderTimeout == 0 {
		cfg.loaderTimeout = 5 * time.Second
	}
	c, err := flightcache.New(flightcache.Options[product.Entry]{
		Name: "product", Local: local, TTL: time.Minute, NegativeTTL: 10 * time.Second,
		LoaderTimeout: cfg.loaderTimeout, MaxInFlight: cfg.maxInFlight, Observer: ev,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := product.NewQueryService(counted, product.ServiceOptions{
		Cache: c, TTL: time.Minute, NegativeTTL: 10 * time.Second, Jitter: 0.1,
	})
	if err != nil {
		t.Fatal(err)
	}
	log := cfg.logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := New(Options{Service: svc, Ready: cfg.ready, Metrics: http.NotFoundHandler(), Logger: log})
	return &testAPI{h: h, cache: c, repo: repo, counted: counted, events: ev}
}

func (a *testAPI) do(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, req)
	return w
}

// wantError checks the status and that the body is exactly the JSON error
// shape with the given code.
func wantError(t *testing.T, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("body %s is not a JSON error: %v", w.Body, err)
	}
	e, ok := raw["error"]
	if len(raw) != 1 || !ok || len(e) != 2 {
		t.Fatalf(`body %s: want exactly {"error":{"code","message"}}`, w.Body)
	}
	if got, _ := e["code"].(string); got != code {
		t.Fatalf("error code %q, want %q", got, code)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("empty error message in %s", w.Body)
	}
}

const p1 = "/v1/tenants/acme/products/p-00001"

func TestGetServesTheProductAndThenHitsTheCache(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("GET", p1+"?locale=de-DE&currency=EUR", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var got product.Product
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if want := catalog.Row("acme", 1, "de-DE", "EUR"); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, f := range []string{`"productId"`, `"tenantId"`, `"displayName"`, `"priceCents"`, `"currency"`, `"locale"`} {
		if !strings.Contains(w.Body.String(), f) {
			t.Errorf("body %s lacks field %s", w.Body, f)
		}
	}
	if cs := w.Header().Get("Cache-Status"); !strings.HasPrefix(cs, "flightcache; fwd=miss; stored; ttl=") {
		t.Fatalf("first Cache-Status %q, want a stored miss with ttl", cs)
	}
	w = a.do("GET", p1+"?locale=de-de&currency=eur", "") // same variant, other case
	if cs := w.Header().Get("Cache-Status"); w.Code != 200 || !strings.HasPrefix(cs, "flightcache; hit; ttl=") {
		t.Fatalf("second GET: %d, Cache-Status %q; want a hit", w.Code, cs)
	}
	if q := a.counted.Queries(); q != 1 {
		t.Fatalf("%d origin queries, want 1", q)
	}
	// Defaults: en-US and USD.
	w = a.do("GET", p1, "")
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Locale != "en-US" || got.Currency != "USD" {
		t.Fatalf("GET without query: %s (%v)", w.Body, err)
	}
}

func TestInvalidInputGets400WithTheFieldInTheCode(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	tests := []struct{ target, code string }{
		{"/v1/tenants/ACME/products/p-00001", "invalid_tenant"},
		{"/v1/tenants/acme/products/p.1", "invalid_id"},
		{"/v1/tenants/acme/products/" + strings.Repeat("x", 65), "invalid_id"},
		{"/v1/tenants/acme/products/p%2F1", "invalid_id"},
		{p1 + "?locale=en_US", "invalid_locale"},
		{p1 + "?locale=", "invalid_locale"},
		{p1 + "?currency=US", "invalid_currency"},
		{p1 + "?currency=%zz", "invalid_query"},
		{p1 + "?locale=en-US&locale=de-DE", "invalid_query"},
		{p1 + "?LOCALE=de-DE", "invalid_query"},
		{p1 + "?Currency=EUR", "invalid_query"},
		{p1 + "?lang=de-DE", "invalid_query"},
		{p1 + "?locale=de-DE&ids=p-00002", "invalid_query"},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			wantError(t, a.do("GET", tc.target, ""), http.StatusBadRequest, tc.code)
		})
	}
	// A PUT is refused for its query as a GET is, before its body is read.
	for _, target := range []string{p1 + "?LOCALE=de-DE", p1 + "?currency=EUR&currency=USD", p1 + "?lang=de"} {
		wantError(t, a.do("PUT", target, `{"priceCents":5}`), http.StatusBadRequest, "invalid_query")
	}
	if q := a.counted.Queries(); q != 0 {
		t.Fatalf("invalid requests made %d origin queries", q)
	}
}

func TestUnknownProductIs404AndNegativelyCached(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("GET", "/v1/tenants/acme/products/nope", "")
	wantError(t, w, http.StatusNotFound, "not_found")
	if cs := w.Header().Get("Cache-Status"); cs != "flightcache; fwd=miss; stored; ttl=10; detail=not-found" {
		t.Fatalf("Cache-Status %q", cs)
	}
	w = a.do("GET", "/v1/tenants/acme/products/nope", "")
	wantError(t, w, http.StatusNotFound, "not_found")
	if cs := w.Header().Get("Cache-Status"); !strings.HasPrefix(cs, "flightcache; hit; ttl=") || !strings.HasSuffix(cs, "; detail=not-found") {
		t.Fatalf("second Cache-Status %q, want a negative hit", cs)
	}
	if q := a.counted.Queries(); q != 1 {
		t.Fatalf("%d origin queries, want 1: the second 404 must come from the cache", q)
	}
}

func TestRoutingErrors(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("DELETE", p1, "")
	wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := w.Header().Get("Allow"); !strings.Contains(allow, "PUT") {
		t.Fatalf("Allow %q", allow)
	}
	wantError(t, a.do("GET", "/v1/nothing", ""), http.StatusNotFound, "no_route")
	if w := a.do("GET", "/healthz", ""); w.Code != 200 {
		t.Fatalf("healthz %d", w.Code)
	}
}

func TestPutUpdatesAndTheNextGetSeesIt(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	if w := a.do("GET", p1, ""); w.Code != 200 { // cache the old value
		t.Fatal(w.Code)
	}
	w := a.do("PUT", p1+"?locale=en-US&currency=USD", `{"displayName":"Brand new","priceCents":4242}`, "Content-Type", "application/json")
	if w.Code != http.StatusOK {
		t.Fatalf("PUT %d: %s", w.Code, w.Body)
	}
	// RFC 9211 §2.2: a method never served from the cache is fwd=method.
	if cs := w.Header().Get("Cache-Status"); cs != "flightcache; fwd=method; detail=invalidated" {
		t.Fatalf("PUT Cache-Status %q", cs)
	}
	var got product.Product
	w = a.do("GET", p1, "")
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.DisplayName != "Brand new" || got.PriceCents != 4242 {
		t.Fatalf("GET after PUT: %s (%v)", w.Body, err)
	}
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "fwd=miss") {
		t.Fatalf("GET after PUT Cache-Status %q: want a miss", cs)
	}
}

func TestPutRejectsBadBodies(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	tests := []struct {
		name, body, ctype string
		status            int
		code              string
	}{
		{"empty patch", `{}`, "application/json", 400, "invalid_body"},
		{"not json", `nope`, "application/json", 400, "invalid_body"},
		{"unknown field", `{"price":1}`, "application/json", 400, "invalid_body"},
		{"two objects", `{"priceCents":1}{"priceCents":2}`, "", 400, "invalid_body"},
		{"negative price", `{"priceCents":-1}`, "application/json", 400, "invalid_priceCents"},
		{"control char", `{"displayName":"a\u0007"}`, "application/json", 400, "invalid_displayName"},
		{"wrong type", `{"priceCents":1}`, "text/plain", 415, "unsupported_media_type"},
		{"too big", `{"displayName":"` + strings.Repeat("a", 5000) + `"}`, "application/json", 413, "body_too_large"},
		{"unknown product", `{"priceCents":1}`, "application/json; charset=utf-8", 404, "not_found"},
		{"duplicate key", `{"priceCents":1,"priceCents":2}`, "application/json", 400, "invalid_body"},
		{"case-variant key", `{"PRICECENTS":1}`, "application/json", 400, "invalid_body"},
		{"case-variant duplicate", `{"priceCents":1,"PriceCents":2}`, "application/json", 400, "invalid_body"},
		{"invalid UTF-8 in name", "{\"displayName\":\"caf\xe9\"}", "application/json", 400, "invalid_body"},
		{"lone surrogate in name", `{"displayName":"a\ud800b"}`, "application/json", 400, "invalid_displayName"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := p1
			if tc.code == "not_found" {
				target = "/v1/tenants/acme/products/nope"
			}
			hdr := []string{}
			if tc.ctype != "" {
				hdr = []string{"Content-Type", tc.ctype}
			}
			wantError(t, a.do("PUT", target, tc.body, hdr...), tc.status, tc.code)
		})
	}
}

// The operational routes answer a wrong method with 405, an Allow header
// and a JSON error, like the product routes.
func TestWrongMethodOnOperationalRoutesIs405JSON(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, method := range []string{"POST", "PUT", "DELETE"} {
			w := a.do(method, path, "")
			wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
			if allow := w.Header().Get("Allow"); allow != "GET, HEAD" {
				t.Fatalf("%s %s: Allow %q", method, path, allow)
			}
		}
	}
}

func TestOriginFailuresMapToGatewayErrors(t *testing.T) {
	t.Run("origin error is 502", func(t *testing.T) {
		a := newTestAPI(t, apiConfig{})
		a.repo.get = func(context.Context, product.Ref, func() (product.Product, error)) (product.Product, error) {
			return product.Product{}, errors.New("connection refused")
		}
		w := a.do("GET", p1, "")
		wantError(t, w, http.StatusBadGateway, "origin_error")
		if cs := w.Header().Get("Cache-Status"); cs != "flightcache; fwd=miss; detail=origin-error" {
			t.Fatalf("Cache-Status %q", cs)
		}
	})
	t.Run("origin timeout is 504", func(t *testing.T) {
		a := newTestAPI(t, apiConfig{loaderTimeout: 20 * time.Millisecond})
		a.repo.get = func(ctx context.Context, _ product.Ref, _ func() (product.Product, error)) (product.Product, error) {
			<-ctx.Done()
			return product.Product{}, ctx.Err()
		}
		wantError(t, a.do("GET", p1, ""), http.StatusGatewayTimeout, "origin_timeout")
	})
	t.Run("loader panic is 500", func(t *testing.T) {
		a := newTestAPI(t, apiConfig{})
		a.repo.get = func(context.Context, product.Ref, func() (product.Product, error)) (product.Product, error) {
			panic("origin driver bug")
		}
		wantError(t, a.do("GET", p1, ""), http.StatusInternalServerError, "internal")
		a.repo.get = nil
		if w := a.do("GET", "/v1/tenants/acme/products/p-00002", ""); w.Code != 200 {
			t.Fatalf("after a loader panic the API answers %d", w.Code)
		}
	})
}

func TestEngineLimitIs503WithRetryAfter(t *testing.T) {
	a := newTestAPI(t, apiConfig{maxInFlight: 1})
	release := make(chan struct{})
	a.repo.get = func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error) {
		if ref.ID == "p-00001" {
			<-release
		}
		return next()
	}
	done := make(chan int)
	go func() { done <- a.do("GET", p1, "").Code }()
	<-a.events.started // the blocked load holds the only slot
	w := a.do("GET", "/v1/tenants/acme/products/p-00002", "")
	wantError(t, w, http.StatusServiceUnavailable, "overloaded")
	if cs := w.Header().Get("Cache-Status"); cs != "flightcache; detail=overloaded" {
		t.Fatalf("Cache-Status %q of a rejection: want no fwd, nothing was forwarded", cs)
	}
	if ra := w.Header().Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1", ra)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the blocked request finished with %d", code)
	}
}

// Under overload every rejected request is a 503, but the warnings about
// them are rate-limited: one line, not one per request.
func TestOverloadWarningsAreRateLimited(t *testing.T) {
	var logs bytes.Buffer // written only by the test goroutine's requests
	a := newTestAPI(t, apiConfig{maxInFlight: 1, logger: slog.New(slog.NewTextHandler(&logs, nil))})
	release := make(chan struct{})
	a.repo.get = func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error) {
		if ref.ID == "p-00001" {
			<-release
		}
		return next()
	}
	done := make(chan int)
	go func() { done <- a.do("GET", p1, "").Code }()
	<-a.events.started // the blocked load holds the only slot
	for i := 2; i <= 21; i++ {
		w := a.do("GET", fmt.Sprintf("/v1/tenants/acme/products/p-%05d", i), "")
		wantError(t, w, http.StatusServiceUnavailable, "overloaded")
	}
	close(release)
	<-done
	if n := strings.Count(logs.String(), "product lookup failed"); n != 1 {
		t.Fatalf("%d warnings for 20 rejections within a second, want 1:\n%s", n, logs.String())
	}
}

func TestConcurrentMissesAreCollapsedIntoOneOriginQuery(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	const n = 50
	release := make(chan struct{})
	a.repo.get = func(ctx context.Context, _ product.Ref, next func() (product.Product, error)) (product.Product, error) {
		<-release
		return next()
	}
	var wg sync.WaitGroup
	statuses := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := a.do("GET", p1, "")
			if w.Code == 200 {
				statuses[i] = w.Header().Get("Cache-Status")
			}
		}()
	}
	for range n - 1 { // every other caller joined the flight
		<-a.events.shared
	}
	close(release)
	wg.Wait()
	stored, collapsed := 0, 0
	for _, s := range statuses {
		switch {
		case strings.HasPrefix(s, "flightcache; fwd=miss; stored; ttl="):
			stored++
		case strings.HasPrefix(s, "flightcache; fwd=miss; collapsed; ttl="):
			collapsed++
		default:
			t.Errorf("unexpected Cache-Status %q", s)
		}
	}
	if stored != 1 || collapsed != n-1 || a.counted.Queries() != 1 {
		t.Fatalf("stored=%d collapsed=%d queries=%d; want 1, %d, 1", stored, collapsed, a.counted.Queries(), n-1)
	}
}

// /readyz answers 200 while the instance can serve, even with a
// dependency down, and shows each dependency's state in its JSON body; it
// answers 503 only when the instance cannot serve.
func TestReadyzReportsEachDependencyAndFailsOnlyWhenItCannotServe(t *testing.T) {
	degraded := Readiness{Ready: true, Dependencies: map[string]string{"db": "up", "redis": "down", "breaker": "open"}}
	a := newTestAPI(t, apiConfig{ready: func(context.Context) Readiness { return degraded }})
	w := a.do("GET", "/readyz", "")
	if w.Code != 200 {
		t.Fatalf("readyz %d with redis down, want 200: the instance still serves", w.Code)
	}
	var body struct {
		Status       string
		Dependencies map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Status != "ready" ||
		body.Dependencies["redis"] != "down" || body.Dependencies["breaker"] != "open" || body.Dependencies["db"] != "up" {
		t.Fatalf("readyz body %s (%v)", w.Body, err)
	}
	b := newTestAPI(t, apiConfig{ready: func(context.Context) Readiness {
		return Readiness{Dependencies: map[string]string{"db": "down"}}
	}})
	w = b.do("GET", "/readyz", "")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"code":"not_ready"`) {
		t.Fatalf("readyz with the db down: %d %s", w.Code, w.Body)
	}
	if w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"db":"down"`) {
		t.Fatalf("503 readyz: Retry-After %q, body %s", w.Header().Get("Retry-After"), w.Body)
	}
}

// /readyz shows the invalidation bus's state and the age of its last
// message (omitted until one arrived), and a bus that is down keeps the
// instance ready.
func TestReadyzShowsTheBusWithoutEverFailingOnIt(t *testing.T) {
	tests := []struct {
		rd      Readiness
		want    string
		wantAge string // the field as it appears in the body; empty: absent
	}{
		{Readiness{Ready: true, Bus: "up", BusLastMessageAge: 83456 * time.Microsecond, BusHeard: true}, "up", `"bus_last_message_age_seconds":0.083`},
		{Readiness{Ready: true, Bus: "down", BusLastMessageAge: 4200 * time.Millisecond, BusHeard: true}, "down", `"bus_last_message_age_seconds":4.2`},
		{Readiness{Ready: true, Bus: "down"}, "down", ""},
		{Readiness{Ready: true, Bus: "up", BusHeard: true}, "up", `"bus_last_message_age_seconds":0`},
		{Readiness{Ready: true, Bus: "none"}, "none", ""},
	}
	for _, tc := range tests {
		tc.rd.Dependencies = map[string]string{"db": "up"}
		a := newTestAPI(t, apiConfig{ready: func(context.Context) Readiness { return tc.rd }})
		w := a.do("GET", "/readyz", "")
		var body struct {
			Status string
			Bus    string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 || body.Status != "ready" || body.Bus != tc.want {
			t.Fatalf("%+v: readyz %d %s (%v); want 200 with bus %q", tc.rd, w.Code, w.Body, err, tc.want)
		}
		got := w.Body.String()
		if tc.wantAge == "" && strings.Contains(got, "bus_last_message_age_seconds") || tc.wantAge != "" && !strings.Contains(got, tc.wantAge) {
			t.Fatalf("%+v: readyz body %s, want %q", tc.rd, got, tc.wantAge)
		}
	}
}

func TestRecoverKeepsTheProcessAliveAfterAHandlerPanic(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := Recover(quiet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("handler bug")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	resp, err := srv.Client().Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(body), `"code":"internal"`) {
		t.Fatalf("panic answered %d %s", resp.StatusCode, body)
	}
	resp, err = srv.Client().Get(srv.URL + "/ok")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("after the panic: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Every Cache-Status value productd sends, with the RFC 9211 section
// that makes it right.
func TestCacheStatusFollowsRFC9211ForEveryOutcome(t *testing.T) {
	sv := func(o flightcache.Outcome, ttl time.Duration) product.Served {
		return product.Served{Outcome: o, TTL: ttl, TTLKnown: true}
	}
	stale := func(cause error) product.Served {
		s := sv(flightcache.OutcomeStale, -3400*time.Millisecond)
		s.StaleCause = cause
		return s
	}
	scoped := func(o flightcache.Outcome, scope flightcache.Scope) product.Served {
		s := sv(o, 300*time.Second)
		s.Scope = scope
		return s
	}
	failed := product.Served{Outcome: flightcache.OutcomeLoadFailed}
	originDown := errors.New("connection refused")
	throttled := &flightcache.ThrottledError{Err: originDown}
	tests := []struct {
		rfc  string // why this value is right
		sv   product.Served
		err  error
		want string
	}{
		{"§2.1 hit: served from the cache, not forwarded; §2.4 ttl rounded up", sv(flightcache.OutcomeHitLocal, 41500*time.Millisecond), nil, "flightcache; hit; ttl=42"},
		{"§2.1 hit from the shared tier; §2.8 detail names the tier", sv(flightcache.OutcomeHitShared, 5*time.Second), nil, "flightcache; hit; ttl=5; detail=shared"},
		{"§2.1 hit; the background refresh is not this request's forward", sv(flightcache.OutcomeRefreshed, time.Second), nil, "flightcache; hit; ttl=1; detail=early-refresh"},
		{"§2.2 fwd=miss: nothing cached; §2.5 stored", sv(flightcache.OutcomeLoaded, 300*time.Second), nil, "flightcache; fwd=miss; stored; ttl=300"},
		{"§2.2 fwd=miss; §2.6 collapsed into another request's load", sv(flightcache.OutcomeCoalesced, 300*time.Second), nil, "flightcache; fwd=miss; collapsed; ttl=300"},
		{"§2.6 collapsed into a load of this process; §2.8 detail says so", scoped(flightcache.OutcomeCoalesced, flightcache.ScopeLocal), nil, "flightcache; fwd=miss; collapsed; ttl=300; detail=coalesced-local"},
		{"§2.6 collapsed into another instance's load (cluster mode); §2.8 detail says so", scoped(flightcache.OutcomeCoalesced, flightcache.ScopeCluster), nil, "flightcache; fwd=miss; collapsed; ttl=300; detail=coalesced-cluster"},
		{"§2.5 stored: this request's load led the cluster; no coalescing detail", scoped(flightcache.OutcomeLoaded, flightcache.ScopeLocal), nil, "flightcache; fwd=miss; stored; ttl=300"},
		{"§2.5 stored: a not-found is stored as a tombstone", sv(flightcache.OutcomeLoaded, 30*time.Second), product.ErrNotFoundCached, "flightcache; fwd=miss; stored; ttl=30; detail=not-found"},
		{"§2.1 hit on a cached not-found", sv(flightcache.OutcomeNegativeHit, 17*time.Second), product.ErrNotFoundCached, "flightcache; hit; ttl=17; detail=not-found"},
		{"§2.2 fwd=stale: only a stale value was cached and the request went forward; §2.3 fwd-status: the 502 the failure gets without a stale value; §2.4 negative ttl is stale", stale(originDown), nil, "flightcache; fwd=stale; fwd-status=502; ttl=-4; detail=origin-error"},
		{"§2.2 fwd=stale; §2.3 fwd-status: the 504 of a load that timed out", stale(fmt.Errorf("load: %w", context.DeadlineExceeded)), nil, "flightcache; fwd=stale; fwd-status=504; ttl=-4; detail=origin-error"},
		{"§2.2 fwd=stale; §2.3 no fwd-status: the load failed on another instance (cluster mode), whose status this one cannot know", stale(fmt.Errorf("%w: it timed out", flightcache.ErrLeaderFailed)), nil, "flightcache; fwd=stale; ttl=-4; detail=origin-error"},
		{"§2.2 fwd=stale; §2.3 no fwd-status: another instance's load has not answered yet (cluster mode)", stale(flightcache.ErrCoalesceTimeout), nil, "flightcache; fwd=stale; ttl=-4; detail=origin-error"},
		{"§2.2 fwd=stale: forwarded, the origin was too slow for the soft timeout; §2.3 no fwd-status, the origin has not answered", stale(flightcache.ErrSoftTimeout), nil, "flightcache; fwd=stale; ttl=-4; detail=soft-timeout"},
		{"§2.1 hit: the failure throttle served the stale value without forwarding; §2.4 negative ttl", stale(throttled), nil, "flightcache; hit; ttl=-4; detail=origin-throttled"},
		{"§2.2 fwd=miss; §2.5 stored: the memory tier of this cache holds it, only the shared write failed (§2.8 detail); §2.4 ttl of the stored value", sv(flightcache.OutcomeLoadedWriteFailed, time.Minute), nil, "flightcache; fwd=miss; stored; ttl=60; detail=shared-write-failed"},
		{"§2.2 fwd=miss; no §2.5 stored and no ttl: another instance held the lease past the coalesce wait", sv(flightcache.OutcomeLoadedUncached, 300*time.Second), nil, "flightcache; fwd=miss; detail=uncached"},
		{"§2.2 fwd=miss that failed; §2.3 fwd-status omitted: it defaults to the response's own status (502)", failed, originDown, "flightcache; fwd=miss; detail=origin-error"},
		{"§2.2 fwd=miss that timed out", failed, fmt.Errorf("load: %w", context.DeadlineExceeded), "flightcache; fwd=miss; detail=origin-timeout"},
		{"§2.2 fwd=miss for an uncached not-found (naive mode)", failed, product.ErrNotFoundCached, "flightcache; fwd=miss; detail=not-found"},
		{"§2.2 no fwd: an overload rejection forwarded nothing", failed, singleflight.ErrTooManyInFlight, "flightcache; detail=overloaded"},
		{"§2.2 no fwd: too many waiters, nothing forwarded", failed, singleflight.ErrTooManyWaiters, "flightcache; detail=overloaded"},
		{"§2.2 no fwd: shutting down, nothing forwarded", failed, singleflight.ErrClosed, "flightcache; detail=shutting-down"},
		{"§2.2 no fwd: the throttle answered with the last failure", failed, throttled, "flightcache; detail=origin-throttled"},
		{"§2.2 no fwd: the load failed on the instance that led it (cluster mode)", failed, fmt.Errorf("%w: connection refused", flightcache.ErrLeaderFailed), "flightcache; detail=leader-failed"},
		{"§2.1 no hit, §2.2 no fwd: the guard answered without a stored response", sv(flightcache.OutcomeFiltered, time.Second), product.ErrNotFoundCached, "flightcache; detail=filtered"},
		{"§2.4 ttl only when known", product.Served{Outcome: flightcache.OutcomeHitLocal}, nil, "flightcache; hit"},
		{"§2.4 a value stale by less than a second is still negative, never ttl=0; §2.3 no fwd-status for an unknown cause", product.Served{Outcome: flightcache.OutcomeStale, TTL: -300 * time.Millisecond, TTLKnown: true}, nil, "flightcache; fwd=stale; ttl=-1; detail=origin-error"},
	}
	for _, tc := range tests {
		if got := CacheStatus("flightcache", tc.sv, tc.err); got != tc.want {
			t.Errorf("%s: CacheStatus(%v, %v) = %q, want %q", tc.rfc, tc.sv.Outcome, tc.err, got, tc.want)
		}
	}
}

func TestRequestsAfterTheCacheClosedGet503ShuttingDown(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	if err := a.cache.Close(); err != nil {
		t.Fatal(err)
	}
	w := a.do("GET", p1, "")
	wantError(t, w, http.StatusServiceUnavailable, "shutting_down")
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("no Retry-After on a 503")
	}
}

// A panic's value may be built from the request: the log line names the
// panic's type and where it happened, never the value.
func TestRecoverLogsThePanicsTypeAndStackNotItsValue(t *testing.T) {
	var logs bytes.Buffer
	h := Recover(slog.New(slog.NewJSONHandler(&logs, nil)), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(fmt.Errorf("no row for tenant acme id %s", r.URL.Query().Get("id")))
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/boom?id=p-secret-42", nil))
	if w.Code != 500 {
		t.Fatalf("panic answered %d", w.Code)
	}
	var rec map[string]any
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	stack, _ := rec["stack"].(string)
	if strings.Contains(logs.String(), "p-secret-42") || rec["panic_type"] != "*errors.errorString" ||
		!strings.Contains(stack, "TestRecoverLogsThePanicsTypeAndStackNotItsValue") {
		t.Fatalf("log line %s: want the panic's type and a stack through the handler, and no id", logs.String())
	}
}
