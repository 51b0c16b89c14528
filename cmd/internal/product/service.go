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
	"github.com/flightcache/flightcache/cmd/internal/ratelog"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/key"
)

// Mode selects how the QueryService reaches the origin on a miss.
type Mode string

// The modes.
const (
	// ModeFlightcache reads through a flightcache.Cache: one origin query
	// per key at a time, whatever the number of concurrent misses.
	ModeFlightcache Mode = "flightcache"
	// ModeNaive is plain cache-aside with no coordination (look, miss,
	// query, store): every concurrent miss queries the origin. It
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
	// StaleCause is, with OutcomeStale, why the fresh value did not arrive:
	// the origin's error, a *flightcache.ThrottledError (the origin was not
	// asked), or flightcache.ErrSoftTimeout. It is known only when the
	// Cache's Observer comes from WatchStale; nil otherwise.
	StaleCause error
	// Scope is, with OutcomeCoalesced, where the load this request shared
	// ran: flightcache.ScopeLocal in this process, ScopeCluster on another
	// instance (cluster mode). ScopeNone otherwise.
	Scope flightcache.Scope
}

// ServiceOptions configures a QueryService.
type ServiceOptions struct {
	// Mode is ModeFlightcache (default) or ModeNaive.
	Mode Mode
	// Cache serves ModeFlightcache. Its TTL and NegativeTTL should match
	// the fields below, which the loader applies with flightcache.SetTTL.
	Cache *flightcache.Cache[Entry]
	// Naive is the store ModeNaive reads and writes without coordination.
	Naive driver.LocalStore[Entry]
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
	// policy changes so old and new instances never share entries. Default
	// DefaultPolicyVersion.
	PolicyVersion string
	// InvalidateTimeout bounds the cache deletes that follow a committed
	// Update, all of them together; default 1s. The product's tag
	// invalidations run before them, whatever they take. Each
	// invalidation is published on the Cache's Bus on the Cache's own
	// SharedTimeout, so with a hung Redis an Update may wait up to one
	// SharedTimeout more per invalidation.
	InvalidateTimeout time.Duration
	// OnInvalidateFailed, if set, is called once per cache invalidation
	// (a delete, a tag invalidation) that failed after an Update or a
	// Reprice, including one the Cache could not publish to the other
	// instances (productd counts them in a metric).
	OnInvalidateFailed func()
	// OnTagInvalidation, if set, is called once per tag invalidation made
	// (by an Update, a Reprice or the outbox relay), with the tag's kind
	// and the Cache's answer: nil, or an error (the local part is done
	// whatever it says; see flightcache.Cache.InvalidateTag).
	OnTagInvalidation func(kind TagKind, err error)
	// CreatedSince, if set, is asked on every cached "not found" that Get
	// is about to answer (flightcache mode), with the time the "not found"
	// was stored: true means the product was created after it, possibly on
	// another instance, so Get drops the tombstone and loads again. It
	// must answer false when it cannot tell (productd's asks Redis, bounded
	// by -redis-timeout and its breaker).
	CreatedSince func(ctx context.Context, ref Ref, since time.Time) bool
	Logger       *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultPolicyVersion is ServiceOptions.PolicyVersion's default. It was
// "1" while the revision in keys was a per-process counter; "2" keys carry
// the origin's revision floor; "3" entries carry the product's category and
// its tags (which "2" instances neither set nor invalidate), so no two of
// them read each other's entries.
const DefaultPolicyVersion = "3"

// QueryService reads products through a cache and updates them in the
// origin, invalidating what it cached. It is safe for concurrent use.
//
// Read-your-writes: every cache key carries a revision floor, the highest
// revision of the row that an Update in this process has committed (0 when
// none has). Revisions are assigned by the origin, one per committed update
// of a row, so exactly one process ever learns a given floor above 0, and
// only after the origin committed it. A value cached under key (row, f)
// was therefore loaded either by a process whose floor was 0 (f = 0) or by
// this process after it committed revision f: its revision is at least f.
// So once Update has returned revision r, every later Get in this process
// returns revision r or newer, whatever other processes (or an earlier
// run of this one) wrote into a shared tier.
//
// Other processes: Update invalidates every variant of the product with
// one Cache.InvalidateTag of its product tag (and one of its tenant's list
// tag, for copies read in a batch; see ProductTag), which the Cache's Bus
// (productd: Redis pub/sub) carries to every instance sharing it. No
// instance walks its tiers: each compares a tagged value's read time with
// the tag's fence when it reads it. They drop what they hold
// of the product and reload it within the bus's delivery time while the
// bus is up; otherwise within the longer of the Cache's BusDownTTL and the
// time their bus takes to notice it is down. Without a Bus they keep
// serving what they cached until it expires. docs/productd.md has the
// bounds, and what the bus cannot cover.
type QueryService struct {
	repo Repository
	opts ServiceOptions
	keys key.Builder
	// floors maps a row (Ref) to *atomic.Int64, the highest revision an
	// Update of this process committed for it; absent means 0. It only
	// grows, and by at most one entry per distinct row updated, bounded by
	// the catalog.
	floors sync.Map
	// invalidateWarn rate-limits the warning about failed invalidations:
	// with Redis down, every PUT would log one.
	invalidateWarn *ratelog.Limiter
	// rows batches the row loads of flightcache mode (rowbatch.go).
	rows *flightcache.Batcher[Entry]
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
		opts.PolicyVersion = DefaultPolicyVersion
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.InvalidateTimeout <= 0 {
		opts.InvalidateTimeout = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &QueryService{
		repo:           repo,
		opts:           opts,
		invalidateWarn: ratelog.New(opts.Logger, time.Second),
		keys:           keyBuilder(opts.PolicyVersion),
	}
	var err error
	if s.rows, err = newRowBatcher(s); err != nil {
		return nil, err
	}
	return s, nil
}

// keyBuilder builds the cache keys of the policy version: every dimension
// of a row, and its revision floor.
func keyBuilder(policyVersion string) key.Builder {
	return key.New("product").Version(policyVersion).
		Require(key.DimTenant, key.DimID, key.DimLocale, key.DimCurrency, "rev")
}

// rowKey is the cache key of ref's row at revision floor under keys.
func rowKey(keys key.Builder, ref Ref, floor int64) (string, error) {
	return keys.Tenant(ref.Tenant).ID(ref.ID).Locale(ref.Locale).Currency(ref.Currency).
		Dim("rev", strconv.FormatInt(floor, 10)).Build()
}

// CacheKey is the cache key under which a QueryService with the default
// PolicyVersion caches ref's row for a process whose revision floor of
// the row is floor (0 for every process that never updated it; see
// QueryService). Tools that read the shared tier past the service, such as
// the history checker, find the row's entry under it.
func CacheKey(ref Ref, floor int64) (string, error) {
	return rowKey(keyBuilder(DefaultPolicyVersion), ref, floor)
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

// floor is the highest revision of ref that an Update in this process
// committed, 0 if none.
func (s *QueryService) floor(ref Ref) int64 {
	if v, ok := s.floors.Load(ref); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// raiseFloor makes ref's floor at least rev and returns the floor it
// replaced. Concurrent Updates of one row may return out of order; the
// floor keeps the highest.
func (s *QueryService) raiseFloor(ref Ref, rev int64) (old int64) {
	v, _ := s.floors.LoadOrStore(ref, new(atomic.Int64))
	f := v.(*atomic.Int64)
	for {
		old = f.Load()
		if old >= rev || f.CompareAndSwap(old, rev) {
			return old
		}
	}
}

func (s *QueryService) key(ref Ref, floor int64) (string, error) {
	return rowKey(s.keys, ref, floor)
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
	k, err := s.key(ref, s.floor(ref))
	if err != nil {
		return Served{}, fmt.Errorf("product: build cache key: %w", err)
	}
	if s.opts.Mode == ModeNaive {
		return s.getNaive(ctx, ref, k)
	}
	load := s.loadRow(ref, k) // concurrent misses share one statement
	note := new(staleNote)
	r, err := s.opts.Cache.Fetch(context.WithValue(ctx, staleNoteKey{}, note), k, load)
	if r.Outcome == flightcache.OutcomeNegativeHit && s.opts.CreatedSince != nil && s.opts.CreatedSince(ctx, ref, s.opts.Now().Add(-r.Age)) {
		// Another instance created the product after this tombstone was
		// stored: it deleted the tombstone where it could (its memory,
		// Redis) but not in this instance's memory. The tombstone stored
		// by the load below is younger than the creation, so a creation
		// that failed after it was announced costs one reload, not one
		// per request.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.InvalidateTimeout)
		derr := s.opts.Cache.Delete(dctx, k)
		cancel()
		if derr != nil {
			s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "product: dropping a cached not-found of a product created elsewhere failed",
				slog.Any("error", derr))
		}
		note = new(staleNote)
		r, err = s.opts.Cache.Fetch(context.WithValue(ctx, staleNoteKey{}, note), k, load)
	}
	sv := Served{Product: r.Value.Product, Outcome: r.Outcome, Scope: r.Scope}
	if r.Outcome == flightcache.OutcomeStale {
		sv.StaleCause = note.why
	}
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
		// The entry says how long it is fresh, but an entry read from Redis
		// may come from anyone who can write there: the Cache keeps no
		// value fresh past TTL from its load (its MaxTTL), so the header
		// never claims more.
		if limit := s.opts.TTL - r.Age; s.opts.TTL > 0 && sv.TTL > limit {
			sv.TTL = limit
		}
		// The entry's FreshUntil was set on the wall clock inside the load;
		// the Cache judged the value expired on its own clock (a coarse
		// clock, whose lag at the load's end can exceed its lag now on a
		// busy machine). A value served stale is never shown as fresh.
		if r.Outcome == flightcache.OutcomeStale && sv.TTL > 0 {
			sv.TTL = -time.Nanosecond
		}
	}
	return sv, nil
}

// getNaive is uncoordinated cache-aside: look, miss, query, store. Nothing stops
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
	s.opts.Naive.Set(k, driver.Item[Entry]{Value: e, Meta: driver.Meta{
		FreshUntil: e.FreshUntil, StaleUntil: e.FreshUntil, LoadedAt: end, LoadDuration: end.Sub(now),
	}})
	return Served{Product: p, Outcome: flightcache.OutcomeLoaded, TTL: ttl, TTLKnown: true}, nil
}

// Update applies p to the origin row, raises the row's revision floor in
// this process to the committed revision, then invalidates what the caches
// hold of the product. When it returns nil, every later Get in this
// process returns the update or a newer revision.
//
// The invalidation is cleanup, bounded and best-effort: correctness in
// this process does not depend on it (the floor already moved). It is
// what makes other processes see the update, in two steps (flightcache
// mode):
//
//  1. Invalidate every value of the product (every locale, currency and
//     floor) with one Cache.InvalidateTag of its ProductTag, and its
//     tenant's ListTag (copies read in a batch): this process at once,
//     every other instance through the Cache's Bus, which also retains
//     it for the instances that are down and replays it before they trust
//     their memory again. Every instance then ignores the tiers' older
//     values carrying the tags and reloads them; nothing walks a tier.
//     Variants the update did not touch are reloaded once too. It comes
//     first: it is the fence, and it must not wait behind the deletes
//     when Redis is slow.
//  2. Delete, in every tier, the keys superseded floors may have filled:
//     floor 0, the one every process that never updated the row reads,
//     and the previous revision's floor, the one the process that wrote
//     it reads, so that the shared tier no longer holds the old row even
//     for a process that keeps no fences.
//
// A failed step is logged and counted (OnInvalidateFailed), never
// returned: the update is committed and must be reported as such. Naive
// mode deletes the superseded floors from its store, nothing else.
func (s *QueryService) Update(ctx context.Context, ref Ref, p Patch) (Product, error) {
	out, err := s.repo.Update(ctx, ref, p)
	if err != nil {
		return Product{}, err
	}
	old := s.raiseFloor(ref, out.Revision)
	if s.invalidate(ctx, ref, out.Revision, old, s.invalidateFailed) {
		s.outboxDone(ctx, OutboxRecord{Ref: ref, Revision: out.Revision})
	}
	return out, nil
}

// invalidate makes the invalidation of an Update of ref that committed
// revision, in this process whose floor for ref was old (0 for a relay:
// floor 0 is the one every process that never updated the row reads), and
// reports whether every step succeeded. Each failed step goes to failed:
// an Update's are counted (OnInvalidateFailed) and logged; a relay's only
// logged, since the relay counts its own tries (RelayOptions.OnFailed).
func (s *QueryService) invalidate(ctx context.Context, ref Ref, revision, old int64, failed func(ctx context.Context, msg string, err error)) bool {
	stale := []int64{0}
	if old > 0 {
		stale = append(stale, old)
	}
	if prev := revision - 1; prev > 0 && prev != old {
		stale = append(stale, prev)
	}
	if s.opts.Mode == ModeNaive {
		for _, f := range stale {
			if k, err := s.key(ref, f); err == nil { // f is a number and ref was validated
				s.opts.Naive.Delete(k)
			}
		}
		return true
	}
	// First the step that reaches the other instances: it fences every
	// variant everywhere (and the Bus retains it for instances that are
	// down), so nothing older can be trusted again, even while Redis is
	// too slow for the deletes below. Its local part is immediate; the
	// Cache bounds its publish by its SharedTimeout, and redoes it when
	// Redis is back.
	ok := s.invalidateTags(ctx, failed, TagProduct, ProductTag(ref.Tenant, ref.ID))
	ok = s.invalidateTags(ctx, failed, TagList, ListTag(ref.Tenant)) && ok
	// The request may end as soon as the update is committed; the cleanup
	// runs on its own deadline.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.InvalidateTimeout)
	defer cancel()
	for _, f := range stale {
		k, err := s.key(ref, f)
		if err != nil {
			continue // unreachable: ref was validated and f is a number
		}
		if err := s.opts.Cache.Delete(dctx, k); err != nil {
			ok = false
			failed(ctx, "product: invalidating a superseded cache entry failed; other instances may serve the old value until it expires", err)
		}
	}
	return ok
}

// invalidateTags invalidates tag, of kind, on every instance, and reports
// whether the Cache did all of it (its publish included); a failure goes
// to failed.
func (s *QueryService) invalidateTags(ctx context.Context, failed func(ctx context.Context, msg string, err error), kind TagKind, tag string) bool {
	err := s.opts.Cache.InvalidateTag(context.WithoutCancel(ctx), tag)
	if s.opts.OnTagInvalidation != nil {
		s.opts.OnTagInvalidation(kind, err)
	}
	if err != nil {
		failed(ctx, "product: invalidating a "+string(kind)+" tag on every instance failed; other instances may serve the old values longer (see the bus state in /readyz)", err)
		return false
	}
	return true
}

// outboxDone deletes rec from the repository's outbox, if it keeps one:
// its invalidation was made. A failure leaves it for a relay, which makes
// the invalidation once more.
func (s *QueryService) outboxDone(ctx context.Context, rec OutboxRecord) {
	o, ok := OutboxOf(s.repo)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.InvalidateTimeout)
	defer cancel()
	if err := o.Done(dctx, rec); err != nil {
		s.invalidateWarn.Log(ctx, slog.LevelWarn, "product: clearing an outbox record failed; a relay will make its invalidation again", slog.Any("error", err))
	}
}

// RelayOptions configure QueryService.RelayOutbox.
type RelayOptions struct {
	// Every is how often the relay looks for records. Default 1s.
	Every time.Duration
	// Grace is how old a record must be before the relay takes it: the
	// writer makes its own invalidation at once and deletes the record,
	// and a relay that did not wait would make it again on every
	// instance. Default 2s.
	Grace time.Duration
	// Batch bounds the records claimed at once. Default 100.
	Batch int
	// ClaimFor is how long a claimed record is left to the relay that
	// claimed it before another may take it: a relay that died holding
	// records (its instance killed during a Redis outage, say) delays
	// them by at most this much, and a relay slower than this over its
	// batch lets another make some of its invalidations twice. Default
	// Grace, or Every if longer: the delay a record's grace already
	// allows, so that the relays' bound on a record (Every + Grace after
	// Redis is back) holds with the claim of a dead relay in the way.
	ClaimFor time.Duration
	// OnRelayed, if set, is called for every record whose invalidation
	// the relay made and deleted; OnFailed for every failed claim, every
	// record whose invalidation failed (it and the rest of its batch stay
	// for the next round), and every relayed record it could not delete.
	// The relay runs them one at a time.
	OnRelayed, OnFailed func()
}

// RelayOutbox makes, until ctx ends, the invalidations that committed
// Updates and Reprices left undone (OutboxRecord): every o.Every it
// claims the oldest records older than o.Grace, o.Batch at a time
// (Outbox.Claim), makes each one's invalidation as its writer would have
// (an Update's: the product's and list tags on every instance, the
// superseded entries of the shared tier; a Reprice's: the category's and
// list tags) and deletes it, and claims again until the outbox holds no such record
// or an invalidation failed. A failed record, and the rest of its batch,
// are released for the next round. Every instance may run it: the
// relays share the records instead of making each invalidation once per
// instance; one is made twice only when its relay dies, or takes longer
// than o.ClaimFor over its batch, before deleting it. It returns at once
// when the repository keeps no outbox (OutboxOf) or in naive mode.
func (s *QueryService) RelayOutbox(ctx context.Context, o RelayOptions) {
	outbox, ok := OutboxOf(s.repo)
	if !ok || s.opts.Mode != ModeFlightcache {
		return
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 2 * time.Second
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.ClaimFor <= 0 {
		o.ClaimFor = max(o.Grace, o.Every)
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for s.relayBatch(ctx, outbox, o) {
			// Drain: claim the next batch at once.
		}
	}
}

// relayBatch claims and relays one batch of records, and reports whether
// the outbox may hold more for now: the batch was full and every record
// of it was relayed.
func (s *QueryService) relayBatch(ctx context.Context, outbox Outbox, o RelayOptions) (more bool) {
	count := func(f func()) {
		if f != nil {
			f()
		}
	}
	recs, err := outbox.Claim(ctx, s.opts.Now().Add(-o.Grace), o.Batch, o.ClaimFor)
	if err != nil {
		if ctx.Err() == nil {
			count(o.OnFailed)
			s.invalidateWarn.Log(ctx, slog.LevelWarn, "product: reading the outbox failed; pending invalidations wait for the next round", slog.Any("error", err))
		}
		return false
	}
	made := 0
	for _, rec := range recs {
		if ctx.Err() != nil || !s.redo(ctx, rec) {
			break
		}
		made++
	}
	// One statement deletes the records whose invalidations were made;
	// the others (Redis or the database failed, or the relay stops) are
	// released at once, for the next round here or on another instance.
	// Both are database writes, bounded by the repository's own write
	// deadline (Options.WriteTimeout), not by ctx, which a stopping relay
	// has ended, nor by InvalidateTimeout, which is the cache's: a delete
	// that a loaded database commits after a second is not a failure.
	dctx := context.WithoutCancel(ctx)
	if err := outbox.Done(dctx, recs[:made]...); err != nil {
		s.invalidateWarn.Log(ctx, slog.LevelWarn, "product: clearing relayed outbox records failed; they wait until their claim runs out", slog.Any("error", err))
		for range made {
			count(o.OnFailed)
		}
		return false
	}
	for range made {
		count(o.OnRelayed)
	}
	if made < len(recs) {
		if ctx.Err() == nil {
			count(o.OnFailed)
		}
		if err := outbox.Release(dctx, recs[made:]...); err != nil {
			s.invalidateWarn.Log(ctx, slog.LevelWarn, "product: releasing outbox records failed; they wait until their claim runs out", slog.Any("error", err))
		}
		return false
	}
	return len(recs) == o.Batch
}

// redo makes rec's invalidation as its writer would have (an Update's or
// a Reprice's), and reports whether every step succeeded.
func (s *QueryService) redo(ctx context.Context, rec OutboxRecord) bool {
	if rec.Category != "" {
		return s.invalidateCategory(ctx, rec.Ref.Tenant, rec.Category, s.relayFailed)
	}
	return s.invalidate(ctx, rec.Ref, rec.Revision, 0, s.relayFailed)
}

// relayFailed logs (rate-limited) a failed step of a relayed
// invalidation; the relay counts the record's try itself.
func (s *QueryService) relayFailed(ctx context.Context, msg string, err error) {
	s.invalidateWarn.Log(ctx, slog.LevelWarn, msg+" (outbox relay; the record stays for the next round)", slog.Any("error", err))
}

// invalidateFailed counts and logs (rate-limited) a failed invalidation
// after a committed Update.
func (s *QueryService) invalidateFailed(ctx context.Context, msg string, err error) {
	if s.opts.OnInvalidateFailed != nil {
		s.opts.OnInvalidateFailed()
	}
	s.invalidateWarn.Log(ctx, slog.LevelWarn, msg, slog.Any("error", err))
}

// Reprice applies rp to every product of tenant's category in the origin,
// in one transaction (the repository must be a Repricer, or wrap one: see
// RepricerOf), then
// invalidates, on every instance, the category's tag and the tenant's
// list tag (see CategoryTag): once it returns, no instance serves a price
// of the category older than the reprice, beyond the Bus's delivery time
// (docs/productd.md has the bounds). As with Update, the invalidation is
// cleanup: its failure is logged and counted, never returned, and the
// repository's outbox record makes the relay redo it. A category with no
// product is an error matching ErrCategoryNotFound. In naive mode nothing
// is invalidated: the old prices are served until they expire.
func (s *QueryService) Reprice(ctx context.Context, tenant, category string, rp Reprice) (Repriced, error) {
	rr, ok := RepricerOf(s.repo)
	if !ok {
		return Repriced{}, ErrRepriceUnsupported
	}
	if err := checkTenant(tenant); err != nil {
		return Repriced{}, err
	}
	if err := CheckCategory(category); err != nil {
		return Repriced{}, err
	}
	out, err := rr.Reprice(ctx, tenant, category, rp)
	if err != nil {
		return Repriced{}, err
	}
	if s.opts.Mode == ModeFlightcache && s.invalidateCategory(ctx, tenant, category, s.invalidateFailed) {
		s.outboxDone(ctx, OutboxRecord{Ref: Ref{Tenant: tenant}, Category: category, Revision: out.Revision})
	}
	return out, nil
}

// invalidateCategory makes the invalidation of a reprice of tenant's
// category (flightcache mode): its category tag and the tenant's list
// tag, on every instance. It reports whether both succeeded.
func (s *QueryService) invalidateCategory(ctx context.Context, tenant, category string, failed func(ctx context.Context, msg string, err error)) bool {
	ok := s.invalidateTags(ctx, failed, TagCategory, CategoryTag(tenant, category))
	return s.invalidateTags(ctx, failed, TagList, ListTag(tenant)) && ok
}

// Ping reports whether the origin is reachable.
func (s *QueryService) Ping(ctx context.Context) error { return s.repo.Ping(ctx) }
