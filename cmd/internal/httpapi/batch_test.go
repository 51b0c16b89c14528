package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

const list = "/v1/tenants/acme/products"

func decodeList(t *testing.T, body []byte) ListBody {
	t.Helper()
	var got ListBody
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return got
}

func TestBatchGetReturnsTheSingleGetsObjectsAndTheMissingIDs(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	single := a.do("GET", p1+"?locale=de-DE&currency=EUR", "")
	w := a.do("GET", list+"?ids=p-00002,p-00001,nope&locale=de-de&currency=eur", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	got := decodeList(t, w.Body.Bytes())
	if len(got.Products) != 2 || got.Products[0] != catalog.Row("acme", 2, "de-DE", "EUR") || !slices.Equal(got.Missing, []string{"nope"}) {
		t.Fatalf("body = %+v", got)
	}
	// The same JSON object as the single GET, byte for byte.
	var raw struct {
		Products []json.RawMessage `json:"products"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(single.Body.String()); string(raw.Products[1]) != want {
		t.Fatalf("batch item %s differs from the single GET's %s", raw.Products[1], want)
	}
	if h := w.Header().Get(OutcomesHeader); h != "hit_local=1, loaded=2" {
		t.Fatalf("%s = %q, want hit_local=1, loaded=2", OutcomesHeader, h)
	}
	w = a.do("GET", list+"?ids=p-00002,p-00001,nope&locale=de-DE&currency=EUR", "")
	if h := w.Header().Get(OutcomesHeader); h != "hit_local=2, negative_hit=1" {
		t.Fatalf("second batch %s = %q", OutcomesHeader, h)
	}
}

func TestBatchGetWithNothingFoundAnswersEmptyArrays(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("GET", "/v1/tenants/nobody/products?ids=x", "")
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"products":[],"missing":["x"]}` {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

func TestBatchGetValidatesEveryIDLikeTheSingleGet(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	many := make([]string, product.MaxBatchIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("p-%05d", i)
	}
	for _, tc := range []struct{ target, code string }{
		{list, "invalid_ids"},
		{list + "?ids=", "invalid_ids"},
		{list + "?ids=" + strings.Join(many, ","), "invalid_ids"},
		{list + "?ids=p-00001,,p-00002", "invalid_id"},
		{list + "?ids=p-00001,p.2", "invalid_id"},
		{list + "?ids=" + strings.Repeat("x", 65), "invalid_id"},
		{list + "?ids=a&ids=b", "invalid_query"},
		{list + "?IDS=a", "invalid_query"},
		{list + "?ids=a&LOCALE=de-DE", "invalid_query"},
		{list + "?ids=a&id=b", "invalid_query"},
		{list + "?ids=a&locale=en_US", "invalid_locale"},
		{list + "?ids=a&currency=US", "invalid_currency"},
		{"/v1/tenants/ACME/products?ids=a", "invalid_tenant"},
	} {
		wantError(t, a.do("GET", tc.target, ""), http.StatusBadRequest, tc.code)
	}
	if q := a.counted.Queries(); q != 0 {
		t.Fatalf("%d origin queries for invalid requests", q)
	}
	w := a.do("GET", list+"?ids="+strings.Join(many[:product.MaxBatchIDs], ","), "")
	if w.Code != http.StatusOK {
		t.Fatalf("%d ids: status %d %s", product.MaxBatchIDs, w.Code, w.Body)
	}
	w = a.do("POST", list+"?ids=a", "")
	wantError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestBatchGetAsksForARepeatedIDOnce(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	w := a.do("GET", list+"?ids=p-00003,p-00003", "")
	got := decodeList(t, w.Body.Bytes())
	if w.Code != 200 || len(got.Products) != 1 || a.counted.Rows() != 1 {
		t.Fatalf("%d %s after %d origin rows", w.Code, w.Body, a.counted.Rows())
	}
}

func TestBatchGetOriginFailureIsA502(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.repo.get = func(ctx context.Context, ref product.Ref, next func() (product.Product, error)) (product.Product, error) {
		return product.Product{}, errors.New("db down")
	}
	w := a.do("GET", list+"?ids=p-00001,p-00002", "")
	wantError(t, w, http.StatusBadGateway, "origin_error")
	if h := w.Header().Get(OutcomesHeader); h != "load_failed=2" {
		t.Fatalf("%s = %q", OutcomesHeader, h)
	}
}
