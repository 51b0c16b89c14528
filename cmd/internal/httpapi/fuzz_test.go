package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"
)

var (
	idRe     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	tenantRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
)

// FuzzProductRequest sends arbitrary tenants, IDs and query strings through
// the whole handler: no input may panic (Recover would turn a panic into a
// 500, which fails the test), every response is JSON, and input the
// validator refuses gets a 400 and never reaches the origin. The id and
// tenant are also checked against an independent regular expression.
func FuzzProductRequest(f *testing.F) {
	f.Add("acme", "p-00001", "locale=en-US&currency=USD")
	f.Add("acme", "p-00001", "")
	f.Add("acme", "nope", "locale=de-de&currency=eur")
	f.Add("ACME", "p-1", "locale=en-US")
	f.Add("acme", "..", "")
	f.Add("acme", ".", "x=1")
	f.Add("a/b", "p", "")
	f.Add("acme", "p%2F1", "currency=%zz")
	f.Add("acme", "p1", "locale=en-US&locale=en-US")
	f.Add("acme", "\x00", "locale=\xff")
	f.Add("acme", "p1", "locale=zh-Hant-TW-1996&currency=twd")
	f.Add("acme", "p1", ";;;&&&==")
	a := newTestAPI(f, apiConfig{}) // shared: the cache must survive every input
	f.Fuzz(func(t *testing.T, tenant, id, rawQuery string) {
		if tenant == "" || id == "" {
			t.Skip("an empty segment is another route, not a product request")
		}
		u, err := url.Parse("/v1/tenants/" + url.PathEscape(tenant) + "/products/" + url.PathEscape(id))
		if err != nil {
			t.Skip()
		}
		u.RawQuery = rawQuery
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = u
		req.RequestURI = u.RequestURI()
		before := a.counted.Queries()
		w := httptest.NewRecorder()
		a.h.ServeHTTP(w, req)

		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("non-JSON body %q", w.Body)
		}
		_, perr := ParseRef(tenant, id, rawQuery)
		switch {
		case perr != nil || !idRe.MatchString(id) || !tenantRe.MatchString(tenant):
			if w.Code != http.StatusBadRequest {
				t.Fatalf("tenant %q id %q query %q: status %d, want 400 (parse error %v); body %s", tenant, id, rawQuery, w.Code, perr, w.Body)
			}
			if a.counted.Queries() != before {
				t.Fatalf("invalid input reached the origin")
			}
		case w.Code != http.StatusOK && w.Code != http.StatusNotFound:
			t.Fatalf("tenant %q id %q query %q: valid input got %d: %s", tenant, id, rawQuery, w.Code, w.Body)
		}
	})
}

// FuzzBatchRequest sends arbitrary tenants and query strings to the batch
// endpoint: no input may panic, every response is JSON, input
// ParseSelection refuses gets a 400 without reaching the origin, and every
// id it accepts matches the single endpoint's id pattern.
func FuzzBatchRequest(f *testing.F) {
	f.Add("acme", "ids=p-00001,p-00002&locale=en-US&currency=USD")
	f.Add("acme", "ids=")
	f.Add("acme", "ids=a,,b")
	f.Add("acme", "ids=a,a,a")
	f.Add("acme", "ids=a&ids=b")
	f.Add("ACME", "ids=a")
	f.Add("acme", "ids=%zz")
	f.Add("acme", "ids=a,b&locale=\xff")
	a := newTestAPI(f, apiConfig{})
	f.Fuzz(func(t *testing.T, tenant, rawQuery string) {
		if tenant == "" {
			t.Skip("an empty segment is another route")
		}
		u, err := url.Parse("/v1/tenants/" + url.PathEscape(tenant) + "/products")
		if err != nil {
			t.Skip()
		}
		u.RawQuery = rawQuery
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = u
		req.RequestURI = u.RequestURI()
		before := a.counted.Queries()
		w := httptest.NewRecorder()
		a.h.ServeHTTP(w, req)
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("non-JSON body %q", w.Body)
		}
		sel, perr := ParseSelection(tenant, rawQuery)
		if perr != nil {
			if w.Code != http.StatusBadRequest || a.counted.Queries() != before {
				t.Fatalf("tenant %q query %q: refused (%v) but status %d, origin queries %d → %d", tenant, rawQuery, perr, w.Code, before, a.counted.Queries())
			}
			return
		}
		if len(sel.IDs) == 0 || len(sel.IDs) > 100 || !tenantRe.MatchString(tenant) {
			t.Fatalf("accepted %d ids for tenant %q", len(sel.IDs), tenant)
		}
		for _, id := range sel.IDs {
			if !idRe.MatchString(id) {
				t.Fatalf("accepted id %q", id)
			}
		}
		if w.Code != http.StatusOK {
			t.Fatalf("tenant %q query %q: valid input got %d: %s", tenant, rawQuery, w.Code, w.Body)
		}
	})
}
