package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// Creator creates products: productd's creation path, which tells its
// penetration guard before it acknowledges.
type Creator interface {
	Create(ctx context.Context, ref product.Ref, d product.Draft) (product.Product, error)
}

// CreateBody is the JSON body of POST /v1/tenants/{tenant}/products.
type CreateBody struct {
	ProductID   string `json:"productId"`
	DisplayName string `json:"displayName"`
	PriceCents  int64  `json:"priceCents"`
}

// createProduct answers 201 with the row and its Location once the row is
// committed (and the Creator has done its part), 409 when it exists.
func (a *api) createProduct(w http.ResponseWriter, r *http.Request) {
	if !requireJSON(w, r) {
		return
	}
	body, e := decodeCreate(w, r)
	if e != nil {
		writeError(w, *e)
		return
	}
	ref, err := ParseRef(r.PathValue("tenant"), body.ProductID, r.URL.RawQuery)
	if err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	d := product.Draft{DisplayName: body.DisplayName, PriceCents: body.PriceCents}
	if err := d.Validate(); err != nil {
		writeError(w, classify(err, a.RetryAfter))
		return
	}
	out, err := a.Creator.Create(r.Context(), ref, d)
	if err != nil {
		a.fail(w, r, "product create failed", err)
		return
	}
	q := url.Values{"locale": {ref.Locale}, "currency": {ref.Currency}}
	w.Header().Set("Location", "/v1/tenants/"+ref.Tenant+"/products/"+ref.ID+"?"+q.Encode())
	writeJSON(w, http.StatusCreated, out)
}

// createFields are CreateBody's JSON names.
var createFields = []string{"productId", "displayName", "priceCents"}

// decodeCreate reads a POST body as strictly as decodePatch reads a PUT's:
// UTF-8, one JSON object, each of CreateBody's keys spelled exactly so and
// at most once, nothing else.
func decodeCreate(w http.ResponseWriter, r *http.Request) (CreateBody, *apiError) {
	return decodeStrict[CreateBody](w, r, createFields, `{"productId": string, "displayName": string, "priceCents": integer}`)
}

// checkKeys walks the top-level object's keys: each must be one of
// fields, exactly, and appear once. Malformed JSON is left for the decoder
// to report.
func checkKeys(body []byte, fields []string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := t.(string)
		if !slices.Contains(fields, k) {
			return errors.New("unknown field; the fields are " + `"` + strings.Join(fields, `", "`) + `", spelled exactly so`)
		}
		if seen[k] {
			return errors.New("each field may appear once")
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}
