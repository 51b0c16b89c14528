package product

import (
	"context"
	"sync/atomic"
)

// CountingRepository counts the lookups that reach the origin: the number
// the stampede demo and the end-to-end tests are about. It wraps any
// Repository.
type CountingRepository struct {
	Repository
	gets    atomic.Int64 // statements: one per Get, one per GetMany
	rows    atomic.Int64 // rows asked for: one per Get, one per id of a GetMany
	onQuery func()       // set once by Count, read-only afterwards
}

// Count wraps r so that every Get is counted, and onQuery (if not nil) is
// called once per Get before it runs: productd passes the Inc of its
// productd_origin_queries_total counter.
func Count(r Repository, onQuery func()) *CountingRepository {
	return &CountingRepository{Repository: r, onQuery: onQuery}
}

// Get counts the lookup and passes it on.
func (c *CountingRepository) Get(ctx context.Context, ref Ref) (Product, error) {
	c.gets.Add(1)
	c.rows.Add(1)
	if c.onQuery != nil {
		c.onQuery()
	}
	return c.Repository.Get(ctx, ref)
}

// GetMany counts one lookup for the whole selection and passes it on; a
// wrapped Repository without batch reads gets one Get per id instead, each
// counted.
func (c *CountingRepository) GetMany(ctx context.Context, sel Selection) (map[string]Product, error) {
	br, ok := c.Repository.(BatchRepository)
	if !ok {
		return getEach(ctx, c.Get, sel)
	}
	c.gets.Add(1)
	c.rows.Add(int64(len(sel.IDs)))
	if c.onQuery != nil {
		c.onQuery()
	}
	return br.GetMany(ctx, sel)
}

// Queries is the number of origin lookups (statements) so far.
func (c *CountingRepository) Queries() int64 { return c.gets.Load() }

// Rows is the number of rows the lookups asked for so far: a product
// loaded twice counts twice.
func (c *CountingRepository) Rows() int64 { return c.rows.Load() }
