package productd

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/internal/testenv"
)

// A reprice on A reaches B through the bus: B, which holds a product of
// the category in memory, read alone and in a batch, serves the new
// prices within busUpBound of the reprice's answer (its copies would live
// 5m); a product of another category stays in B's memory. The endpoint
// wants the write token and answers 404 for a category without products;
// the metrics count what happened.
func TestEndToEndRepriceOnOneInstanceShowsOnAnother(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	ps := startInstances(t, 2, busArgs(testenv.PostgresDB(t), srv.Addr, "-redis-timeout", redisTimeoutUnderLoad, steadyBus[0], steadyBus[1])...)
	a, b := ps[0], ps[1]
	logsOnFailure(t, a, b)
	awaitBus(t, a, b)
	c := herdClient(4)
	defer c.CloseIdleConnections()

	alone := variant{"acme", product.ProductID(3), "de-DE", "EUR"}
	other := variant{"acme", product.ProductID(4), "de-DE", "EUR"}
	category := product.CategoryOf(alone.id)
	list := "/v1/tenants/acme/products?ids=" + product.ProductID(3+len(product.Categories)) + "&locale=en-US&currency=USD"
	m := newMonotonic(t)
	old := makeHot(t, c, b, alone, m, 0)
	makeHot(t, c, b, other, m, 0)
	listPrice := func() (int64, string) {
		t.Helper()
		r := get(c, b.url+list)
		var body struct {
			Products []product.Product `json:"products"`
		}
		if r.err != nil || r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &body) != nil || len(body.Products) != 1 {
			t.Fatalf("GET %s: %v %d %s", list, r.err, r.status, r.body)
		}
		return body.Products[0].PriceCents, r.cache
	}
	oldList, _ := listPrice()
	listPrice() // from memory now

	endpoint := a.url + "/v1/tenants/acme/categories/" + category + "/reprice"
	resp, err := c.Post(endpoint, "application/json", strings.NewReader(`{"deltaCents": 500}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a reprice without the token: %d, want 401", resp.StatusCode)
	}
	resp, err = postJSON(c, a.url+"/v1/tenants/acme/categories/no-such/reprice", `{"deltaCents": 500}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a reprice of an empty category: %d, want 404", resp.StatusCode)
	}

	resp, err = postJSON(c, endpoint, `{"deltaCents": 500}`)
	if err != nil {
		t.Fatal(err)
	}
	var out product.Repriced
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	done := time.Now()
	// -seed-products 20: products 3, 11 and 19 are in the category.
	if err != nil || resp.StatusCode != http.StatusOK || out.Products != 3 || out.Rows != 27 {
		t.Fatalf("reprice: %d %+v %v; want 3 products, 27 rows", resp.StatusCode, out, err)
	}
	for {
		r := getRow(t, c, b.url+alone.path())
		m.see(1, alone, r)
		if r.price == old.price+500 {
			break
		}
		if time.Since(done) > busUpBound {
			t.Fatalf("B still serves price %d (%s) %v after the reprice returned", r.price, r.cache, busUpBound)
		}
	}
	for {
		p, cache := listPrice()
		if p == oldList+500 {
			break
		}
		if time.Since(done) > busUpBound {
			t.Fatalf("B's batch read still serves price %d (%s) %v after the reprice returned", p, cache, busUpBound)
		}
	}
	if r := getRow(t, c, b.url+other.path()); !r.memoryHit() {
		t.Fatalf("the reprice dropped a product of another category from B's memory: %s", r.cache)
	}
	for sample, want := range map[string]float64{
		RepricesMetric + `{result="ok"}`:                             1,
		RepricesMetric + `{result="not_found"}`:                      1,
		RepricedProductsMetric:                                       3,
		TagInvalidationsMetric + `{kind="category",result="ok"}`:     1,
		TagInvalidationsMetric + `{kind="list",result="ok"}`:         1,
		TagInvalidationsMetric + `{kind="category",result="failed"}`: 0,
		InvalidationFailuresMetric:                                   0,
	} {
		if got := metric(t, c, a.url, sample); got != want {
			t.Errorf("A's %s = %v, want %v", sample, got, want)
		}
	}
}
