package product

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Draft is a product row to create: the fields a Ref does not carry.
type Draft struct {
	DisplayName string `json:"displayName"`
	PriceCents  int64  `json:"priceCents"`
}

// Validate reports a *InvalidError for a Draft out of range.
func (d Draft) Validate() error {
	if err := checkDisplayName(d.DisplayName); err != nil {
		return err
	}
	if d.PriceCents < 0 || d.PriceCents > MaxPriceCents {
		return &InvalidError{Field: "priceCents", Reason: fmt.Sprintf("must be between 0 and %d", int64(MaxPriceCents))}
	}
	return nil
}

// ErrExists is matched by Create's error when the row already exists.
var ErrExists = errors.New("product: already exists")

// ErrCacheUnavailable is matched by a create's error when the shared cache
// (Redis), which must learn of the product before its row is inserted,
// failed or did not answer in time: nothing was stored, and the create may
// be retried.
var ErrCacheUnavailable = errors.New("product: the shared cache is unavailable")

// ErrCreateUnsupported is Create's error on a Repository that cannot
// create rows.
var ErrCreateUnsupported = errors.New("product: the repository cannot create products")

// Creator is a Repository that can also create rows.
type Creator interface {
	// Create inserts the row ref names with d, or returns an error matching
	// ErrExists when it exists. It returns the row as committed.
	Create(ctx context.Context, ref Ref, d Draft) (Product, error)
}

// Create implements Creator: one INSERT that does nothing on a conflict,
// so a duplicate is told apart without parsing driver errors.
func (r *SQLRepository) Create(ctx context.Context, ref Ref, d Draft) (Product, error) {
	if err := d.Validate(); err != nil {
		return Product{}, err
	}
	q := r.bind(`INSERT INTO products (tenant_id, product_id, locale, currency, display_name, price_cents)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING display_name`)
	var name string
	err := r.db.QueryRowContext(ctx, q, ref.Tenant, ref.ID, ref.Locale, ref.Currency, d.DisplayName, d.PriceCents).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrExists
	}
	if err != nil {
		return Product{}, fmt.Errorf("product: create: %w", err)
	}
	return Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency,
		DisplayName: d.DisplayName, PriceCents: d.PriceCents}, nil
}

// EachID streams the distinct (tenant, product ID) pairs of the catalog to
// add, in one query: the source of productd's penetration guard. It
// returns the query's error, ctx's end included, so a caller never
// mistakes a partial stream for the whole catalog.
func (r *SQLRepository) EachID(ctx context.Context, add func(tenant, id string)) error {
	rows, err := r.db.QueryContext(ctx, `SELECT DISTINCT tenant_id, product_id FROM products`)
	if err != nil {
		return fmt.Errorf("product: list ids: %w", err)
	}
	defer rows.Close()
	var tenant, id string
	for rows.Next() {
		if err := rows.Scan(&tenant, &id); err != nil {
			return fmt.Errorf("product: list ids: %w", err)
		}
		add(tenant, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("product: list ids: %w", err)
	}
	return nil
}

// Create passes a creation on to the wrapped Repository (not counted: the
// count is of lookups).
func (c *CountingRepository) Create(ctx context.Context, ref Ref, d Draft) (Product, error) {
	cr, ok := c.Repository.(Creator)
	if !ok {
		return Product{}, ErrCreateUnsupported
	}
	return cr.Create(ctx, ref, d)
}

// Create inserts a product row through the repository (which must be a
// Creator), then drops a "not found" this process or the shared tier may
// have cached for ref before it existed. The drop is cleanup on its own
// deadline: a failure is logged, not returned, since the row is committed.
// It does not tell a penetration guard; the caller does that (productd).
func (s *QueryService) Create(ctx context.Context, ref Ref, d Draft) (Product, error) {
	cr, ok := s.repo.(Creator)
	if !ok {
		return Product{}, ErrCreateUnsupported
	}
	out, err := cr.Create(ctx, ref, d)
	if err != nil {
		return Product{}, err
	}
	// A row that did not exist was never updated: its key has revision 0.
	k, err := s.key(ref, 0)
	if err != nil {
		return out, nil // unreachable: ref was validated
	}
	if s.opts.Mode == ModeNaive {
		s.opts.Naive.Delete(k)
		return out, nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.opts.Cache.Delete(dctx, k); err != nil {
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "product: dropping a cached not-found after a create failed",
			slog.Any("error", err))
	}
	return out, nil
}
