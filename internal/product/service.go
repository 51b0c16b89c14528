package product

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/key"
)

// Mode selects how the QueryService reaches the origin on a miss.
type Mode string

// The modes.
const (
	// ModeFlightcache reads through a flightcache.Cache: one origin query
	// per key at a time, whatever the number of concurrent misses.
	ModeFlightcache Mode = "flightcache"
	// ModeNaive is plain cache-aside with no coordination (the seed's
	// getProductBadAsync): every concurrent miss queries the origin. It
	// exists to show the herd; never run it in production.
	ModeNaive Mode = "naive"
)

// ParseMode parses a Mode name.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeFlightcache, ModeNaive:
		return Mode(s), nil
	}
	return "", fmt.Errorf("product: unknown mode %q (want %q or %q)", s, ModeFlightcache, ModeNaive)
}

// Entry is what the cache stores for a product: the row and the instant it
// stops being fresh. The cache keeps its own expiry too; Entry carries a copy
// so that every response can state its remaining TTL (Cache-Status ttl).
type Entry struct {
	Product    Product   `json:"product"`
	FreshUntil time.Time `json:"freshUntil"`
}

// Served is the answer of QueryService.Get.
type Served struct {
	Product Product
	// Outcome says how the request was served (naive mode reports only
	// OutcomeHitLocal and OutcomeLoaded).
	Outcome flightcache.Outcome
	// TTL is the remaining freshness of the value served, negative for a
	// stale value; meaningful only when TTLKnown.
	TTL      time.Duration
	TTLKnown bool
}

// ServiceOptions configures a QueryService.
type ServiceOptions struct {
	// Mode is ModeFlightcache (default) or ModeNaive.
	Mode Mode
	// Cache serves ModeFlightcache. Its TTL and NegativeTTL should match
	// the fields below, which the loader applies with flightcache.SetTTL.
	Cache *flightcache.Cache[Entry]
	// Naive is the store ModeNaive reads and writes without coordination.
	Naive flightcache.LocalStore[Entry]
	// TTL is the freshness of a loaded product; Jitter in [0, 0.5]
	// shortens each TTL by a random fraction, so values loaded together do
	// not expire together.
	TTL    time.Duration
	Jitter float64
	// NegativeTTL is how long a "not found" is cached (flightcache mode).
	NegativeTTL time.Duration
	// LoaderTimeout bounds an origin query in naive mode (the Cache has its
	// own).
	LoaderTimeout time.Duration
	// PolicyVersion goes into every key; bump it when Entry or the caching
	// policy changes so old and new instances never share entries.
	PolicyVersion string
	Logger        *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// QueryService reads products through a cache and updates them in the
// origin, invalidating what it cached. It is safe for concurrent use.
//
// Invalidation: every key carries the product's revision, a counter kept
// in this process and bumped by Update after the origin has committed. A
// Get that starts after Update returned builds a key of the new revision,
// so it can neither hit a value cached before the update nor join a load
// that began before it: a GET after a PUT never returns the old data (in
// this process; a second instance sharing Redis sees the update once its
// local entry expires, see docs/productd.md). Update also deletes the
// superseded keys of every variant so they do not linger in memory or in
// Redis.
type QueryService struct {
	repo Repository
	opts ServiceOptions
	keys key.Builder
	// revs maps tenant+"/"+id to *atomic.Uint64, the revision of a product
	// that was updated at least once since start; absent means 0. It grows
	// by one entry per distinct product updated, bounded by the catalog.
	revs sync.Map
}

// NewQueryService returns a service over repo.
func NewQueryService(repo Repository, opts ServiceOptions) (*QueryService, error) {
	if repo == nil {
		return nil, errors.New("product: nil repository")
	}
	if opts.Mode == "" {
		opts.Mode = ModeFlightcache
	}
	switch opts.Mode {
	case ModeFlightcache:
		if opts.Cache == nil {
			return nil, errors.New("product: flightcache mode needs a Cache")
		}
	case ModeNaive:
		if opts.Naive == nil {
			return nil, errors.New("product: naive mode needs a store")
		}
	default:
		return nil, fmt.Errorf("product: unknown mode %q", opts.Mode)
	}
	if opts.TTL <= 0 || opts.NegativeTTL <= 0 {
		return nil, errors.New("product: TTL and NegativeTTL must be positive")
	}
	if opts.Jitter < 0 || opts.Jitter > 0.5 {
		return nil, errors.New("product: Jitter must be in [0, 0.5]")
	}
	if opts.LoaderTimeout <= 0 {
		opts.LoaderTimeout = 10 * time.Second
	}
	if opts.PolicyVersion == "" {
		opts.PolicyVersion = "1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &QueryService{
		repo: repo,
		opts: opts,
		keys: key.New("product").Version(opts.PolicyVersion).
			Require(key.DimTenant, key.DimID, key.DimLocale, key.DimCurrency, "rev"),
	}, nil
}

// Mode reports the service's mode.
func (s *QueryService) Mode() Mode { return s.opts.Mode }

// notFound is the loader's "not found": it matches both this package's
// ErrNotFound (for handlers) and flightcache.ErrNotFound (so the Cache
// stores a tombstone).
type notFound struct{}

func (notFound) Error() string { return "product: not found" }

func (notFound) Is(target error) bool {
	return target == ErrNotFound || target == flightcache.ErrNotFound
}

// ErrNotFoundCached is what Get returns for a product that does not exist;
// it matches ErrNotFound and flightcache.ErrNotFound.
var ErrNotFoundCached error = notFound{}

func (s *QueryService) revision(ref Ref) uint64 {
	if v, ok := s.revs.Load(ref.Tenant + "/" + ref.ID); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

func (s *QueryService) key(ref Ref, rev uint64) (string, error) {
	return s.keys.Tenant(ref.Tenant).ID(ref.ID).Locale(ref.Locale).Currency(ref.Currency).
		Dim("rev", strconv.FormatUint(rev, 10)).Build()
}

func (s *QueryService) jitteredTTL() time.Duration {
	if s.opts.Jitter == 0 {
		return s.opts.TTL
	}
	return time.Duration(float64(s.opts.TTL) * (1 - s.opts.Jitter*rand.Float64()))
}

// Get returns the product ref names. A product that does not exist is an
// error matching ErrNotFound (cached for NegativeTTL in flightcache mode).
func (s *QueryService) Get(ctx context.Context, ref Ref) (Served, error) {
	k, err := s.key(ref, s.revision(ref))
	if err != nil {
		return Served{}, fmt.Errorf("product: build cache key: %w", err)
	}
	if s.opts.Mode == ModeNaive {
		return s.getNaive(ctx, ref, k)
	}
	load := func(ctx context.Context) (Entry, error) {
		p, err := s.repo.Get(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			flightcache.SetTTL(ctx, s.opts.NegativeTTL)
			return Entry{}, ErrNotFoundCached
		}
		if err != nil {
			return Entry{}, err
		}
		ttl := s.jitteredTTL()
		flightcache.SetTTL(ctx, ttl)
		return Entry{Product: p, FreshUntil: s.opts.Now().Add(ttl)}, nil
	}
	r, err := s.opts.Cache.Fetch(ctx, k, load)
	sv := Served{Product: r.Value.Product, Outcome: r.Outcome}
	if err != nil {
		if errors.Is(err, flightcache.ErrNotFound) {
			// A tombstone's remaining life is NegativeTTL minus its age;
			// the loader set NegativeTTL without jitter, so it is exact.
			sv.TTL, sv.TTLKnown = s.opts.NegativeTTL-r.Age, true
			return sv, ErrNotFoundCached
		}
		return sv, err
	}
	if !r.Value.FreshUntil.IsZero() {
		sv.TTL, sv.TTLKnown = r.Value.FreshUntil.Sub(s.opts.Now()), true
	}
	return sv, nil
}

// getNaive is getProductBadAsync: look, miss, query, store. Nothing stops
// a thousand concurrent misses from making a thousand queries.
func (s *QueryService) getNaive(ctx context.Context, ref Ref, k string) (Served, error) {
	now := s.opts.Now()
	if it, ok := s.opts.Naive.Get(k); ok && now.Before(it.FreshUntil) {
		return Served{Product: it.Value.Product, Outcome: flightcache.OutcomeHitLocal, TTL: it.FreshUntil.Sub(now), TTLKnown: true}, nil
	}
	lctx, cancel := context.WithTimeout(ctx, s.opts.LoaderTimeout)
	defer cancel()
	p, err := s.repo.Get(lctx, ref)
	if errors.Is(err, ErrNotFound) {
		return Served{Outcome: flightcache.OutcomeLoadFailed}, ErrNotFoundCached
	}
	if err != nil {
		return Served{Outcome: flightcache.OutcomeLoadFailed}, err
	}
	ttl := s.jitteredTTL()
	end := s.opts.Now()
	e := Entry{Product: p, FreshUntil: end.Add(ttl)}
	s.opts.Naive.Set(k, flightcache.Item[Entry]{Value: e, Meta: flightcache.Meta{
		FreshUntil: e.FreshUntil, StaleUntil: e.FreshUntil, LoadedAt: end, LoadDuration: end.Sub(now),
	}})
	return Served{Product: p, Outcome: flightcache.OutcomeLoaded, TTL: ttl, TTLKnown: true}, nil
}

// Update applies p to the origin row, then invalidates every cached variant
// of the product. When it returns nil, every later Get in this process sees
// the update.
func (s *QueryService) Update(ctx context.Context, ref Ref, p Patch) (Product, error) {
	out, variants, err := s.repo.Update(ctx, ref, p)
	if err != nil {
		return Product{}, err
	}
	v, _ := s.revs.LoadOrStore(ref.Tenant+"/"+ref.ID, new(atomic.Uint64))
	old := v.(*atomic.Uint64).Add(1) - 1
	// Cleanup of the superseded keys. Correctness does not depend on it
	// (the revision already moved), so a failure is logged, not returned:
	// the update is committed and must be reported as such.
	for _, vr := range variants {
		vref := Ref{Tenant: ref.Tenant, ID: ref.ID, Locale: vr.Locale, Currency: vr.Currency}
		k, err := s.key(vref, old)
		if err != nil {
			continue // a variant stored with a value no Get could ask for
		}
		if s.opts.Mode == ModeNaive {
			s.opts.Naive.Delete(k)
			continue
		}
		if err := s.opts.Cache.Delete(context.WithoutCancel(ctx), k); err != nil {
			s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "product: deleting a superseded cache entry failed",
				slog.String("tenant", ref.Tenant), slog.Any("error", err))
		}
	}
	return out, nil
}

// Ping reports whether the origin is reachable.
func (s *QueryService) Ping(ctx context.Context) error { return s.repo.Ping(ctx) }
