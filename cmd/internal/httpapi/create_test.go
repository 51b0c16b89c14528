package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// mapCreator is a Creator over a map, recording what it was asked.
type mapCreator struct {
	mu   sync.Mutex
	rows map[product.Ref]product.Draft
}

func (m *mapCreator) Create(ctx context.Context, ref product.Ref, d product.Draft) (product.Product, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[ref]; ok {
		return product.Product{}, product.ErrExists
	}
	m.rows[ref] = d
	return product.Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency,
		DisplayName: d.DisplayName, PriceCents: d.PriceCents}, nil
}

func newCreateAPI(t *testing.T) (*testAPI, *mapCreator) {
	a := newTestAPI(t, apiConfig{})
	mc := &mapCreator{rows: map[product.Ref]product.Draft{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a.h = New(Options{Service: nopService{}, Creator: mc, Logger: quiet})
	return a, mc
}

// nopService is a Service the create tests never reach (calling it would
// panic on the nil interface).
type nopService struct{ Service }

func TestPostCreatesOnceThenConflicts(t *testing.T) {
	a, mc := newCreateAPI(t)
	body := `{"productId":"new-1","displayName":"Kettle","priceCents":4200}`
	w := a.do("POST", "/v1/tenants/acme/products?locale=de-de&currency=eur", body, "Content-Type", "application/json")
	if w.Code != http.StatusCreated {
		t.Fatalf("POST %d: %s", w.Code, w.Body)
	}
	var got product.Product
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.ProductID != "new-1" || got.Locale != "de-DE" || got.Currency != "EUR" {
		t.Fatalf("POST body %s (%v)", w.Body, err)
	}
	if loc := w.Header().Get("Location"); loc != "/v1/tenants/acme/products/new-1?currency=EUR&locale=de-DE" {
		t.Fatalf("Location %q", loc)
	}
	if len(mc.rows) != 1 {
		t.Fatalf("%d rows created, want 1", len(mc.rows))
	}
	w = a.do("POST", "/v1/tenants/acme/products?locale=de-DE&currency=EUR", body)
	wantError(t, w, http.StatusConflict, "exists")
}

func TestPostRejectsBadInputBeforeCreating(t *testing.T) {
	a, mc := newCreateAPI(t)
	for _, tc := range []struct {
		target, body, ctype string
		status              int
		code                string
	}{
		{"/v1/tenants/acme/products", `{"productId":"a b","displayName":"x","priceCents":1}`, "", 400, "invalid_id"},
		{"/v1/tenants/ACME/products", `{"productId":"a","displayName":"x","priceCents":1}`, "", 400, "invalid_tenant"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"","priceCents":1}`, "", 400, "invalid_displayName"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"x","priceCents":-1}`, "", 400, "invalid_priceCents"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"x","priceCents":1,"extra":1}`, "", 400, "invalid_body"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"x","priceCents":1}{}`, "", 400, "invalid_body"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"x","PRICECENTS":1}`, "", 400, "invalid_body"},
		{"/v1/tenants/acme/products", `{"productId":"a","productId":"b","displayName":"x","priceCents":1}`, "", 400, "invalid_body"},
		{"/v1/tenants/acme/products", "{\"productId\":\"a\",\"displayName\":\"\xff\",\"priceCents\":1}", "", 400, "invalid_body"},
		{"/v1/tenants/acme/products", `{"productId":"a","displayName":"x","priceCents":1}`, "text/plain", 415, "unsupported_media_type"},
		{"/v1/tenants/acme/products?LOCALE=de-DE", `{"productId":"a","displayName":"x","priceCents":1}`, "", 400, "invalid_query"},
		{"/v1/tenants/acme/products?locale=de-DE&locale=fr-FR", `{"productId":"a","displayName":"x","priceCents":1}`, "", 400, "invalid_query"},
		{"/v1/tenants/acme/products?productId=b", `{"productId":"a","displayName":"x","priceCents":1}`, "", 400, "invalid_query"},
	} {
		var hdr []string
		if tc.ctype != "" {
			hdr = []string{"Content-Type", tc.ctype}
		}
		wantError(t, a.do("POST", tc.target, tc.body, hdr...), tc.status, tc.code)
	}
	if len(mc.rows) != 0 {
		t.Fatalf("%d rows created from bad input", len(mc.rows))
	}
	w := a.do("DELETE", "/v1/tenants/acme/products", "")
	wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := w.Header().Get("Allow"); allow != "GET, HEAD, POST" {
		t.Fatalf("Allow %q, want GET, HEAD, POST", allow)
	}
}

func TestPostNotAllowedWithoutCreator(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("POST", "/v1/tenants/acme/products", `{"productId":"a","displayName":"x","priceCents":1}`)
	wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := w.Header().Get("Allow"); allow != "GET, HEAD" {
		t.Fatalf("Allow %q, want GET, HEAD", allow)
	}
}
