package product

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// MaxBatchIDs bounds the ids of one batch read: one page of a listing, and
// far below SQLite's limit of bound parameters.
const MaxBatchIDs = 100

// Selection names several products of one tenant in one locale and
// currency: what a listing page asks the origin for.
type Selection struct {
	Tenant   string
	Locale   string
	Currency string
	// IDs are distinct, validated product ids; at most MaxBatchIDs.
	IDs []string
}

// BatchRepository is a Repository that reads a Selection in one
// statement.
type BatchRepository interface {
	Repository
	// GetMany returns the rows of sel keyed by product id; an id without a
	// row is absent from the map.
	GetMany(ctx context.Context, sel Selection) (map[string]Product, error)
}

var (
	_ BatchRepository = (*SQLRepository)(nil)
	_ BatchRepository = (*MemoryRepository)(nil)
	_ BatchRepository = (*CountingRepository)(nil)
)

// GetMany implements BatchRepository with one SELECT: product_id IN
// (?, …) on SQLite, product_id = ANY($4) on PostgreSQL (one parameter, one
// prepared shape whatever the number of ids). OriginLatency is paid once,
// after the query as for one Get: it stands for the round trip.
func (r *SQLRepository) GetMany(ctx context.Context, sel Selection) (map[string]Product, error) {
	if len(sel.IDs) == 0 {
		return map[string]Product{}, nil
	}
	if len(sel.IDs) > MaxBatchIDs {
		return nil, &InvalidError{Field: "ids", Reason: fmt.Sprintf("at most %d ids", MaxBatchIDs)}
	}
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("product: origin connection: %w", err)
	}
	defer conn.Close()
	const head = `SELECT product_id, display_name, price_cents, revision, category FROM products
		WHERE tenant_id = $1 AND locale = $2 AND currency = $3 AND product_id `
	var q string
	args := []any{sel.Tenant, sel.Locale, sel.Currency}
	if r.dialect == Postgres {
		q = head + `= ANY($4)`
		args = append(args, sel.IDs)
	} else {
		// SQLite numbers ?NNN / $NNN parameters as PostgreSQL does.
		var sb strings.Builder
		sb.WriteString(head + `IN (`)
		for i, id := range sel.IDs {
			if i > 0 {
				sb.WriteString(", ")
			}
			fmt.Fprintf(&sb, "$%d", i+4)
			args = append(args, id)
		}
		sb.WriteString(")")
		q = sb.String()
	}
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("product: origin query: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Product, len(sel.IDs))
	for rows.Next() {
		p := Product{TenantID: sel.Tenant, Locale: sel.Locale, Currency: sel.Currency}
		if err := rows.Scan(&p.ProductID, &p.DisplayName, &p.PriceCents, &p.Revision, &p.Category); err != nil {
			return nil, fmt.Errorf("product: origin query: %w", err)
		}
		out[p.ProductID] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("product: origin query: %w", err)
	}
	if err := r.delay(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// GetMany implements BatchRepository.
func (m *MemoryRepository) GetMany(ctx context.Context, sel Selection) (map[string]Product, error) {
	return getEach(ctx, m.Get, sel)
}

// getEach answers a selection with one get per id, for repositories without
// a batch query: the found products by id, the missing ones left out.
func getEach(ctx context.Context, get func(context.Context, Ref) (Product, error), sel Selection) (map[string]Product, error) {
	out := make(map[string]Product, len(sel.IDs))
	for _, id := range sel.IDs {
		p, err := get(ctx, Ref{Tenant: sel.Tenant, ID: id, Locale: sel.Locale, Currency: sel.Currency})
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[id] = p
		}
	}
	return out, nil
}
