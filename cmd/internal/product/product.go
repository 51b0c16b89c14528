// Package product is the domain of productd, the reference service: the
// Product value, the Repository that reads it from the origin database
// (SQLite or PostgreSQL), the schema migration and demo catalog, and the
// QueryService that puts a cache in front of the repository.
package product

import (
	"context"
	"errors"
	"fmt"
)

// Product is one row of the catalog: a product as shown to one tenant's
// customers in one locale and currency. Values are immutable once built:
// the cache hands the same Product to many requests.
type Product struct {
	ProductID   string `json:"productId"`
	TenantID    string `json:"tenantId"`
	DisplayName string `json:"displayName"`
	PriceCents  int64  `json:"priceCents"`
	Currency    string `json:"currency"`
	Locale      string `json:"locale"`
	// Category is the product's category (CategoryOf its ID), the same
	// in every locale and currency; a reprice changes a whole category.
	Category string `json:"category"`
	// Revision is the row's version in the origin: 0 as seeded, bumped by
	// one in the transaction of every update. It lives with the data, so
	// every process, before and after a restart, agrees on which data a
	// revision names.
	Revision int64 `json:"revision"`
}

// Ref identifies one row of the catalog: the primary key of the products
// table. Build it with NewRef so that every field is validated and
// normalised; the zero Ref is invalid.
type Ref struct {
	Tenant   string
	ID       string
	Locale   string
	Currency string
}

// Patch is an update of a product row. Nil fields are left unchanged; a
// Patch with no field set is rejected.
type Patch struct {
	DisplayName *string `json:"displayName,omitempty"`
	PriceCents  *int64  `json:"priceCents,omitempty"`
}

// Limits of a Patch.
const (
	MaxDisplayNameLen = 200
	MaxPriceCents     = 1_000_000_000_00 // one billion in major units
)

// Validate reports a *InvalidError for a Patch that sets nothing or sets a
// value out of range.
func (p Patch) Validate() error {
	if p.DisplayName == nil && p.PriceCents == nil {
		return &InvalidError{Field: "body", Reason: "set displayName, priceCents or both"}
	}
	if p.DisplayName != nil {
		if err := checkDisplayName(*p.DisplayName); err != nil {
			return err
		}
	}
	if p.PriceCents != nil && (*p.PriceCents < 0 || *p.PriceCents > MaxPriceCents) {
		return &InvalidError{Field: "priceCents", Reason: fmt.Sprintf("must be between 0 and %d", int64(MaxPriceCents))}
	}
	return nil
}

// Repository is the origin: the source of truth behind the cache. Every
// method must be safe for concurrent use.
type Repository interface {
	// Get returns the product row ref names, or an error matching
	// ErrNotFound.
	Get(ctx context.Context, ref Ref) (Product, error)
	// Update applies p to the row ref names and bumps its Revision in the
	// same transaction; it returns the row as committed. A missing row is
	// an error matching ErrNotFound.
	Update(ctx context.Context, ref Ref, p Patch) (Product, error)
	// Ping reports whether the origin is reachable.
	Ping(ctx context.Context) error
}

// ErrNotFound is matched by a Repository's error for a row that does not
// exist.
var ErrNotFound = errors.New("product: not found")

// ErrInvalid is matched (errors.Is) by every *InvalidError.
var ErrInvalid = errors.New("product: invalid input")

// InvalidError reports a request field that failed validation. It never
// holds the rejected value: values are request input, and echoing them into
// logs or error bodies invites injection.
type InvalidError struct {
	Field  string // "tenant", "id", "locale", "currency", "displayName", "priceCents", "body"
	Reason string
}

func (e *InvalidError) Error() string {
	return "product: invalid " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }
