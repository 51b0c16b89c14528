package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// fakeRepricer knows one category per tenant and records the reprices it
// was asked for.
type fakeRepricer struct {
	mu    sync.Mutex
	asked []product.Reprice
}

func (f *fakeRepricer) Reprice(ctx context.Context, tenant, category string, rp product.Reprice) (product.Repriced, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, rp)
	if tenant != "acme" || category != "audio" {
		return product.Repriced{}, product.ErrCategoryNotFound
	}
	return product.Repriced{Tenant: tenant, Category: category, Rows: 18, Products: 2, Revision: 3}, nil
}

func newRepriceAPI(t *testing.T, authorize func(*http.Request) error) (*testAPI, *fakeRepricer) {
	a := newTestAPI(t, apiConfig{})
	fr := &fakeRepricer{}
	a.h = New(Options{Service: nopService{}, Repricer: fr, AuthorizeWrite: authorize, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return a, fr
}

const reprice = "/v1/tenants/acme/categories/audio/reprice"

func TestRepriceAnswersWhatWasCommitted(t *testing.T) {
	a, fr := newRepriceAPI(t, nil)
	for _, body := range []string{`{"percent": 10}`, `{"deltaCents": -250}`} {
		w := a.do("POST", reprice, body, "Content-Type", "application/json")
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", body, w.Code, w.Body)
		}
		var got product.Repriced
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Rows != 18 || got.Products != 2 || got.Category != "audio" || got.Tenant != "acme" {
			t.Fatalf("body %s (%v)", w.Body, err)
		}
		if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "detail=invalidated") {
			t.Fatalf("Cache-Status %q, want detail=invalidated", cs)
		}
	}
	if len(fr.asked) != 2 || *fr.asked[0].Percent != 10 || fr.asked[0].DeltaCents != nil || *fr.asked[1].DeltaCents != -250 {
		t.Fatalf("reprices asked: %+v", fr.asked)
	}
}

func TestRepriceOfAnUnknownCategoryIs404(t *testing.T) {
	a, _ := newRepriceAPI(t, nil)
	w := a.do("POST", "/v1/tenants/acme/categories/toys/reprice", `{"percent": 5}`)
	wantError(t, w, http.StatusNotFound, "category_not_found")
}

// A bad body or path is a typed 400 (or 413, 415, 405), and the repricer
// is never asked.
func TestRepriceRefusesBadRequestsBeforeTheRepricer(t *testing.T) {
	a, fr := newRepriceAPI(t, nil)
	cases := []struct {
		target, body, ctype string
		status              int
		code                string
	}{
		{reprice, `{}`, "", 400, "invalid_body"},
		{reprice, `{"percent": 5, "deltaCents": 5}`, "", 400, "invalid_body"},
		{reprice, `{"percent": 0}`, "", 400, "invalid_percent"},
		{reprice, `{"percent": 5000}`, "", 400, "invalid_percent"},
		{reprice, `{"deltaCents": 0}`, "", 400, "invalid_deltaCents"},
		{reprice, `{"percent": 1.5}`, "", 400, "invalid_body"},
		{reprice, `{"percent": "5"}`, "", 400, "invalid_body"},
		{reprice, `{"percent": 5, "percent": 6}`, "", 400, "invalid_body"},
		{reprice, `{"Percent": 5}`, "", 400, "invalid_body"},
		{reprice, `{"percent": 5, "extra": 1}`, "", 400, "invalid_body"},
		{reprice, `{"percent": 5} {}`, "", 400, "invalid_body"},
		{reprice, `[5]`, "", 400, "invalid_body"},
		{reprice, "\xff", "", 400, "invalid_body"},
		{reprice, `{"percent": 5}`, "text/plain", 415, "unsupported_media_type"},
		{reprice, `{"percent": ` + strings.Repeat(" ", 5000) + `5}`, "", 413, "body_too_large"},
		{reprice + "?dry=1", `{"percent": 5}`, "", 400, "invalid_query"},
		{"/v1/tenants/ACME/categories/audio/reprice", `{"percent": 5}`, "", 400, "invalid_tenant"},
		{"/v1/tenants/acme/categories/Audio/reprice", `{"percent": 5}`, "", 400, "invalid_category"},
		{"/v1/tenants/acme/categories/-x/reprice", `{"percent": 5}`, "", 400, "invalid_category"},
	}
	for _, c := range cases {
		hdr := []string{}
		if c.ctype != "" {
			hdr = append(hdr, "Content-Type", c.ctype)
		}
		w := a.do("POST", c.target, c.body, hdr...)
		if w.Code != c.status {
			t.Fatalf("POST %s %q: %d %s, want %d %s", c.target, c.body, w.Code, w.Body, c.status, c.code)
		}
		wantError(t, w, c.status, c.code)
	}
	w := a.do("GET", reprice, "")
	wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := w.Header().Get("Allow"); allow != "POST" {
		t.Fatalf("Allow %q, want POST", allow)
	}
	if len(fr.asked) != 0 {
		t.Fatalf("the repricer was asked %d times for refused requests", len(fr.asked))
	}
}

// A reprice is a write: refused without the token (401) or on an instance
// that takes no writes (403), before its body is read.
func TestRepriceNeedsTheWriteToken(t *testing.T) {
	var verdict error
	a, fr := newRepriceAPI(t, func(*http.Request) error { return verdict })
	verdict = errors.New("no token")
	w := a.do("POST", reprice, `not even JSON`)
	wantError(t, w, http.StatusUnauthorized, "unauthorized")
	if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q, want Bearer", w.Header().Get("WWW-Authenticate"))
	}
	verdict = ErrWritesDisabled
	wantError(t, a.do("POST", reprice, `{"percent": 5}`), http.StatusForbidden, "writes_disabled")
	if len(fr.asked) != 0 {
		t.Fatalf("the repricer was asked %d times for unauthorized requests", len(fr.asked))
	}
	verdict = nil
	if w := a.do("POST", reprice, `{"percent": 5}`); w.Code != http.StatusOK {
		t.Fatalf("authorized reprice: %d %s", w.Code, w.Body)
	}
}

// Without a Repricer the route does not exist.
func TestRepriceRouteNeedsARepricer(t *testing.T) {
	a, _ := newCreateAPI(t)
	wantError(t, a.do("POST", reprice, `{"percent": 5}`), http.StatusNotFound, "no_route")
}
