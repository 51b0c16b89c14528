package product

import (
	"context"
	"sync"
)

// MemoryRepository is an in-memory Repository. It stands in for the
// database where a test is about the HTTP or caching layer, not SQL.
type MemoryRepository struct {
	mu   sync.RWMutex
	rows map[Ref]Product // guarded by mu
}

var _ Repository = (*MemoryRepository)(nil)

// NewMemoryRepository returns a repository holding catalog c.
func NewMemoryRepository(c Catalog) *MemoryRepository {
	m := &MemoryRepository{rows: make(map[Ref]Product, c.Rows())}
	for _, t := range c.Tenants {
		for n := 1; n <= c.ProductsPerTenant; n++ {
			for _, l := range c.Locales {
				for _, cur := range c.Currencies {
					p := c.Row(t, n, l, cur)
					m.rows[Ref{Tenant: t, ID: p.ProductID, Locale: l, Currency: cur}] = p
				}
			}
		}
	}
	return m
}

// Get implements Repository.
func (m *MemoryRepository) Get(ctx context.Context, ref Ref) (Product, error) {
	if err := ctx.Err(); err != nil {
		return Product{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.rows[ref]
	if !ok {
		return Product{}, ErrNotFound
	}
	return p, nil
}

// Update implements Repository.
func (m *MemoryRepository) Update(ctx context.Context, ref Ref, patch Patch) (Product, error) {
	if err := patch.Validate(); err != nil {
		return Product{}, err
	}
	if err := ctx.Err(); err != nil {
		return Product{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.rows[ref]
	if !ok {
		return Product{}, ErrNotFound
	}
	if patch.DisplayName != nil {
		p.DisplayName = *patch.DisplayName
	}
	if patch.PriceCents != nil {
		p.PriceCents = *patch.PriceCents
	}
	p.Revision++
	m.rows[ref] = p
	return p, nil
}

// Ping implements Repository; the map is always reachable.
func (m *MemoryRepository) Ping(context.Context) error { return nil }
