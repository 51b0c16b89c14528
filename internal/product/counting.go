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
	gets    atomic.Int64
	onQuery func() // set once by Count, read-only afterwards
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
	if c.onQuery != nil {
		c.onQuery()
	}
	return c.Repository.Get(ctx, ref)
}

// Queries is the number of Gets so far.
func (c *CountingRepository) Queries() int64 { return c.gets.Load() }
