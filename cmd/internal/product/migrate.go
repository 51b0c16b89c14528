package product

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Catalog describes the demo catalog Migrate seeds: every product of every
// tenant exists in every locale and currency.
type Catalog struct {
	Tenants           []string
	ProductsPerTenant int
	Locales           []string
	Currencies        []string
}

// DemoCatalog is seeded on first start: 3 tenants x 2,000 products x 3
// locales x 3 currencies = 54,000 rows.
var DemoCatalog = Catalog{
	Tenants:           []string{"acme", "globex", "initech"},
	ProductsPerTenant: 2000,
	Locales:           []string{"en-US", "de-DE", "fr-FR"},
	Currencies:        []string{"USD", "EUR", "GBP"},
}

// Rows is the number of rows c seeds.
func (c Catalog) Rows() int {
	return len(c.Tenants) * c.ProductsPerTenant * len(c.Locales) * len(c.Currencies)
}

// ProductID is the ID of the n-th product (1-based) of the catalog.
func ProductID(n int) string { return fmt.Sprintf("p-%05d", n) }

// Row returns the n-th product of tenant in a locale and currency, as
// seeded: deterministic, so tests can predict what the origin holds.
func (c Catalog) Row(tenant string, n int, locale, currency string) Product {
	return Product{
		ProductID:   ProductID(n),
		TenantID:    tenant,
		DisplayName: fmt.Sprintf("%s %s #%d", adjectives[n%len(adjectives)], nounFor(locale), n),
		PriceCents:  priceFor(n, currency),
		Currency:    currency,
		Locale:      locale,
		Category:    CategoryOf(ProductID(n)),
	}
}

var adjectives = []string{"Classic", "Deluxe", "Compact", "Ultra", "Eco", "Pro", "Mini", "Grand"}

func nounFor(locale string) string {
	switch {
	case strings.HasPrefix(locale, "de"):
		return "Gerät"
	case strings.HasPrefix(locale, "fr"):
		return "Appareil"
	default:
		return "Widget"
	}
}

func priceFor(n int, currency string) int64 {
	base := int64(499 + (n*7919)%99_500) // USD cents
	switch currency {
	case "EUR":
		return base * 92 / 100
	case "GBP":
		return base * 79 / 100
	default:
		return base
	}
}

// The schema. One table, keyed by what a lookup names; productd_meta
// records that the demo catalog was seeded, so a restart does not re-seed
// rows a user has since changed.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS products (
		tenant_id    TEXT   NOT NULL,
		product_id   TEXT   NOT NULL,
		locale       TEXT   NOT NULL,
		currency     TEXT   NOT NULL,
		display_name TEXT   NOT NULL,
		price_cents  BIGINT NOT NULL,
		revision     BIGINT NOT NULL DEFAULT 0,
		category     TEXT   NOT NULL DEFAULT '',
		PRIMARY KEY (tenant_id, product_id, locale, currency)
	)`,
	`CREATE TABLE IF NOT EXISTS productd_meta (
		name  TEXT PRIMARY KEY,
		value TEXT NOT NULL
	)`,
	// What creates added, per tenant: the rows (creates) and whether the
	// tenant had no product when its first create came (new_tenant, 0 or
	// 1). CreateWith checks its limits against it; a row is written only
	// with a committed create, so refused creates add nothing.
	`CREATE TABLE IF NOT EXISTS productd_creates (
		tenant_id  TEXT    PRIMARY KEY,
		creates    BIGINT  NOT NULL,
		new_tenant INTEGER NOT NULL
	)`,
	outboxSchema,
	outboxAgeIndex,
}

// addedColumns brings tables created by an older productd to the current
// schema: the products' revision (existing rows get revision 0) and the
// outbox's claim (existing records are unclaimed). PostgreSQL says IF NOT
// EXISTS itself; SQLite has no such clause, so Migrate asks
// pragma_table_info first. Both run inside Migrate's serialised
// transaction, so two instances never add a column twice.
var addedColumns = []struct{ table, column, decl string }{
	{"products", "revision", "BIGINT NOT NULL DEFAULT 0"},
	{"productd_outbox", "claimed_ms", "BIGINT NOT NULL DEFAULT 0"},
	{"products", "category", "TEXT NOT NULL DEFAULT ''"},
}

// categoryIndex serves a reprice, which reads and updates a tenant's
// category. It is created after addedColumns: an older table gets its
// category column first.
const categoryIndex = `CREATE INDEX IF NOT EXISTS products_category ON products (tenant_id, category)`

// migrationLock is the PostgreSQL advisory lock key that serialises
// Migrate across instances: the bytes of "productd" as an int64.
const migrationLock = 0x70726f6475637464

// seededMarker is the productd_meta row written with the demo catalog.
const seededMarker = "demo_catalog_v1"

// insertBatch rows per INSERT: 7 parameters each stays far below both
// SQLite's (32766) and PostgreSQL's (65535) parameter limits.
const insertBatch = 500

// Migrate creates the schema and, when seed is non-nil and the catalog was
// never seeded, inserts it. It reports whether this call seeded.
//
// It is safe for several instances to run it at once against one database:
// everything happens in one transaction that PostgreSQL serialises with an
// advisory lock and SQLite with BEGIN IMMEDIATE (the write lock, waited for
// under busy_timeout). The first instance creates and seeds; the others
// then find the marker and do nothing. The inserts are also ON CONFLICT DO
// NOTHING, so rows that exist already are kept as they are.
func Migrate(ctx context.Context, r *SQLRepository, seed *Catalog) (seeded bool, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("product: migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck // the original error matters more
		}
	}()
	if r.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return false, fmt.Errorf("product: migrate: lock: %w", err)
		}
	}
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("product: migrate: %w", err)
		}
	}
	for _, c := range addedColumns {
		if err := r.addColumn(ctx, tx, c.table, c.column, c.decl); err != nil {
			return false, err
		}
	}
	if err := r.backfillCategories(ctx, tx); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, categoryIndex); err != nil {
		return false, fmt.Errorf("product: migrate: %w", err)
	}
	if seed != nil {
		var v string
		err := tx.QueryRowContext(ctx, r.bind(`SELECT value FROM productd_meta WHERE name = ?`), seededMarker).Scan(&v)
		switch {
		case err == sql.ErrNoRows:
			if err := r.seed(ctx, tx, *seed); err != nil {
				return false, err
			}
			// Statistics now, not when autovacuum gets round to it: without
			// them PostgreSQL plans a batch lookup (product_id = ANY) as a
			// walk over the tenant's whole index range.
			if _, err := tx.ExecContext(ctx, `ANALYZE products`); err != nil {
				return false, fmt.Errorf("product: seed: analyze: %w", err)
			}
			if _, err := tx.ExecContext(ctx, r.bind(`INSERT INTO productd_meta (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING`),
				seededMarker, fmt.Sprint(seed.Rows())); err != nil {
				return false, fmt.Errorf("product: migrate: mark seeded: %w", err)
			}
			seeded = true
		case err != nil:
			return false, fmt.Errorf("product: migrate: read marker: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("product: migrate: commit: %w", err)
	}
	return seeded, nil
}

// addColumn adds column, declared decl, to table unless it has it.
func (r *SQLRepository) addColumn(ctx context.Context, tx *sql.Tx, table, column, decl string) error {
	if r.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN IF NOT EXISTS "+column+" "+decl); err != nil {
			return fmt.Errorf("product: migrate: add %s.%s: %w", table, column, err)
		}
		return nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&n); err != nil {
		return fmt.Errorf("product: migrate: inspect %s: %w", table, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN "+column+" "+decl); err != nil {
		return fmt.Errorf("product: migrate: add %s.%s: %w", table, column, err)
	}
	return nil
}

// backfillCategories gives every row without a category (rows written by
// a productd older than categories) the one CategoryOf its ID names: one
// UPDATE per category and chunk of insertBatch IDs.
func (r *SQLRepository) backfillCategories(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT product_id FROM products WHERE category = ''`)
	if err != nil {
		return fmt.Errorf("product: migrate: read rows without a category: %w", err)
	}
	byCategory := map[string][]any{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("product: migrate: read rows without a category: %w", err)
		}
		c := CategoryOf(id)
		byCategory[c] = append(byCategory[c], id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("product: migrate: read rows without a category: %w", err)
	}
	for c, ids := range byCategory {
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), insertBatch)]
			ids = ids[len(chunk):]
			q := `UPDATE products SET category = ? WHERE category = '' AND product_id IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
			if _, err := tx.ExecContext(ctx, r.bind(q), append([]any{c}, chunk...)...); err != nil {
				return fmt.Errorf("product: migrate: assign categories: %w", err)
			}
		}
	}
	return nil
}

func (r *SQLRepository) seed(ctx context.Context, tx *sql.Tx, c Catalog) error {
	args := make([]any, 0, insertBatch*7)
	rows := 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		var sb strings.Builder
		sb.WriteString(`INSERT INTO products (tenant_id, product_id, locale, currency, display_name, price_cents, category) VALUES `)
		for i := range rows {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		}
		sb.WriteString(` ON CONFLICT DO NOTHING`)
		if _, err := tx.ExecContext(ctx, r.bind(sb.String()), args...); err != nil {
			return fmt.Errorf("product: seed: %w", err)
		}
		args, rows = args[:0], 0
		return nil
	}
	for _, t := range c.Tenants {
		for n := 1; n <= c.ProductsPerTenant; n++ {
			for _, l := range c.Locales {
				for _, cur := range c.Currencies {
					p := c.Row(t, n, l, cur)
					args = append(args, p.TenantID, p.ProductID, p.Locale, p.Currency, p.DisplayName, p.PriceCents, p.Category)
					if rows++; rows == insertBatch {
						if err := flush(); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return flush()
}
