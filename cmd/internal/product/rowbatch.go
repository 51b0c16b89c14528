package product

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/key"
)

// The service's row loads in flightcache mode go through one Batcher: the
// misses of single Gets that happen at the same moment, and the loads of
// batch reads, share one origin statement per selection (WHERE product_id
// = ANY($4) on PostgreSQL, IN (...) on SQLite). A lone miss still goes at
// once.

// rowBatchMaxDelay bounds how long a row load waits behind the statements
// of its selection at the database: a slow or hung statement (a locked
// table, a heavy row) must not hold every other miss of its tenant until it
// returns. A few of the database's round trips.
const rowBatchMaxDelay = 5 * time.Millisecond

// newRowBatcher returns the Batcher of s's row loads. A call holds the
// keys of one selection (tenant, locale, currency: rowSelection), at most
// MaxBatchIDs of them.
func newRowBatcher(s *QueryService) (*flightcache.Batcher[Entry], error) {
	return flightcache.NewBatcher(s.loadRows, flightcache.BatcherOptions{MaxKeys: MaxBatchIDs, MaxDelay: rowBatchMaxDelay, Partition: rowSelection})
}

// rowSelection is the partition of a row key: its tenant, locale and
// currency, the part of the statement that every id of a call shares.
// Everything that changes a row is in its key, so keys of different
// requests may share a call. A key that does not parse gets a partition of
// its own and fails in loadRows.
func rowSelection(k string) string {
	p, err := key.Parse(k)
	if err != nil {
		return "\x00unparsed"
	}
	return p.Tenant + "\x00" + p.Locale + "\x00" + p.Currency
}

// loadRows is the Batcher's load: one GetMany for the rows of keys (one
// Get per id on a repository without batch reads). A key absent from the
// map has no row.
func (s *QueryService) loadRows(ctx context.Context, keys []string) (map[string]Entry, error) {
	br, ok := s.repo.(BatchRepository)
	if !ok {
		br = Count(s.repo, nil)
	}
	var (
		sel     Selection
		keysOf  = make(map[string][]string, len(keys)) // id → its keys (they may differ by revision floor)
		keyErrs map[string]error
	)
	fail := func(k string, err error) {
		if keyErrs == nil {
			keyErrs = make(map[string]error)
		}
		keyErrs[k] = err
	}
	for _, k := range keys {
		p, err := key.Parse(k)
		switch {
		case err != nil:
			fail(k, fmt.Errorf("product: unreadable cache key: %w", err))
			continue
		case len(sel.IDs) == 0:
			sel.Tenant, sel.Locale, sel.Currency = p.Tenant, p.Locale, p.Currency
		case p.Tenant != sel.Tenant || p.Locale != sel.Locale || p.Currency != sel.Currency:
			// rowSelection keeps selections apart: never reached.
			fail(k, errors.New("product: keys of two selections in one call"))
			continue
		}
		if _, seen := keysOf[p.ID]; !seen {
			sel.IDs = append(sel.IDs, p.ID)
		}
		keysOf[p.ID] = append(keysOf[p.ID], k)
	}
	found := make(map[string]Entry, len(keys))
	if len(sel.IDs) > 0 {
		rows, err := br.GetMany(ctx, sel)
		if err != nil {
			return nil, err
		}
		for id, ks := range keysOf {
			if p, ok := rows[id]; ok {
				for _, k := range ks {
					found[k] = Entry{Product: p}
				}
			}
		}
	}
	if keyErrs != nil {
		return found, &flightcache.BatchError{Keys: keyErrs}
	}
	return found, nil
}

// loadRow is the LoadFunc of a single Get of ref under key k: the row's
// load joins the service's Batcher, and the policy of a single Get is
// applied to its answer (a jittered TTL that the entry records, and
// NegativeTTL for a row that does not exist).
func (s *QueryService) loadRow(ref Ref, k string) flightcache.LoadFunc[Entry] {
	load := s.rows.Load(k)
	return func(ctx context.Context) (Entry, error) {
		e, err := load(ctx)
		if errors.Is(err, flightcache.ErrNotFound) {
			flightcache.SetTTL(ctx, s.opts.NegativeTTL)
			flightcache.SetTags(ctx, ProductTag(ref.Tenant, ref.ID))
			return Entry{}, ErrNotFoundCached
		}
		if err != nil {
			return Entry{}, err
		}
		// A single Get's value carries its own product's and category's
		// tags, on its own flight: the Batcher's call, shared with other
		// keys, sets none.
		flightcache.SetTags(ctx, ProductTag(ref.Tenant, ref.ID), CategoryTag(ref.Tenant, e.Product.Category))
		ttl := s.jitteredTTL()
		flightcache.SetTTL(ctx, ttl)
		e.FreshUntil = s.opts.Now().Add(ttl)
		return e, nil
	}
}
