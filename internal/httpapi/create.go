package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"

	"github.com/flightcache/flightcache/internal/product"
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
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", message: "send application/json"})
			return
		}
	}
	var body CreateBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large", message: "the body must be at most 4 KiB"})
			return
		}
		writeError(w, apiError{status: http.StatusBadRequest, code: "invalid_body", message: `the body must be a JSON object {"productId": string, "displayName": string, "priceCents": integer}`})
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, apiError{status: http.StatusBadRequest, code: "invalid_body", message: "the body must hold exactly one JSON object"})
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
		e := classify(err, a.RetryAfter)
		if e.status >= 500 {
			a.Logger.LogAttrs(r.Context(), slog.LevelWarn, "product create failed",
				slog.Int("status", e.status), slog.String("code", e.code), slog.Any("error", err))
		}
		writeError(w, e)
		return
	}
	q := url.Values{"locale": {ref.Locale}, "currency": {ref.Currency}}
	w.Header().Set("Location", "/v1/tenants/"+ref.Tenant+"/products/"+ref.ID+"?"+q.Encode())
	writeJSON(w, http.StatusCreated, out)
}
