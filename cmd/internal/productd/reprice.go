package productd

import (
	"context"
	"errors"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/prometheus/client_golang/prometheus"
)

// RepricesMetric counts category reprices by result: "ok", "not_found"
// (the tenant has no product in the category), "invalid" (refused
// before the database) or "failed".
const RepricesMetric = "productd_reprices_total"

// RepricedProductsMetric counts the products the committed reprices
// changed (each in every locale and currency).
const RepricedProductsMetric = "productd_repriced_products_total"

// TagInvalidationsMetric counts the tag invalidations made after PUTs,
// reprices and by the outbox relay, by kind of tag ("product",
// "category", "list") and result ("ok", or "failed": not published to the
// other instances yet, which the cache and the outbox redo).
const TagInvalidationsMetric = "productd_tag_invalidations_total"

// repricer is the API's Repricer: the service's Reprice, counted.
type repricer struct {
	svc      *product.QueryService
	reprices *prometheus.CounterVec
	products prometheus.Counter
}

// newRepricer registers the reprice metrics on reg.
func newRepricer(reg prometheus.Registerer, svc *product.QueryService) repricer {
	r := repricer{
		svc: svc,
		reprices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RepricesMetric,
			Help: "Category reprices, by result (ok, not_found, invalid, failed).",
		}, []string{"result"}),
		products: prometheus.NewCounter(prometheus.CounterOpts{
			Name: RepricedProductsMetric,
			Help: "Products the committed category reprices changed, each in every locale and currency.",
		}),
	}
	for _, result := range []string{"ok", "not_found", "invalid", "failed"} {
		r.reprices.WithLabelValues(result) // every series from the start, at 0
	}
	reg.MustRegister(r.reprices, r.products)
	return r
}

func (r repricer) Reprice(ctx context.Context, tenant, category string, rp product.Reprice) (product.Repriced, error) {
	out, err := r.svc.Reprice(ctx, tenant, category, rp)
	switch {
	case err == nil:
		r.reprices.WithLabelValues("ok").Inc()
		r.products.Add(float64(out.Products))
	case errors.Is(err, product.ErrCategoryNotFound):
		r.reprices.WithLabelValues("not_found").Inc()
	case errors.Is(err, product.ErrInvalid):
		r.reprices.WithLabelValues("invalid").Inc()
	default:
		r.reprices.WithLabelValues("failed").Inc()
	}
	return out, err
}

// tagInvalidations registers TagInvalidationsMetric on reg and returns
// the service's OnTagInvalidation.
func tagInvalidations(reg prometheus.Registerer) func(kind product.TagKind, err error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: TagInvalidationsMetric,
		Help: "Tag invalidations after PUTs and reprices and by the outbox relay, by kind of tag (product, category, list) and result (ok; failed: not yet published to the other instances, redone by the cache and the outbox).",
	}, []string{"kind", "result"})
	for _, k := range []product.TagKind{product.TagProduct, product.TagCategory, product.TagList} {
		c.WithLabelValues(string(k), "ok")
		c.WithLabelValues(string(k), "failed")
	}
	reg.MustRegister(c)
	return func(kind product.TagKind, err error) {
		result := "ok"
		if err != nil {
			result = "failed"
		}
		c.WithLabelValues(string(kind), result).Inc()
	}
}
