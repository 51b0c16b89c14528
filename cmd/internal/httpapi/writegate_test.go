package httpapi

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// AuthorizeWrite is asked before a PUT or POST does anything: a refusal
// is a 401 with WWW-Authenticate: Bearer (or a 403 when writes are
// disabled), the creator is never called, and reads are never asked about.
func TestWritesAreAuthorizedBeforeAnythingElse(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	mc := &mapCreator{rows: map[product.Ref]product.Draft{}}
	var verdict error
	asked := 0
	a.h = New(Options{Service: nopService{}, Creator: mc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AuthorizeWrite: func(r *http.Request) error { asked++; return verdict }})
	body := `{"productId":"new-1","displayName":"Kettle","priceCents":4200}`

	verdict = errors.New("no token")
	w := a.do("POST", "/v1/tenants/acme/products", body)
	wantError(t, w, http.StatusUnauthorized, "unauthorized")
	if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q, want Bearer", w.Header().Get("WWW-Authenticate"))
	}
	w = a.do("PUT", "/v1/tenants/acme/products/p-1", `not even JSON`)
	wantError(t, w, http.StatusUnauthorized, "unauthorized") // before the body is looked at

	verdict = ErrWritesDisabled
	w = a.do("POST", "/v1/tenants/acme/products", body)
	wantError(t, w, http.StatusForbidden, "writes_disabled")
	if len(mc.rows) != 0 {
		t.Fatalf("a refused POST created %d rows", len(mc.rows))
	}

	verdict = nil
	if w = a.do("POST", "/v1/tenants/acme/products", body); w.Code != http.StatusCreated {
		t.Fatalf("authorized POST: %d %s", w.Code, w.Body)
	}
	if asked != 4 {
		t.Fatalf("AuthorizeWrite asked %d times, want 4 (once per write)", asked)
	}
}

// The caps' errors are 403s with codes of their own.
func TestCreateLimitsAre403(t *testing.T) {
	for err, code := range map[error]string{product.ErrTenantLimit: "tenant_limit", product.ErrCreateLimit: "create_limit"} {
		e := classify(err, 0)
		if e.status != http.StatusForbidden || e.code != code {
			t.Errorf("classify(%v) = %d %s, want 403 %s", err, e.status, e.code, code)
		}
	}
}
