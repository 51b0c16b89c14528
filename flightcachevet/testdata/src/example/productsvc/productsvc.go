// Package productsvc is a small product service with each mistake that
// flightcachevet catches, as a reviewer would meet them.
package productsvc

import (
	"context"
	"fmt"

	"web"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/key"
	"github.com/flightcache/flightcache/singleflight"
)

type Product struct {
	ID, Tenant, Name string
	Price, Views     int
}

// Origin is the database.
type Origin interface {
	Product(ctx context.Context, tenant, id string) (*Product, error)
	Price(ctx context.Context, id string) (int, error)
}

type Service struct {
	db       Origin
	products *flightcache.Cache[*Product]
	prices   *singleflight.Group[string, int]
}

var productKey = key.New("product")

func New(db Origin) (*Service, error) {
	c, err := flightcache.New(flightcache.Options[*Product]{Name: "products"})
	if err != nil {
		return nil, err
	}
	return &Service{db: db, products: c, prices: singleflight.New[string, int]()}, nil
}

// Product serves GET /products/{id}.
func (s *Service) Product(w web.ResponseWriter, r *web.Request) {
	ctx := r.Context()
	tenant, id := r.Header["X-Tenant"], r.PathValue("id")

	// Mistake 3: the key is built by hand, and the tenant is left out.
	p, err := s.products.Get(ctx, "product:"+id, func(context.Context) (*Product, error) { // want `cache key built by hand with \+`
		// Mistake 1: the request's ctx instead of the loader's own.
		return s.db.Product(ctx, tenant, id) // want `loader passed to Cache.Get uses ctx from the enclosing function instead of its own context parameter`
	})
	if err != nil {
		web.Error(w, err.Error(), 502)
		return
	}
	// Mistake 4: counting views on the shared value.
	p.Views++ // want `write through the value Get returned: without Options.Clone the Cache hands this same value to every caller`
	fmt.Fprintln(w, p.Name, p.Views)
}

// Price serves GET /prices/{id}.
func (s *Service) Price(w web.ResponseWriter, r *web.Request) {
	id := r.PathValue("id")
	// Mistake 2: a Group per request coalesces nothing.
	g := singleflight.New[string, int]() // want `singleflight.Group is created and used only within this call`

	price, _, err := g.Do(r.Context(), fmt.Sprintf("price:%s", id), func(ctx context.Context) (int, error) { // want `cache key built by hand with fmt.Sprintf`
		return s.db.Price(ctx, id)
	})
	if err != nil {
		web.Error(w, err.Error(), 502)
		return
	}
	fmt.Fprintln(w, price)
}

// Correct is the same endpoint without the mistakes.
func (s *Service) Correct(w web.ResponseWriter, r *web.Request) {
	tenant, id := r.Header["X-Tenant"], r.PathValue("id")
	k, err := productKey.Tenant(tenant).ID(id).Build()
	if err != nil {
		web.Error(w, err.Error(), 400)
		return
	}
	p, err := s.products.Get(r.Context(), k, func(ctx context.Context) (*Product, error) {
		return s.db.Product(ctx, tenant, id)
	})
	if err != nil {
		web.Error(w, err.Error(), 502)
		return
	}
	view := *p
	view.Views++
	price, _, _ := s.prices.Do(r.Context(), k, func(ctx context.Context) (int, error) { return s.db.Price(ctx, id) })
	fmt.Fprintln(w, view.Name, view.Views, price)
	// want +1 `flightcachevet:ignore needs a reason`
	//flightcachevet:ignore
	_ = s.products.Delete(r.Context(), "legacy:"+id) // want `cache key built by hand with \+`
}
