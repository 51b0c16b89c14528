package product

import (
	"context"
	"fmt"
	"time"
)

// The transactional outbox. An Update commits the row and a record that
// its cached copies must be invalidated in one transaction; the writer
// invalidates at once and deletes the record when every step succeeded.
// When a step fails (Redis frozen or down) or the writer dies first, the
// record stays, and a relay on every instance (QueryService.RelayOutbox)
// redoes the invalidation once the record is older than a grace period,
// until it succeeds. A crash or an outage delays an invalidation; it never
// loses one.

// outboxSchema is the outbox table: one record per committed Update, keyed
// like the revision it committed (a row's revisions are unique), with the
// writer's wall clock at commit in Unix milliseconds.
const outboxSchema = `CREATE TABLE IF NOT EXISTS productd_outbox (
	tenant_id  TEXT   NOT NULL,
	product_id TEXT   NOT NULL,
	locale     TEXT   NOT NULL,
	currency   TEXT   NOT NULL,
	revision   BIGINT NOT NULL,
	created_ms BIGINT NOT NULL,
	PRIMARY KEY (tenant_id, product_id, locale, currency, revision)
)`

// OutboxRecord is a committed Update whose invalidation is not known to
// have been made: the row it changed and the revision it committed.
type OutboxRecord struct {
	Ref      Ref
	Revision int64
	// Created is when the Update committed, on the writer's clock.
	Created time.Time
}

// Outbox is a Repository whose Update also records, in the same
// transaction, an OutboxRecord of the row and revision it committed.
// SQLRepository is one; OutboxOf finds it under wrappers.
type Outbox interface {
	Repository
	// Pending returns at most limit records created before before, oldest
	// first.
	Pending(ctx context.Context, before time.Time, limit int) ([]OutboxRecord, error)
	// Done deletes rec: its invalidation was made. Deleting a record that
	// is gone already (another instance's relay was first) is no error.
	Done(ctx context.Context, rec OutboxRecord) error
}

var _ Outbox = (*SQLRepository)(nil)

// updateWithOutbox runs the Update's statement and the outbox record's
// insert in one transaction.
func (r *SQLRepository) updateWithOutbox(ctx context.Context, ref Ref, name, price any) (out Product, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return Product{}, fmt.Errorf("product: update: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck // the original error matters more
		}
	}()
	out = Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency}
	if err := tx.QueryRowContext(ctx, r.updateSQL, name, price, ref.Tenant, ref.ID, ref.Locale, ref.Currency).
		Scan(&out.DisplayName, &out.PriceCents, &out.Revision); err != nil {
		return Product{}, err
	}
	if _, err := tx.ExecContext(ctx, r.bind(`INSERT INTO productd_outbox (tenant_id, product_id, locale, currency, revision, created_ms)
		VALUES (?, ?, ?, ?, ?, ?)`), ref.Tenant, ref.ID, ref.Locale, ref.Currency, out.Revision, time.Now().UnixMilli()); err != nil {
		return Product{}, fmt.Errorf("product: update: record the invalidation: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Product{}, fmt.Errorf("product: update: commit: %w", err)
	}
	return out, nil
}

// Pending implements Outbox.
func (r *SQLRepository) Pending(ctx context.Context, before time.Time, limit int) ([]OutboxRecord, error) {
	rows, err := r.db.QueryContext(ctx, r.bind(`SELECT tenant_id, product_id, locale, currency, revision, created_ms
		FROM productd_outbox WHERE created_ms < ? ORDER BY created_ms LIMIT ?`), before.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("product: outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxRecord
	for rows.Next() {
		var rec OutboxRecord
		var ms int64
		if err := rows.Scan(&rec.Ref.Tenant, &rec.Ref.ID, &rec.Ref.Locale, &rec.Ref.Currency, &rec.Revision, &ms); err != nil {
			return nil, fmt.Errorf("product: outbox: %w", err)
		}
		rec.Created = time.UnixMilli(ms)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("product: outbox: %w", err)
	}
	return out, nil
}

// Done implements Outbox.
func (r *SQLRepository) Done(ctx context.Context, rec OutboxRecord) error {
	if _, err := r.db.ExecContext(ctx, r.bind(`DELETE FROM productd_outbox
		WHERE tenant_id = ? AND product_id = ? AND locale = ? AND currency = ? AND revision = ?`),
		rec.Ref.Tenant, rec.Ref.ID, rec.Ref.Locale, rec.Ref.Currency, rec.Revision); err != nil {
		return fmt.Errorf("product: outbox: done: %w", err)
	}
	return nil
}

// OutboxOf finds r's outbox: r itself, or the Repository it wraps (a
// method Unwrap() Repository, as CountingRepository has), and so on down.
// A wrapper hides the optional interfaces of what it wraps; this looks
// through it.
func OutboxOf(r Repository) (Outbox, bool) {
	for r != nil {
		if o, ok := r.(Outbox); ok {
			return o, true
		}
		w, ok := r.(interface{ Unwrap() Repository })
		if !ok {
			break
		}
		r = w.Unwrap()
	}
	return nil, false
}

// Unwrap returns the Repository c counts (see OutboxOf).
func (c *CountingRepository) Unwrap() Repository { return c.Repository }
