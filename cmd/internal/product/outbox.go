package product

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
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
// writer's wall clock at commit in Unix milliseconds, and when a relay
// last claimed it (0: never, or released), on the relay's clock. Relays
// take the oldest records first, through outboxAgeIndex: without it every
// relay's read sorts the whole table (73 ms a read at 360,000 records).
const (
	outboxSchema = `CREATE TABLE IF NOT EXISTS productd_outbox (
	tenant_id  TEXT   NOT NULL,
	product_id TEXT   NOT NULL,
	locale     TEXT   NOT NULL,
	currency   TEXT   NOT NULL,
	revision   BIGINT NOT NULL,
	created_ms BIGINT NOT NULL,
	claimed_ms BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant_id, product_id, locale, currency, revision)
)`
	outboxAgeIndex = `CREATE INDEX IF NOT EXISTS productd_outbox_created ON productd_outbox (created_ms)`
)

// OutboxRecord is a committed Update whose invalidation is not known to
// have been made: the row it changed and the revision it committed; or,
// when Category is set, a committed Reprice of that category of
// Ref.Tenant (the other fields of Ref empty), and the category's highest
// revision after it.
type OutboxRecord struct {
	Ref      Ref
	Category string
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
	// first, claimed or not: a view of the outbox, for tools and tests.
	Pending(ctx context.Context, before time.Time, limit int) ([]OutboxRecord, error)
	// Claim takes at most limit records created before before, oldest
	// first, that no relay claimed within claimFor, and marks them claimed
	// now: until claimFor has passed, or Release, no other Claim returns
	// them, so relays that claim at once share the records instead of
	// taking the same ones.
	Claim(ctx context.Context, before time.Time, limit int, claimFor time.Duration) ([]OutboxRecord, error)
	// Release gives recs, claimed, back at once: the next Claim may take
	// them. Releasing a record that is gone is no error.
	Release(ctx context.Context, recs ...OutboxRecord) error
	// Done deletes recs: their invalidations were made. Deleting a record
	// that is gone already (another instance's relay was first) is no
	// error.
	Done(ctx context.Context, recs ...OutboxRecord) error
}

var _ Outbox = (*SQLRepository)(nil)

// categoryMark starts the product_id of a reprice's record, whose other
// key columns are the tenant, two empty strings and the revision: no
// product ID holds ':' (CheckID), so no record of an Update shares its
// key.
const categoryMark = "category:"

// columns are rec's key columns in the outbox table: tenant_id,
// product_id, locale, currency, revision.
func (rec OutboxRecord) columns() []any {
	if rec.Category != "" {
		return []any{rec.Ref.Tenant, categoryMark + rec.Category, "", "", rec.Revision}
	}
	return []any{rec.Ref.Tenant, rec.Ref.ID, rec.Ref.Locale, rec.Ref.Currency, rec.Revision}
}

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
		Scan(&out.DisplayName, &out.PriceCents, &out.Revision, &out.Category); err != nil {
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
	return scanOutbox(rows)
}

// claimSQL claims the oldest unclaimed records in one statement. On
// PostgreSQL the rows another relay is claiming at the same moment are
// skipped (SKIP LOCKED), not waited for; SQLite runs one writer at a time.
func (r *SQLRepository) claimSQL() string {
	lock := ""
	if r.dialect == Postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	return r.bind(`UPDATE productd_outbox SET claimed_ms = ?
		WHERE (tenant_id, product_id, locale, currency, revision) IN (
			SELECT tenant_id, product_id, locale, currency, revision FROM productd_outbox
			WHERE created_ms < ? AND claimed_ms <= ? ORDER BY created_ms LIMIT ?` + lock + `)
		RETURNING tenant_id, product_id, locale, currency, revision, created_ms`)
}

// Claim implements Outbox. It is a write (see write).
func (r *SQLRepository) Claim(ctx context.Context, before time.Time, limit int, claimFor time.Duration) (recs []OutboxRecord, err error) {
	now := time.Now()
	err = r.write(ctx, func(ctx context.Context) error {
		rows, err := r.db.QueryContext(ctx, r.claimSQL(), now.UnixMilli(), before.UnixMilli(), now.Add(-claimFor).UnixMilli(), limit)
		if err != nil {
			return err
		}
		recs, err = scanOutbox(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("product: outbox: claim: %w", err)
	}
	return recs, nil
}

// Release implements Outbox in one statement. It is a write (see write).
func (r *SQLRepository) Release(ctx context.Context, recs ...OutboxRecord) error {
	if err := r.outboxWrite(ctx, `UPDATE productd_outbox SET claimed_ms = 0 WHERE `, recs); err != nil {
		return fmt.Errorf("product: outbox: release: %w", err)
	}
	return nil
}

// outboxWrite runs stmt, which ends in WHERE, on the records recs name,
// as one write (see write). Nothing to do without records.
func (r *SQLRepository) outboxWrite(ctx context.Context, stmt string, recs []OutboxRecord) error {
	if len(recs) == 0 {
		return nil
	}
	var sb strings.Builder
	args := make([]any, 0, 5*len(recs))
	sb.WriteString(stmt + `(tenant_id, product_id, locale, currency, revision) IN (`)
	for i, rec := range recs {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("(?, ?, ?, ?, ?)")
		args = append(args, rec.columns()...)
	}
	sb.WriteByte(')')
	return r.write(ctx, func(ctx context.Context) error {
		_, err := r.db.ExecContext(ctx, r.bind(sb.String()), args...)
		return err
	})
}

// scanOutbox reads and closes rows of (tenant_id, product_id, locale,
// currency, revision, created_ms).
func scanOutbox(rows *sql.Rows) ([]OutboxRecord, error) {
	defer rows.Close()
	var out []OutboxRecord
	for rows.Next() {
		var rec OutboxRecord
		var ms int64
		if err := rows.Scan(&rec.Ref.Tenant, &rec.Ref.ID, &rec.Ref.Locale, &rec.Ref.Currency, &rec.Revision, &ms); err != nil {
			return nil, fmt.Errorf("product: outbox: %w", err)
		}
		rec.Created = time.UnixMilli(ms)
		if c, ok := strings.CutPrefix(rec.Ref.ID, categoryMark); ok {
			rec.Category, rec.Ref.ID = c, ""
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("product: outbox: %w", err)
	}
	return out, nil
}

// Done implements Outbox in one statement. It is a write (see write).
func (r *SQLRepository) Done(ctx context.Context, recs ...OutboxRecord) error {
	if err := r.outboxWrite(ctx, `DELETE FROM productd_outbox WHERE `, recs); err != nil {
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
