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
	q := r.bind(`INSERT INTO products (tenant_id, product_id, locale, currency, display_name, price_cents, category)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING display_name`)
	var name string
	err := r.write(ctx, func(ctx context.Context) error {
		return r.db.QueryRowContext(ctx, q, ref.Tenant, ref.ID, ref.Locale, ref.Currency, d.DisplayName, d.PriceCents, CategoryOf(ref.ID)).Scan(&name)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrExists
	}
	if err != nil {
		return Product{}, fmt.Errorf("product: create: %w", err)
	}
	return Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency,
		DisplayName: d.DisplayName, PriceCents: d.PriceCents, Category: CategoryOf(ref.ID)}, nil
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
	s.dropNotFound(ctx, ref)
	return out, nil
}

// dropNotFound drops a "not found" cached for ref, just created, on its
// own deadline; a failure is logged.
func (s *QueryService) dropNotFound(ctx context.Context, ref Ref) {
	// A row that did not exist was never updated: its key has revision 0.
	k, err := s.key(ref, 0)
	if err != nil {
		return // unreachable: ref was validated
	}
	if s.opts.Mode == ModeNaive {
		s.opts.Naive.Delete(k)
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.opts.Cache.Delete(dctx, k); err != nil {
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "product: dropping a cached not-found after a create failed",
			slog.Any("error", err))
	}
}

// ErrTenantLimit is matched by CreateWith's error when the create would
// bring one more new tenant into the catalog than CreateLimits allows.
var ErrTenantLimit = errors.New("product: the cap on tenants created by writes is reached")

// ErrCreateLimit is matched by CreateWith's error when the tenant already
// holds as many created rows as CreateLimits allows.
var ErrCreateLimit = errors.New("product: the tenant's cap on created products is reached")

// CreateLimits bounds what creates may add to the catalog. Zero fields are
// unlimited.
type CreateLimits struct {
	// MaxNewTenants bounds the tenants creates may bring into the catalog:
	// tenants with no product when their first create came. Tenants that
	// had products (seeded, or written by other means) do not count.
	MaxNewTenants int
	// MaxCreatesPerTenant bounds the rows creates may add to one tenant.
	MaxCreatesPerTenant int
}

// CreateOptions configures CreateWith.
type CreateOptions struct {
	Limits CreateLimits
	// Before, when set, runs inside the create's transaction once the
	// limits are checked, before the row is inserted; its error aborts the
	// create with nothing stored. A create the limits refuse never calls it.
	Before func(ctx context.Context) error
}

// LimitedCreator is a Repository that creates rows within CreateLimits.
type LimitedCreator interface {
	// CreateWith is Create with limits, and a hook between the check of
	// the limits and the insert (see CreateOptions).
	CreateWith(ctx context.Context, ref Ref, d Draft, o CreateOptions) (Product, error)
}

// createLock is the PostgreSQL advisory lock key that serialises creates
// across instances, so that the limits are checked against every create
// committed before: the bytes of "productc" as an int64.
const createLock = 0x70726f6475637463

// CreateWith implements LimitedCreator in one transaction: it takes the
// create lock (PostgreSQL: an advisory lock; SQLite: BEGIN IMMEDIATE, the
// write lock), checks o.Limits against productd_creates, calls o.Before,
// inserts the row and counts it in productd_creates, then commits. A
// refused create (a limit, Before's error, an existing row) leaves both
// tables as they were. Creates are serialised; each holds the lock for a
// few statements and Before. It is a write (see write): it waits for a
// write slot, and has the write timeout to finish.
func (r *SQLRepository) CreateWith(ctx context.Context, ref Ref, d Draft, o CreateOptions) (out Product, err error) {
	if err := d.Validate(); err != nil {
		return Product{}, err
	}
	err = r.write(ctx, func(ctx context.Context) error {
		var err error
		out, err = r.createWith(ctx, ref, d, o)
		return err
	})
	return out, err
}

func (r *SQLRepository) createWith(ctx context.Context, ref Ref, d Draft, o CreateOptions) (out Product, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return Product{}, fmt.Errorf("product: create: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck // the original error matters more
		}
	}()
	if r.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(createLock)); err != nil {
			return Product{}, fmt.Errorf("product: create: lock: %w", err)
		}
	}
	var creates int64
	newTenant := 0
	err = tx.QueryRowContext(ctx, r.bind(`SELECT creates FROM productd_creates WHERE tenant_id = ?`), ref.Tenant).Scan(&creates)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var one int
		err = tx.QueryRowContext(ctx, r.bind(`SELECT 1 FROM products WHERE tenant_id = ? LIMIT 1`), ref.Tenant).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			newTenant = 1
		case err != nil:
			return Product{}, fmt.Errorf("product: create: read the tenant: %w", err)
		}
	case err != nil:
		return Product{}, fmt.Errorf("product: create: read the tenant's creates: %w", err)
	}
	if newTenant == 1 && o.Limits.MaxNewTenants > 0 {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM productd_creates WHERE new_tenant = 1`).Scan(&n); err != nil {
			return Product{}, fmt.Errorf("product: create: count new tenants: %w", err)
		}
		if n >= int64(o.Limits.MaxNewTenants) {
			return Product{}, ErrTenantLimit
		}
	}
	if o.Limits.MaxCreatesPerTenant > 0 && creates >= int64(o.Limits.MaxCreatesPerTenant) {
		return Product{}, ErrCreateLimit
	}
	if o.Before != nil {
		if err := o.Before(ctx); err != nil {
			return Product{}, err
		}
	}
	var name string
	err = tx.QueryRowContext(ctx, r.bind(`INSERT INTO products (tenant_id, product_id, locale, currency, display_name, price_cents, category)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING display_name`),
		ref.Tenant, ref.ID, ref.Locale, ref.Currency, d.DisplayName, d.PriceCents, CategoryOf(ref.ID)).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrExists
	}
	if err != nil {
		return Product{}, fmt.Errorf("product: create: %w", err)
	}
	if _, err := tx.ExecContext(ctx, r.bind(`INSERT INTO productd_creates (tenant_id, creates, new_tenant) VALUES (?, 1, ?)
		ON CONFLICT (tenant_id) DO UPDATE SET creates = productd_creates.creates + 1`), ref.Tenant, newTenant); err != nil {
		return Product{}, fmt.Errorf("product: create: count the create: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Product{}, fmt.Errorf("product: create: commit: %w", err)
	}
	return Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency,
		DisplayName: d.DisplayName, PriceCents: d.PriceCents, Category: CategoryOf(ref.ID)}, nil
}

// CreateWith passes a limited creation on to the wrapped Repository.
func (c *CountingRepository) CreateWith(ctx context.Context, ref Ref, d Draft, o CreateOptions) (Product, error) {
	lc, ok := c.Repository.(LimitedCreator)
	if !ok {
		return Product{}, ErrCreateUnsupported
	}
	return lc.CreateWith(ctx, ref, d, o)
}

// CreateWith is Create through the repository's LimitedCreator: the
// limits and the hook of o apply (see CreateOptions), then the same
// cleanup of a cached "not found".
func (s *QueryService) CreateWith(ctx context.Context, ref Ref, d Draft, o CreateOptions) (Product, error) {
	lc, ok := s.repo.(LimitedCreator)
	if !ok {
		return Product{}, ErrCreateUnsupported
	}
	out, err := lc.CreateWith(ctx, ref, d, o)
	if err != nil {
		return Product{}, err
	}
	s.dropNotFound(ctx, ref)
	return out, nil
}
