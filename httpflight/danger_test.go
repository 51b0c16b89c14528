package httpflight_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/httpflight"
)

// The dangers of a shared cache that collapses requests, each test named
// for the bug it keeps out.

// go-chi/stampede keys on the path alone: ?id=1 and ?id=2 collide. The
// query is in the key, in a canonical order.
func TestQueryIsInTheKey_GoChiStampedeKeysOnPathAlone(t *testing.T) {
	up := &counting{respond: func(_ int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "id="+r.URL.Query().Get("id")+" x="+r.URL.Query().Get("x"))
	}}
	h := newHarness(t, up, httpflight.Options{})
	if got := h.get("/item?id=1&x=a").Body.String(); got != "id=1 x=a" {
		t.Fatalf("?id=1: %q", got)
	}
	if got := h.get("/item?id=2&x=a").Body.String(); got != "id=2 x=a" {
		t.Fatalf("?id=2 was served %q", got)
	}
	// The same parameters in another order are the same query.
	w := h.get("/item?x=a&id=1")
	if got := w.Body.String(); got != "id=1 x=a" || up.calls.Load() != 2 {
		t.Fatalf("?x=a&id=1: %q after %d upstream calls, want a hit on ?id=1&x=a", got, up.calls.Load())
	}
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "hit") {
		t.Fatalf("Cache-Status %q, want a hit", cs)
	}
}

// go-chi/stampede collapses and caches POST, and a body-less DELETE shares
// GET's key. Unsafe methods are forwarded every time, never collapsed,
// never stored, and a successful one invalidates the stored GET.
func TestPOSTIsNeverCollapsedNorCachedAndInvalidates_GoChiStampede(t *testing.T) {
	gate := make(chan struct{})
	posts := newBarrier(3)
	up := &counting{respond: func(_ int64, w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			if !posts.wait() {
				t.Errorf("the POSTs did not reach the upstream together")
			}
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprint(w, r.Method)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "v", gate == nil)
	}}
	h := newHarness(t, up, httpflight.Options{})
	gate = nil
	if got := h.get("/doc").Body.String(); got != "vtrue" {
		t.Fatalf("GET: %q", got)
	}
	done := make(chan string, 3)
	for range 3 {
		go func() { done <- h.do(http.MethodPost, "/doc").Body.String() }()
	}
	for range 3 {
		if got := <-done; got != "POST" {
			t.Fatalf("POST answered %q", got)
		}
	}
	if got := up.calls.Load(); got != 4 {
		t.Fatalf("%d upstream calls, want 1 GET and 3 POSTs", got)
	}
	// The POST invalidated the stored GET.
	h.get("/doc")
	if got := up.calls.Load(); got != 5 {
		t.Fatalf("%d upstream calls after the POSTs and a GET, want the GET to go upstream (5)", got)
	}
	// A DELETE is not served the GET's stored response.
	if got := h.do(http.MethodDelete, "/doc").Body.String(); got != "DELETE" {
		t.Fatalf("DELETE was served %q", got)
	}
}

// go-chi/stampede leaves Authorization out of its key and shares the
// response. A response to a request with credentials is stored and
// shared only when it says a shared cache may (public, s-maxage,
// must-revalidate: RFC 9111 §3.5); waiters without those credentials are
// not handed it.
func TestCredentialsResponseIsNotShared_GoChiStampedeAuthorization(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-gate
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "for:"+r.Header.Get("Authorization"))
	}}
	h := newHarness(t, up, httpflight.Options{})
	out := h.herd(5, gate, up, func(i int) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/me", nil)
		if i == 0 {
			req.Header.Set("Authorization", "Bearer alice")
		}
		return req
	})
	for i, w := range out {
		want := "for:"
		if i == 0 {
			want = "for:Bearer alice"
		}
		if got := w.Body.String(); got != want {
			t.Errorf("request %d was served %q, want %q", i, got, want)
		}
	}
	// Nothing of alice's is stored.
	if got := h.get("/me").Body.String(); got != "for:" {
		t.Fatalf("a later request was served %q", got)
	}

	// public opts in.
	up2 := &counting{respond: func(_ int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		fmt.Fprint(w, "shared")
	}}
	h2 := newHarness(t, up2, httpflight.Options{})
	h2.get("/pub", "Authorization", "Bearer bob")
	if w := h2.get("/pub"); w.Body.String() != "shared" || up2.calls.Load() != 1 {
		t.Fatalf("a public response to a request with credentials was not reused (%d calls)", up2.calls.Load())
	}
}

// The herd behind one request whose response turns out private: each
// waiter goes upstream itself, and they do so at once, not one after
// another (varnish-cache#3461 serialises waiters once a response is known
// to be uncacheable).
func TestPrivateResponseGoesUpstreamForEveryWaiterAtOnce_Varnish3461(t *testing.T) {
	const n = 6
	gate := make(chan struct{})
	rest := newBarrier(n - 1)
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			<-gate
		} else if !rest.wait() {
			t.Errorf("the waiters did not go upstream together")
		}
		w.Header().Set("Cache-Control", "private, max-age=60")
		fmt.Fprintf(w, "user=%s", r.Header.Get("X-User"))
	}}
	h := newHarness(t, up, httpflight.Options{})
	out := h.herd(n, gate, up, func(i int) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/account", nil)
		req.Header.Set("X-User", fmt.Sprint(i))
		return req
	})
	for i, w := range out {
		if got, want := w.Body.String(), fmt.Sprintf("user=%d", i); got != want {
			t.Errorf("request %d was served %q, want its own %q", i, got, want)
		}
	}
	if got := up.calls.Load(); got != n {
		t.Fatalf("%d upstream calls, want %d (one each)", got, n)
	}
	if got := h.get("/account", "X-User", "z").Body.String(); got != "user=z" {
		t.Fatalf("a private response was stored: %q", got)
	}
}

// A response that sets a cookie is someone's session: never stored, never
// handed to waiters.
func TestSetCookieResponseIsNeverShared(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			<-gate
		}
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Set-Cookie", fmt.Sprintf("session=%d", c))
		fmt.Fprint(w, "hello")
	}}
	h := newHarness(t, up, httpflight.Options{})
	out := h.herd(4, gate, up, func(int) *http.Request { return httptest.NewRequest(http.MethodGet, "/login", nil) })
	seen := map[string]bool{}
	for i, w := range out {
		c := w.Header().Get("Set-Cookie")
		if c == "" || seen[c] {
			t.Errorf("request %d got cookie %q, which another request got too", i, c)
		}
		seen[c] = true
	}
	h.get("/login")
	if got := up.calls.Load(); got != 5 {
		t.Fatalf("%d upstream calls, want 5: nothing with Set-Cookie is stored", got)
	}
}

// no-store: never stored, never handed to a waiter.
func TestNoStoreResponseIsNeverStoredNorShared(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			<-gate
		}
		w.Header().Set("Cache-Control", "no-store, max-age=60")
		fmt.Fprint(w, c)
	}}
	h := newHarness(t, up, httpflight.Options{})
	out := h.herd(4, gate, up, func(int) *http.Request { return httptest.NewRequest(http.MethodGet, "/x", nil) })
	seen := map[string]bool{}
	for _, w := range out {
		seen[w.Body.String()] = true
	}
	if len(seen) != 4 {
		t.Fatalf("the waiters were served %v; want 4 different responses", seen)
	}
	h.get("/x")
	if got := up.calls.Load(); got != 5 {
		t.Fatalf("%d upstream calls, want 5", got)
	}
}

// Vary variants are neither mixed (a request served another variant) nor
// served one after another: the waiters of another variant share one load
// of their own.
func TestVaryVariantsNeitherMixedNorSerialised_Varnish3461(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			<-gate
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprint(w, "lang="+r.Header.Get("Accept-Language"))
	}}
	h := newHarness(t, up, httpflight.Options{})
	langs := []string{"en", "de", "en", "de", "fr", "de", "en", "fr"}
	out := h.herd(len(langs), gate, up, func(i int) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/page", nil)
		req.Header.Set("Accept-Language", langs[i])
		return req
	})
	for i, w := range out {
		if got := w.Body.String(); got != "lang="+langs[i] {
			t.Errorf("request %d (%s) was served %q", i, langs[i], got)
		}
	}
	if got := up.calls.Load(); got != 3 {
		t.Fatalf("%d upstream calls, want 3: one per variant", got)
	}
	for _, l := range []string{"de", "fr", "en"} {
		if got := h.get("/page", "Accept-Language", l).Body.String(); got != "lang="+l {
			t.Fatalf("stored variant for %s: %q", l, got)
		}
	}
	if got := up.calls.Load(); got != 3 {
		t.Fatalf("%d upstream calls after one request per variant, want every variant stored (3)", got)
	}
}

// The cap on waiters: beyond the Cache's MaxWaiters, a request is answered
// 503 with Retry-After at once instead of waiting, and the upstream sees
// one request.
func TestWaiterCapAnswers503BeyondIt(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		<-gate
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "ok")
	}}
	h := newHarness(t, up, httpflight.Options{}, func(o *flightcache.Options[*httpflight.Response]) { o.MaxWaiters = 3 })
	done := make(chan *httptest.ResponseRecorder, 10)
	for range 10 {
		go func() { done <- h.get("/hot") }()
	}
	// Those beyond the cap are answered while the load is still held.
	var rejected, ok int
	for rejected < 7 {
		w := <-done
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("answered before the load ended: %d %q", w.Code, w.Body.String())
		}
		rejected++
	}
	close(gate)
	for range 3 {
		if w := <-done; w.Code == http.StatusOK && w.Body.String() == "ok" {
			ok++
		}
	}
	if ok != 3 || up.calls.Load() != 1 {
		t.Fatalf("%d served, %d upstream calls; want 3 and 1", ok, up.calls.Load())
	}
}

// One transient error is not handed to every waiter: the waiters of a
// failed load share one more upstream request, and get its answer.
func TestOneTransientErrorIsNotAmplifiedToEveryWaiter(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			<-gate
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "ok")
	}}
	h := newHarness(t, up, httpflight.Options{})
	out := h.herd(8, gate, up, func(int) *http.Request { return httptest.NewRequest(http.MethodGet, "/flaky", nil) })
	var errs int
	for _, w := range out {
		switch {
		case w.Code == http.StatusServiceUnavailable:
			errs++
		case w.Code != http.StatusOK || w.Body.String() != "ok":
			t.Errorf("served %d %q", w.Code, w.Body.String())
		}
	}
	if errs != 1 {
		t.Errorf("%d requests got the error, want only the one whose request failed", errs)
	}
	if got := up.calls.Load(); got != 2 {
		t.Fatalf("%d upstream calls, want 2: the failed one and one retry shared by the waiters", got)
	}
}

// The timeout on waiters: a request that waits longer than WaitTimeout is
// answered 504, and the load it waited for goes on for the others.
func TestWaiterTimeoutAnswers504AndTheLoadGoesOn(t *testing.T) {
	release := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "late")
	}}
	h := newHarness(t, up, httpflight.Options{WaitTimeout: 20 * time.Millisecond})
	w := h.get("/slow")
	if w.Code != http.StatusGatewayTimeout || !strings.Contains(w.Header().Get("Cache-Status"), "detail=wait-timeout") {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Cache-Status"))
	}
	close(release)
	waitFor(t, "the load to be stored", func() bool { return h.get("/slow").Body.String() == "late" })
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("%d upstream calls, want the one load", got)
	}
}

// A failed validation is shared: the requests that waited for it get its
// answer, not one upstream request each.
func TestFailedValidationIsNotAmplifiedToEveryWaiter(t *testing.T) {
	gate := make(chan struct{})
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		if c == 1 {
			w.Header().Set("Cache-Control", "max-age=10")
			w.Header().Set("ETag", `"1"`)
			fmt.Fprint(w, "v1")
			return
		}
		if c == 2 {
			<-gate
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/v")
	h.clk.Advance(time.Minute)
	out := h.herd(6, gate, up, func(int) *http.Request { return httptest.NewRequest(http.MethodGet, "/v", nil) })
	for i, w := range out {
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("request %d: %d", i, w.Code)
		}
	}
	if got := up.calls.Load(); got != 2 {
		t.Fatalf("%d upstream calls, want 2: the load and one shared validation", got)
	}
}

// A validation whose new response turns out private is not handed to the
// requests that waited for it: each goes upstream itself, at once.
func TestPrivateResponseToAValidationIsNotShared(t *testing.T) {
	gate := make(chan struct{})
	rest := newBarrier(4)
	up := &counting{respond: func(c int64, w http.ResponseWriter, r *http.Request) {
		switch {
		case c == 1:
			w.Header().Set("Cache-Control", "max-age=10")
			w.Header().Set("ETag", `"1"`) // kept past its freshness, for validation
			fmt.Fprint(w, "public")
			return
		case c == 2:
			<-gate
		case !rest.wait():
			t.Errorf("the waiters did not go upstream together")
		}
		w.Header().Set("Cache-Control", "private, max-age=60")
		fmt.Fprint(w, "for "+r.Header.Get("X-User"))
	}}
	h := newHarness(t, up, httpflight.Options{})
	h.get("/acct")
	h.clk.Advance(time.Minute)
	out := h.herd(5, gate, up, func(i int) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/acct", nil)
		req.Header.Set("X-User", fmt.Sprint(i))
		return req
	})
	for i, w := range out {
		if got, want := w.Body.String(), fmt.Sprintf("for %d", i); got != want {
			t.Errorf("request %d was served %q, want %q", i, got, want)
		}
	}
}
