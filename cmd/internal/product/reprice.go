package product

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reprice changes the prices of every product of a category, in every
// locale and currency: by Percent (each price times 100+Percent, divided
// by 100 and truncated) or by DeltaCents (added to each price). Exactly
// one is set. Prices stay within [0, MaxPriceCents].
type Reprice struct {
	Percent    *int64 `json:"percent,omitempty"`
	DeltaCents *int64 `json:"deltaCents,omitempty"`
}

// Bounds of a Reprice.
const (
	MinRepricePercent = -100
	MaxRepricePercent = 1000
)

// Validate reports a *InvalidError for a Reprice that sets neither or both
// of its fields, or a value out of range.
func (rp Reprice) Validate() error {
	switch {
	case (rp.Percent == nil) == (rp.DeltaCents == nil):
		return &InvalidError{Field: "body", Reason: "set exactly one of percent and deltaCents"}
	case rp.Percent != nil && (*rp.Percent < MinRepricePercent || *rp.Percent > MaxRepricePercent || *rp.Percent == 0):
		return &InvalidError{Field: "percent", Reason: fmt.Sprintf("must be a non-zero integer between %d and %d", MinRepricePercent, MaxRepricePercent)}
	case rp.DeltaCents != nil && (*rp.DeltaCents < -MaxPriceCents || *rp.DeltaCents > MaxPriceCents || *rp.DeltaCents == 0):
		return &InvalidError{Field: "deltaCents", Reason: fmt.Sprintf("must be a non-zero integer between %d and %d", -int64(MaxPriceCents), int64(MaxPriceCents))}
	}
	return nil
}

// factors are the reprice's multiplier (in percent) and addend.
func (rp Reprice) factors() (percent, delta int64) {
	percent = 100
	if rp.Percent != nil {
		percent += *rp.Percent
	}
	if rp.DeltaCents != nil {
		delta = *rp.DeltaCents
	}
	return percent, delta
}

// Repriced is what a Reprice committed.
type Repriced struct {
	Tenant   string `json:"tenantId"`
	Category string `json:"category"`
	// Rows is the number of rows changed (every locale and currency of
	// every product); Products the number of distinct products.
	Rows     int64 `json:"rows"`
	Products int64 `json:"products"`
	// Revision is the highest revision of the category's rows after the
	// reprice, which bumped every one of them.
	Revision int64 `json:"revision"`
}

// ErrCategoryNotFound is matched by a reprice's error when the tenant has
// no product in the category.
var ErrCategoryNotFound = errors.New("product: no product of the tenant in this category")

// Repricer is a Repository that can reprice a whole category.
type Repricer interface {
	// Reprice applies rp to every row of tenant's category, bumping each
	// row's revision, in one transaction, with the outbox record of the
	// category's invalidation (OutboxRecord.Category). A category without
	// rows is an error matching ErrCategoryNotFound.
	Reprice(ctx context.Context, tenant, category string, rp Reprice) (Repriced, error)
}

// ErrRepriceUnsupported is a reprice's error on a Repository that cannot
// reprice.
var ErrRepriceUnsupported = errors.New("product: the repository cannot reprice a category")

var _ Repricer = (*SQLRepository)(nil)

// Reprice implements Repricer: one UPDATE of the category's rows (under
// the index on tenant and category), one read of what it changed and the
// outbox record, in one transaction. It is a write (see write). The
// UPDATE's row locks serialise it with every PUT and reprice of the same
// rows, so the revision it records (the category's highest after it) is
// above that of every reprice of the category before it.
func (r *SQLRepository) Reprice(ctx context.Context, tenant, category string, rp Reprice) (out Repriced, err error) {
	if err := rp.Validate(); err != nil {
		return Repriced{}, err
	}
	out = Repriced{Tenant: tenant, Category: category}
	percent, delta := rp.factors()
	clamp := "MIN(MAX(%s, 0), ?)" // SQLite's scalar MIN and MAX
	if r.dialect == Postgres {
		clamp = "LEAST(GREATEST(%s, 0), ?)"
	}
	update := r.bind(`UPDATE products SET price_cents = ` + fmt.Sprintf(clamp, "price_cents * ? / 100 + ?") + `, revision = revision + 1
		WHERE tenant_id = ? AND category = ?`)
	err = r.write(ctx, func(ctx context.Context) (err error) {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer func() {
			if err != nil {
				tx.Rollback() //nolint:errcheck // the original error matters more
			}
		}()
		res, err := tx.ExecContext(ctx, update, percent, delta, int64(MaxPriceCents), tenant, category)
		if err != nil {
			return err
		}
		if out.Rows, err = res.RowsAffected(); err != nil {
			return err
		}
		if out.Rows == 0 {
			return ErrCategoryNotFound
		}
		if err := tx.QueryRowContext(ctx, r.bind(`SELECT COUNT(DISTINCT product_id), MAX(revision) FROM products
			WHERE tenant_id = ? AND category = ?`), tenant, category).Scan(&out.Products, &out.Revision); err != nil {
			return err
		}
		rec := OutboxRecord{Ref: Ref{Tenant: tenant}, Category: category, Revision: out.Revision}
		if _, err := tx.ExecContext(ctx, r.bind(`INSERT INTO productd_outbox (tenant_id, product_id, locale, currency, revision, created_ms)
			VALUES (?, ?, ?, ?, ?, ?)`), append(rec.columns(), time.Now().UnixMilli())...); err != nil {
			return fmt.Errorf("record the invalidation: %w", err)
		}
		return tx.Commit()
	})
	if errors.Is(err, ErrCategoryNotFound) {
		return Repriced{}, err
	}
	if err != nil {
		return Repriced{}, fmt.Errorf("product: reprice: %w", err)
	}
	return out, nil
}

// RepricerOf finds r's Repricer: r itself, or the Repository it wraps (a
// method Unwrap() Repository), and so on down, as OutboxOf finds an
// Outbox. A reprice is a write: the wrappers that count or watch lookups
// have nothing to add to it.
func RepricerOf(r Repository) (Repricer, bool) {
	for r != nil {
		if rr, ok := r.(Repricer); ok {
			return rr, true
		}
		w, ok := r.(interface{ Unwrap() Repository })
		if !ok {
			break
		}
		r = w.Unwrap()
	}
	return nil, false
}
