package httpapi

import (
	"context"
	"net/http"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// Repricer reprices a whole category of a tenant: product.QueryService.
type Repricer interface {
	Reprice(ctx context.Context, tenant, category string, rp product.Reprice) (product.Repriced, error)
}

// repriceFields are product.Reprice's JSON names, the only keys a reprice
// body may hold.
var repriceFields = []string{"percent", "deltaCents"}

// repriceCategory answers POST /v1/tenants/{tenant}/categories/{category}/reprice:
// 200 with what was committed, 404 category_not_found when the tenant has
// no product in the category, 400 for a bad path or body (exactly one of
// percent and deltaCents, an integer in range).
func (a *api) repriceCategory(w http.ResponseWriter, r *http.Request) {
	tenant, category := r.PathValue("tenant"), r.PathValue("category")
	if err := product.CheckTenant(tenant); err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	if err := product.CheckCategory(category); err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, classify(&product.InvalidError{Field: "query", Reason: "a reprice takes no query parameters"}, a.RetryAfter))
		return
	}
	if !requireJSON(w, r) {
		return
	}
	rp, e := decodeReprice(w, r)
	if e != nil {
		writeError(w, *e)
		return
	}
	if err := rp.Validate(); err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	out, err := a.Repricer.Reprice(r.Context(), tenant, category, rp)
	w.Header().Set("Cache-Status", a.CacheName+"; fwd=method")
	if err != nil {
		a.fail(w, r, "category reprice failed", err)
		return
	}
	w.Header().Set("Cache-Status", a.CacheName+"; fwd=method; detail=invalidated")
	writeJSON(w, http.StatusOK, out)
}

// decodeReprice reads a reprice body as strictly as decodePatch reads a
// PUT's: UTF-8, one JSON object, percent and deltaCents spelled exactly
// so, each at most once, integers, nothing else.
func decodeReprice(w http.ResponseWriter, r *http.Request) (product.Reprice, *apiError) {
	return decodeStrict[product.Reprice](w, r, repriceFields, `{"percent": integer} or {"deltaCents": integer}`)
}
