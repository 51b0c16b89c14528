package product

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Dialect names the SQL database behind a SQLRepository.
type Dialect string

// The supported databases.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Options configures Open.
type Options struct {
	// OriginLatency is slept, holding a pooled connection, after each Get's
	// query (before its answer is returned, whatever it is): it makes the
	// origin as slow as a real one under load, for demos and tests, and the
	// answer is as old as a slow query's. Zero adds nothing.
	OriginLatency time.Duration
	// MaxConns bounds the connection pool (default 16). With OriginLatency
	// it is what makes an uncoordinated herd queue up, as it would on a real
	// database.
	MaxConns int
	// WriteConns bounds the connections that writes (updates, creates, the
	// outbox's claims and deletes) hold at once, so that the rest of the
	// pool stays the reads' whatever makes writes wait (see write). 0
	// picks DefaultWriteConns(MaxConns); otherwise at most MaxConns.
	WriteConns int
	// WriteTimeout bounds each write, its wait for one of WriteConns
	// included (default DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// DriversPackage is the package whose import registers the database/sql
// drivers Open uses.
const DriversPackage = "github.com/flightcache/flightcache/cmd/internal/sqldrivers"

// ErrNoDriver is returned by Open when the program has not registered the
// database/sql driver the DSN's dialect needs: it must import
// DriversPackage for its side effect.
var ErrNoDriver = errors.New("product: database driver missing")

// DefaultMaxConns is the default pool size.
const DefaultMaxConns = 16

// SQLRepository is a Repository on database/sql, for SQLite and PostgreSQL.
// It is safe for concurrent use.
type SQLRepository struct {
	db      *sql.DB
	dialect Dialect
	latency time.Duration
	name    string // the SQLite path or the redacted URL, for errors and logs

	// writeSlots holds a token per write in progress (Options.WriteConns);
	// writeTimeout is Options.WriteTimeout. See write.
	writeSlots   chan struct{}
	writeTimeout time.Duration

	getSQL, updateSQL string
}

var _ Repository = (*SQLRepository)(nil)

// Open connects to the origin named by dsn, one of AcceptedDSNForms (see
// ParseDSN; a SQLite file is created if missing). It does not migrate;
// call Migrate. Its errors never hold a password; those about a SQLite
// file name its path.
func Open(ctx context.Context, dsn string, opts Options) (*SQLRepository, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.OriginLatency < 0 {
		return nil, fmt.Errorf("product: negative origin latency %v", opts.OriginLatency)
	}
	if opts.WriteConns == 0 {
		opts.WriteConns = DefaultWriteConns(opts.MaxConns)
	}
	if opts.WriteConns < 0 || opts.WriteConns > opts.MaxConns {
		return nil, fmt.Errorf("product: write connections %d must be between 1 and the pool's %d", opts.WriteConns, opts.MaxConns)
	}
	if opts.WriteTimeout < 0 {
		return nil, fmt.Errorf("product: negative write timeout %v", opts.WriteTimeout)
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	d, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	driverName, source := "sqlite", sqliteDSN(d.Path)
	if d.Dialect == Postgres {
		driverName, source = "pgx", dsn
	}
	if !slices.Contains(sql.Drivers(), driverName) {
		return nil, fmt.Errorf("%w: %q is not registered; import _ %q", ErrNoDriver, driverName, DriversPackage)
	}
	db, err := sql.Open(driverName, source)
	if err != nil {
		return nil, fmt.Errorf("product: open %s %s: %w", d.Dialect, d, err)
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	// A connection the driver found bad is tried again until the window
	// ends: a database busy for a moment is not a misconfiguration. Any
	// other error (a missing database, a refused login) fails at once.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = db.PingContext(pctx)
	for errors.Is(err, driver.ErrBadConn) && pctx.Err() == nil {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-pctx.Done():
			t.Stop()
		}
		if pctx.Err() == nil {
			err = db.PingContext(pctx)
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("product: connect to %s %s: %w", d.Dialect, d, err)
	}
	r := newSQLRepository(db, d.Dialect, opts.OriginLatency)
	r.name = d.String()
	r.writeSlots, r.writeTimeout = make(chan struct{}, opts.WriteConns), opts.WriteTimeout
	return r, nil
}

// sqliteDSN turns a file path into a modernc DSN. Every connection waits up
// to 10s for a lock instead of failing with SQLITE_BUSY, uses WAL so readers
// never block the writer, and begins write transactions IMMEDIATE so two
// instances migrating at once serialise instead of deadlocking on a lock
// upgrade.
func sqliteDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	return "file:" + filepath.ToSlash(path) + "?" + q.Encode()
}

func newSQLRepository(db *sql.DB, d Dialect, latency time.Duration) *SQLRepository {
	r := &SQLRepository{db: db, dialect: d, latency: latency}
	r.getSQL = r.bind(`SELECT display_name, price_cents, revision, category FROM products
		WHERE tenant_id = ? AND product_id = ? AND locale = ? AND currency = ?`)
	// The row lock the UPDATE takes serialises concurrent updates of a
	// row, and each gets its own revision.
	r.updateSQL = r.bind(`UPDATE products
		SET display_name = COALESCE(?, display_name), price_cents = COALESCE(?, price_cents),
		    revision = revision + 1
		WHERE tenant_id = ? AND product_id = ? AND locale = ? AND currency = ?
		RETURNING display_name, price_cents, revision, category`)
	return r
}

// bind rewrites '?' placeholders to the dialect's ($1, $2, ... for
// PostgreSQL). The queries are constants without '?' in literals.
func (r *SQLRepository) bind(q string) string {
	if r.dialect != Postgres {
		return q
	}
	var sb strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			fmt.Fprintf(&sb, "$%d", n)
			continue
		}
		sb.WriteByte(q[i])
	}
	return sb.String()
}

// Dialect reports which database the repository talks to.
func (r *SQLRepository) Dialect() Dialect { return r.dialect }

// Name is the SQLite file's path or the PostgreSQL URL with its
// credentials redacted: safe for logs and errors.
func (r *SQLRepository) Name() string { return r.name }

// DB returns the underlying pool, for Migrate and for tests.
func (r *SQLRepository) DB() *sql.DB { return r.db }

// Get implements Repository.
func (r *SQLRepository) Get(ctx context.Context, ref Ref) (Product, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return Product{}, fmt.Errorf("product: origin connection: %w", err)
	}
	defer conn.Close()
	p := Product{ProductID: ref.ID, TenantID: ref.Tenant, Locale: ref.Locale, Currency: ref.Currency}
	err = conn.QueryRowContext(ctx, r.getSQL, ref.Tenant, ref.ID, ref.Locale, ref.Currency).Scan(&p.DisplayName, &p.PriceCents, &p.Revision, &p.Category)
	if err := r.delay(ctx); err != nil {
		return Product{}, err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrNotFound
	}
	if err != nil {
		return Product{}, fmt.Errorf("product: origin query: %w", err)
	}
	return p, nil
}

// Update implements Repository: one UPDATE ... RETURNING, which changes
// the row and bumps its revision atomically, and the outbox record of the
// revision it committed (Outbox), in one transaction.
func (r *SQLRepository) Update(ctx context.Context, ref Ref, p Patch) (Product, error) {
	if err := p.Validate(); err != nil {
		return Product{}, err
	}
	var name sql.NullString
	var price sql.NullInt64
	if p.DisplayName != nil {
		name = sql.NullString{String: *p.DisplayName, Valid: true}
	}
	if p.PriceCents != nil {
		price = sql.NullInt64{Int64: *p.PriceCents, Valid: true}
	}
	var out Product
	err := r.write(ctx, func(ctx context.Context) error {
		var err error
		out, err = r.updateWithOutbox(ctx, ref, name, price)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrNotFound
	}
	if err != nil {
		return Product{}, fmt.Errorf("product: update: %w", err)
	}
	return out, nil
}

// Ping implements Repository.
func (r *SQLRepository) Ping(ctx context.Context) error {
	return r.db.PingContext(ctx)
}

// CanServe reports whether the origin can answer product queries: it reads
// one row of the products table (with the columns Get reads). A database
// that is reachable but lost its table, or was never migrated, cannot. It
// skips OriginLatency: readiness is about the database, not the demo.
func (r *SQLRepository) CanServe(ctx context.Context) error {
	var name string
	var price, rev int64
	err := r.db.QueryRowContext(ctx, `SELECT display_name, price_cents, revision FROM products LIMIT 1`).Scan(&name, &price, &rev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("product: origin cannot serve: %w", err)
	}
	return nil
}

// Close closes the connection pool.
func (r *SQLRepository) Close() error { return r.db.Close() }

// delay waits OriginLatency, the artificial latency of demos and tests,
// after a query: the answer arrives late and describes the rows as they were
// when the query ran, as a slow query's snapshot does.
func (r *SQLRepository) delay(ctx context.Context) error {
	if r.latency <= 0 {
		return nil
	}
	t := time.NewTimer(r.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("product: origin query: %w", context.Cause(ctx))
	}
}
