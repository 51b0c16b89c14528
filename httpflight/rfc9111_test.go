package httpflight_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/httpflight"
)

func TestFreshResponseIsServedWithItsAgeUntilItExpires(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Age", "10")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	if w := h.get("/a"); w.Body.String() != "1" || !strings.Contains(w.Header().Get("Cache-Status"), "fwd=miss; stored") {
		t.Fatalf("first: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	}
	h.clk.Advance(20 * time.Second)
	w := h.get("/a")
	if w.Body.String() != "1" || w.Header().Get("Age") != "30" {
		t.Fatalf("after 20s: %q with Age %q, want the stored response with Age 30", w.Body.String(), w.Header().Get("Age"))
	}
	if cs := w.Header().Get("Cache-Status"); cs != "httpflight; hit; ttl=30" {
		t.Fatalf("Cache-Status %q", cs)
	}
	h.clk.Advance(31 * time.Second) // age 61 > 60
	if w := h.get("/a"); w.Body.String() != "2" {
		t.Fatalf("after expiry: %q, want a new response", w.Body.String())
	}
}

func TestSMaxAgeOverridesMaxAgeAndExpires(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=1, s-maxage=100")
		w.Header().Set("Expires", "Thu, 01 Jan 1970 00:00:00 GMT")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/s")
	h.clk.Advance(50 * time.Second)
	if w := h.get("/s"); w.Body.String() != "1" {
		t.Fatalf("s-maxage=100 after 50s: %q, want the stored response", w.Body.String())
	}
}

// A stale response is validated with its ETag and Last-Modified; a 304
// refreshes it, and the next requests are hits again.
func TestStaleResponseIsValidatedAnd304RefreshesIt(t *testing.T) {
	lm := "Mon, 01 Dec 2025 00:00:00 GMT"
	var conditional []string
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", lm)
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			conditional = append(conditional, inm+" "+r.Header.Get("If-Modified-Since"))
			w.Header().Set("X-Refreshed", "yes")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, "body")
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/v", "If-None-Match", `"old"`) // the client's validators are not the cache's
	h.clk.Advance(11 * time.Second)
	w := h.get("/v")
	if w.Code != 200 || w.Body.String() != "body" || w.Header().Get("X-Refreshed") != "yes" {
		t.Fatalf("validated: %d %q X-Refreshed=%q", w.Code, w.Body.String(), w.Header().Get("X-Refreshed"))
	}
	if len(conditional) != 1 || conditional[0] != `"v1" `+lm {
		t.Fatalf("conditional requests %q", conditional)
	}
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "fwd=stale; fwd-status=304") {
		t.Fatalf("Cache-Status %q", cs)
	}
	h.clk.Advance(5 * time.Second)
	if w := h.get("/v"); w.Body.String() != "body" || up.calls.Load() != 2 || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("after the refresh: %q, %d upstream calls, Cache-Status %q", w.Body.String(), up.calls.Load(), w.Header().Get("Cache-Status"))
	}
}

// A client's validators that match the stored response get a 304.
func TestConditionalRequestIsAnswered304FromTheStoredResponse(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `W/"e"`)
		w.Header().Set("Last-Modified", "Mon, 01 Dec 2025 00:00:00 GMT")
		fmt.Fprint(w, "content")
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/c")
	if w := h.get("/c", "If-None-Match", `"x", "e"`); w.Code != http.StatusNotModified || w.Body.Len() != 0 || w.Header().Get("ETag") != `W/"e"` {
		t.Fatalf("If-None-Match: %d %q", w.Code, w.Body.String())
	}
	if w := h.get("/c", "If-None-Match", `"other"`); w.Code != 200 {
		t.Fatalf("a non-matching If-None-Match: %d", w.Code)
	}
	if w := h.get("/c", "If-Modified-Since", "Tue, 02 Dec 2025 00:00:00 GMT"); w.Code != http.StatusNotModified {
		t.Fatalf("If-Modified-Since after Last-Modified: %d", w.Code)
	}
	if w := h.get("/c", "If-Modified-Since", "Sun, 30 Nov 2025 00:00:00 GMT"); w.Code != 200 {
		t.Fatalf("If-Modified-Since before Last-Modified: %d", w.Code)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("%d upstream calls", up.calls.Load())
	}
}

// Without explicit freshness, a heuristically cacheable status with
// Last-Modified is fresh for a tenth of its age; a 500 without explicit
// freshness is not stored, one with it is.
func TestHeuristicFreshnessAndErrorsCachedOnlyWhenAllowed(t *testing.T) {
	clk := newClock()
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().UTC().Format(http.TimeFormat))
		switch r.URL.Path {
		case "/h":
			w.Header().Set("Last-Modified", clk.Now().Add(-100*time.Hour).UTC().Format(http.TimeFormat))
		case "/e":
			w.WriteHeader(http.StatusInternalServerError)
		case "/e-allowed":
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprint(w, c)
	}}
	h2 := newHarnessOnClock(t, up, clk) // the upstream's Date follows the same clock
	h2.get("/h")
	clk.Advance(9 * time.Hour) // under 10% of 100h
	if w := h2.get("/h"); w.Body.String() != "1" {
		t.Fatalf("heuristically fresh response not reused: %q", w.Body.String())
	}
	clk.Advance(2 * time.Hour)
	if w := h2.get("/h"); w.Body.String() != "2" {
		t.Fatalf("heuristic lifetime passed: %q, want a new response", w.Body.String())
	}
	h2.get("/e")
	if w := h2.get("/e"); w.Body.String() != "4" || w.Code != 500 {
		t.Fatalf("a 500 without freshness was reused: %d %q", w.Code, w.Body.String())
	}
	h2.get("/e-allowed")
	if w := h2.get("/e-allowed"); w.Body.String() != "5" {
		t.Fatalf("a 500 with max-age was not reused: %q", w.Body.String())
	}
}

// newHarnessOnClock is newHarness on the given clock.
func newHarnessOnClock(t *testing.T, up http.Handler, clk *fakeClock) *harness {
	t.Helper()
	h := newHarness(t, up, httpflight.Options{Now: clk.Now}, func(o *flightcache.Options[*httpflight.Response]) { o.Now = clk.Now })
	h.clk = clk
	return h
}

func TestStaleWhileRevalidateServesStaleAndRefreshesInTheBackground(t *testing.T) {
	release := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 2 {
			<-release
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=60")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/swr")
	h.clk.Advance(30 * time.Second)
	for range 5 {
		w := h.get("/swr")
		if w.Body.String() != "1" || !strings.Contains(w.Header().Get("Cache-Status"), "detail=stale-while-revalidate") {
			t.Fatalf("stale hit: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
	close(release)
	waitFor(t, "the background revalidation", func() bool { return h.get("/swr").Body.String() == "2" })
	if got := up.calls.Load(); got != 2 {
		t.Fatalf("%d upstream calls, want one background revalidation for five stale hits", got)
	}
}

func TestStaleIfErrorServesStaleUnlessMustRevalidate(t *testing.T) {
	for _, tc := range []struct {
		cc        string
		wantStale bool
	}{
		{"max-age=10, stale-if-error=60", true},
		{"max-age=10, stale-if-error=60, must-revalidate", false},
		{"max-age=10", false},
	} {
		t.Run(tc.cc, func(t *testing.T) {
			up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
				if c > 1 {
					http.Error(w, "down", http.StatusBadGateway)
					return
				}
				w.Header().Set("Cache-Control", tc.cc)
				w.Header().Set("ETag", `"1"`)
				fmt.Fprint(w, "good")
			}}
			h := newHarness(t, up, httpflight.Options{})
			h.get("/sie")
			h.clk.Advance(20 * time.Second)
			w := h.get("/sie")
			if stale := w.Code == 200 && w.Body.String() == "good"; stale != tc.wantStale {
				t.Fatalf("served %d %q; want stale: %v", w.Code, w.Body.String(), tc.wantStale)
			}
			if !tc.wantStale && w.Code != http.StatusBadGateway {
				t.Fatalf("served %d, want the upstream's 502", w.Code)
			}
		})
	}
}

func TestRequestNoCacheRevalidatesAndNoStoreBypasses(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/n")
	if w := h.get("/n", "Cache-Control", "no-cache"); w.Body.String() != "2" {
		t.Fatalf("request no-cache: %q, want a new response", w.Body.String())
	}
	if w := h.get("/n"); w.Body.String() != "2" {
		t.Fatalf("after no-cache: %q, want the response it stored", w.Body.String())
	}
	if w := h.get("/n", "Cache-Control", "no-store"); w.Body.String() != "3" {
		t.Fatalf("request no-store: %q", w.Body.String())
	}
	if w := h.get("/n"); w.Body.String() != "2" {
		t.Fatalf("a no-store request replaced the stored response: %q", w.Body.String())
	}
}

// A successful unsafe request invalidates its Location and
// Content-Location on the same origin, not on another.
func TestUnsafeMethodInvalidatesSameOriginLocations(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/b?x=1")
			w.Header().Set("Content-Location", "http://other.example/c")
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("http://example.com/b")
	h.get("http://other.example/c")
	h.do(http.MethodPost, "http://example.com/a")
	if w := h.get("http://example.com/b"); w.Body.String() == "1" {
		t.Fatalf("Location was not invalidated")
	}
	if w := h.get("http://other.example/c"); w.Body.String() != "2" {
		t.Fatalf("a Content-Location of another origin was invalidated: %q", w.Body.String())
	}
	// A failed unsafe request invalidates nothing.
	h.get("http://example.com/d")
	calls := up.calls.Load()
	ok := up.respond
	up.respond = func(c int64, w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) }
	h.do(http.MethodPut, "http://example.com/d")
	up.respond = ok
	if w := h.get("http://example.com/d"); up.calls.Load() != calls+1 || w.Code != 200 {
		t.Fatalf("a failed PUT invalidated /d")
	}
}

func TestHeadersInTheKey(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, r.Header.Get("X-Forwarded-Host"))
	}}
	h := newHarness(t, up, httpflight.Options{KeyHeaders: []string{"x-forwarded-host"}})
	h.get("/k", "X-Forwarded-Host", "evil.example")
	if w := h.get("/k"); w.Body.String() != "" {
		t.Fatalf("a keyed header's response was served without it: %q", w.Body.String())
	}
	if w := h.get("/k", "X-Forwarded-Host", "evil.example"); w.Body.String() != "evil.example" || up.calls.Load() != 2 {
		t.Fatalf("%q after %d calls", w.Body.String(), up.calls.Load())
	}
}

func TestTooLargeBodyIsServedButNotStored(t *testing.T) {
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, strings.Repeat("x", 100))
	}}
	h := newHarness(t, up, httpflight.Options{MaxBody: 10})
	for range 2 {
		if w := h.get("/big"); w.Body.Len() != 100 {
			t.Fatalf("body of %d bytes", w.Body.Len())
		}
	}
	if got := up.calls.Load(); got != 4 {
		t.Fatalf("%d upstream calls; want 2 per request (the load, then the request on its own)", got)
	}
}

func TestInvalidOptionsAreConfigErrors(t *testing.T) {
	h := newHarness(t, http.NotFoundHandler(), httpflight.Options{})
	for name, o := range map[string]httpflight.Options{
		"Cache":      {},
		"KeyHeaders": {Cache: h.cache, KeyHeaders: []string{"bad header"}},
		"MaxBody":    {Cache: h.cache, MaxBody: -1},
		"KeepStale":  {Cache: h.cache, KeepStale: 48 * time.Hour},
	} {
		_, err := httpflight.New(o)
		var ce *httpflight.ConfigError
		if !errors.As(err, &ce) || ce.Field != name {
			t.Errorf("%s: %v, want a *ConfigError on that field", name, err)
		}
	}
}

func TestCodecRoundTripsAndRefusesCorruptOrOversizedData(t *testing.T) {
	r := &httpflight.Response{StatusCode: 200, Header: http.Header{"A": {"1", "2"}}, Body: []byte("body"),
		RequestTime: time.Unix(10, 5), ResponseTime: time.Unix(11, 6), Variant: "accept:x\n"}
	c := httpflight.Codec{MaxBody: 10}
	b, err := c.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Unmarshal(b)
	if err != nil || got.StatusCode != 200 || string(got.Body) != "body" || got.Header.Get("A") != "1" || len(got.Header["A"]) != 2 ||
		!got.RequestTime.Equal(r.RequestTime) || !got.ResponseTime.Equal(r.ResponseTime) || got.Variant != r.Variant {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b {
		if _, err := c.Unmarshal(b[:i]); !errors.Is(err, httpflight.ErrCorrupt) {
			t.Fatalf("a prefix of %d bytes: %v", i, err)
		}
	}
	r.Body = []byte("more than ten bytes")
	if _, err := c.Marshal(r); err == nil {
		t.Fatal("an oversized body was encoded")
	}
	big, _ := httpflight.Codec{}.Marshal(r)
	if _, err := c.Unmarshal(big); !errors.Is(err, httpflight.ErrCorrupt) {
		t.Fatalf("an oversized body was decoded: %v", err)
	}
}

// The Cache's StaleFor serves a response kept past its retention when the
// upstream fails, unless the response forbids serving it stale.
func TestStaleForServesStaleOnFailureUnlessForbidden(t *testing.T) {
	for _, tc := range []struct {
		cc        string
		wantStale bool
	}{
		{"max-age=10", true},
		{"max-age=10, must-revalidate", false},
		{"max-age=10, proxy-revalidate", false},
		{"s-maxage=10", false},
	} {
		t.Run(tc.cc, func(t *testing.T) {
			up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
				if c > 1 {
					http.Error(w, "down", http.StatusBadGateway)
					return
				}
				w.Header().Set("Cache-Control", tc.cc)
				fmt.Fprint(w, "good")
			}}
			h := newHarness(t, up, httpflight.Options{}, func(o *flightcache.Options[*httpflight.Response]) { o.StaleFor = time.Hour })
			h.get("/sf")
			h.clk.Advance(20 * time.Second)
			w := h.get("/sf")
			stale := w.Code == 200 && w.Body.String() == "good"
			if stale != tc.wantStale || (!stale && w.Code < 500) {
				t.Fatalf("served %d %q (%s); want stale: %v", w.Code, w.Body.String(), w.Header().Get("Cache-Status"), tc.wantStale)
			}
		})
	}
}

// The parsing the suite's age-parse, expires-parse and cdn-cache-control
// tests check: an Age list counts its first value, an Expires that is not
// exactly an HTTP-date means "expired", CDN-Cache-Control (RFC 9213)
// overrides Cache-Control unless it is not a valid dictionary.
func TestHeaderParsingDecidesWhetherAResponseIsReused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header []string
		reused bool
	}{
		{"age list", []string{"Cache-Control", "max-age=3600", "Age", "7200, 0"}, false},
		{"age list fresh", []string{"Cache-Control", "max-age=3600", "Age", "0, 7200"}, true},
		{"expires two spaces", []string{"Expires", "Thu, 18  Aug  2050 02:01:18 GMT"}, false},
		{"expires one-digit hour", []string{"Expires", "Thu, 18 Aug 2050 2:01:18 GMT"}, false},
		{"expires valid", []string{"Expires", "Thu, 18 Aug 2050 02:01:18 GMT"}, true},
		{"cdn-cache-control overrides no-store", []string{"CDN-Cache-Control", "max-age=600", "Cache-Control", "no-store"}, true},
		{"cdn-cache-control private", []string{"CDN-Cache-Control", "private", "Cache-Control", "max-age=600"}, false},
		{"cdn-cache-control invalid", []string{"CDN-Cache-Control", "max-age=10000, &&&&&", "Cache-Control", "no-store"}, false},
		{"cdn-cache-control wrong type", []string{"CDN-Cache-Control", `max-age="10000"`, "Cache-Control", "no-store"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tc.header); i += 2 {
					w.Header().Add(tc.header[i], tc.header[i+1])
				}
				fmt.Fprint(w, c)
			}}
			h := newHarness(t, up, httpflight.Options{})
			h.get("/p")
			if reused := h.get("/p").Body.String() == "1"; reused != tc.reused {
				t.Fatalf("reused: %v, want %v", reused, tc.reused)
			}
		})
	}
}

// A protocol switch (WebSocket) goes to the handler with the client's own
// ResponseWriter, which it must hijack; so do requests with a body.
func TestUpgradeAndBodyRequestsReachTheHandlerUntouched(t *testing.T) {
	var direct []bool
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		_, ok := w.(*httptest.ResponseRecorder)
		direct = append(direct, ok)
		w.Header().Set("Cache-Control", "max-age=60")
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/ws", "Upgrade", "websocket", "Connection", "Upgrade")
	req := httptest.NewRequest(http.MethodGet, "/ws", strings.NewReader("body"))
	h.h.ServeHTTP(httptest.NewRecorder(), req)
	if len(direct) != 2 || !direct[0] || !direct[1] {
		t.Fatalf("the handler got the client's writer: %v", direct)
	}
}
