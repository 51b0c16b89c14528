package product

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// BatchServed is the answer of QueryService.GetMany.
type BatchServed struct {
	// Products are the products found, in the order of the ids asked.
	Products []Product
	// Missing are the ids that do not exist, in the order asked.
	Missing []string
	// Outcomes counts the items by how each was served.
	Outcomes [driver.NumOutcomes]int
}

// GetMany returns the products sel names. In flightcache mode every id is
// read through the cache as Get reads it, and the ids no tier has are
// loaded through the service's row Batcher, with the misses of concurrent
// Gets and batches of the same selection: one origin statement per call of
// at most MaxBatchIDs ids (an id another request is loading at the moment
// is shared, not loaded again). In naive mode each id is read with the naive Get. sel.IDs must be
// distinct and valid (NewRef). A failure of any id fails the call: the
// first failure is returned, with the outcomes of every id.
func (s *QueryService) GetMany(ctx context.Context, sel Selection) (BatchServed, error) {
	if len(sel.IDs) > MaxBatchIDs {
		return BatchServed{}, &InvalidError{Field: "ids", Reason: fmt.Sprintf("at most %d ids", MaxBatchIDs)}
	}
	refs := make([]Ref, len(sel.IDs))
	keys := make([]string, len(sel.IDs))
	for i, id := range sel.IDs {
		refs[i] = Ref{Tenant: sel.Tenant, ID: id, Locale: sel.Locale, Currency: sel.Currency}
		k, err := s.key(refs[i], s.floor(refs[i]))
		if err != nil {
			return BatchServed{}, fmt.Errorf("product: build cache key: %w", err)
		}
		keys[i] = k
	}
	var out BatchServed
	if s.opts.Mode == ModeNaive {
		var first error
		for i, ref := range refs {
			sv, err := s.getNaive(ctx, ref, keys[i])
			out.Outcomes[sv.Outcome]++
			switch {
			case errors.Is(err, ErrNotFound):
				out.Missing = append(out.Missing, ref.ID)
			case err != nil:
				if first == nil {
					first = err
				}
			default:
				out.Products = append(out.Products, sv.Product)
			}
		}
		return out, first
	}

	// Every value of the batch carries the tenant's list tag, which a PUT
	// and a reprice of the tenant invalidate (see ListTag): a batch call
	// shares one set of tags, so the per-product tags of a single Get
	// (loadRow) cannot be given here.
	load := func(ctx context.Context, ks []string) (map[string]Entry, error) {
		flightcache.SetTags(ctx, ListTag(sel.Tenant))
		return s.rows.LoadMany(ctx, ks)
	}
	var first error
	for i, r := range s.opts.Cache.FetchMany(ctx, keys, load) {
		out.Outcomes[r.Outcome]++
		switch {
		case errors.Is(r.Err, flightcache.ErrNotFound):
			out.Missing = append(out.Missing, sel.IDs[i])
		case r.Err != nil:
			if first == nil {
				first = r.Err
			}
		default:
			out.Products = append(out.Products, r.Value.Product)
		}
	}
	return out, first
}
