package productd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/flightcache/flightcache/bloomguard"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/key"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Metric names of the penetration guard. The requests it turns away are
// counted by the cache's own flightcache_filtered_total (promflight).
const (
	BloomFillRatioMetric      = "productd_bloom_fill_ratio"
	BloomFalsePositiveMetric  = "productd_bloom_false_positive_estimate"
	BloomRebuildSecondsMetric = "productd_bloom_rebuild_duration_seconds"
)

// createTimeout bounds the insert of a creation; see creator.
const createTimeout = 20 * time.Second

// penetrationGuard is productd's driver.Guard: the Bloom filter of the
// catalog, and, with Redis, the set of products created recently on any
// instance, which covers the time until every instance's filter was
// rebuilt from an origin that has them.
//
// Why no false negative: a product is created by (1) recording it in the
// recent set, (2) adding it to this instance's filter, (3) inserting the
// row, (4) adding it to the filter again, then acknowledging. Another
// instance answers "no" only if its filter lacks the pair, so its source
// was read before (3) committed, and the recent set lacks it too, so (1)
// is older than the set's keep (the filters' MaxAge, 2 × -bloom-rebuild,
// plus a minute). A filter refuses to answer "no" once its source is
// older than MaxAge, so (3) committed less than MaxAge ago, and (1)
// preceded (3) by at most createTimeout: (1) is younger than keep, a
// contradiction.
type penetrationGuard struct {
	filter *bloomguard.Filter
	recent *recentCreations // nil without Redis
}

// MayExist implements driver.Guard on productd's cache keys.
func (g *penetrationGuard) MayExist(ctx context.Context, k string) bool {
	parts, err := key.Parse(k)
	if err != nil || parts.Tenant == "" || parts.ID == "" {
		return true // not a product key: nothing to say about it
	}
	if g.filter.MayContain(parts.Tenant, parts.ID) {
		return true
	}
	return g.recent != nil && g.recent.contains(ctx, parts.Tenant, parts.ID)
}

// announce makes a product about to be created known before its row is
// inserted: in the recent set first (so a failure there aborts the
// creation before anything is stored), then in this instance's filter.
func (g *penetrationGuard) announce(ctx context.Context, ref product.Ref) error {
	if g.recent != nil {
		if err := g.recent.record(ctx, ref.Tenant, ref.ID); err != nil {
			return err
		}
	}
	g.filter.Add(ref.Tenant, ref.ID)
	return nil
}

// creator is productd's create path: announce to the guard, insert, add
// to the filter again now that the row is committed (the rebuild after
// next trusts its source alone, so the last Add must follow the commit),
// and only then acknowledge.
type creator struct {
	svc   *product.QueryService
	guard *penetrationGuard // nil without -bloom
}

func (c creator) Create(ctx context.Context, ref product.Ref, d product.Draft) (product.Product, error) {
	if c.guard == nil {
		return c.svc.Create(ctx, ref, d)
	}
	if err := d.Validate(); err != nil {
		return product.Product{}, err
	}
	if err := c.guard.announce(ctx, ref); err != nil {
		return product.Product{}, err
	}
	// The recent set covers the creation for a minute beyond the filters'
	// maximum age, counted from the announcement: the insert must commit
	// well within that minute.
	ictx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	out, err := c.svc.Create(ictx, ref, d)
	if err != nil {
		return product.Product{}, err
	}
	c.guard.filter.Add(ref.Tenant, ref.ID)
	return out, nil
}

// recentCreations is a sorted set per tenant in Redis: product ids created
// in the last keep, scored by creation time (Unix ms). Entries older than
// keep are trimmed on every record and ignored on lookup.
//
// Every call is bounded by timeout (-redis-timeout) and goes through
// breaker, the Cache's shared-tier breaker: a sick Redis costs a lookup at
// most one timeout until the breaker opens, then nothing, and the guard's
// failures help open it.
type recentCreations struct {
	rdb     redis.UniversalClient
	prefix  string
	keep    time.Duration
	timeout time.Duration
	breaker driver.SharedBreaker // nil: every call goes to Redis
}

// allow asks the breaker for a call. done reports the call's outcome; a
// failure caused by the caller's own context ending is not Redis' fault
// and is reported as a success.
func (r *recentCreations) allow(ctx context.Context) (done func(err error), err error) {
	if r.breaker == nil {
		return func(error) {}, nil
	}
	d, err := r.breaker.Allow()
	if err != nil {
		return nil, err
	}
	return func(err error) {
		d(err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil)
	}, nil
}

func (r *recentCreations) key(tenant string) string {
	return r.prefix + "bloom:created:" + tenant
}

// record adds id to tenant's set, trims what is older than keep and lets
// the whole set expire keep after its last write.
// A failure, a timeout or an open breaker is an error matching
// product.ErrCacheUnavailable (the create is refused with 503 before its
// row is inserted); the caller's own context ending is its error.
func (r *recentCreations) record(ctx context.Context, tenant, id string) error {
	done, err := r.allow(ctx)
	if err != nil {
		return fmt.Errorf("productd: record the creation in redis: %w: %w", product.ErrCacheUnavailable, err)
	}
	now := time.Now()
	k := r.key(tenant)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	pipe := r.rdb.TxPipeline()
	pipe.ZAdd(cctx, k, redis.Z{Score: float64(now.UnixMilli()), Member: id})
	pipe.ZRemRangeByScore(cctx, k, "-inf", "("+strconv.FormatInt(now.Add(-r.keep).UnixMilli(), 10))
	pipe.PExpire(cctx, k, r.keep)
	_, err = pipe.Exec(cctx)
	done(err)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	default:
		return fmt.Errorf("productd: record the creation in redis: %w: %w", product.ErrCacheUnavailable, err)
	}
}

// contains reports whether id was created in tenant within keep. A lookup
// that fails answers true: a "maybe" costs an origin query at most, a
// wrong "no" would hide a product. While the breaker is open it answers
// true without calling Redis.
func (r *recentCreations) contains(ctx context.Context, tenant, id string) bool {
	at, known := r.lookup(ctx, tenant, id)
	return !known || !at.IsZero()
}

// createdSinceSkew is how far another instance's clock, which stamped a
// creation, may run behind this one's, which stamped a cached "not found",
// for createdSince still to see the creation as the younger.
const createdSinceSkew = time.Second

// createdSince reports whether ref was created after since (less
// createdSinceSkew), false when Redis cannot tell: it is
// product.ServiceOptions.CreatedSince, asked on a cached "not found",
// which stays when in doubt (a Redis outage must not send every cached
// "not found" to the origin).
func (r *recentCreations) createdSince(ctx context.Context, ref product.Ref, since time.Time) bool {
	at, known := r.lookup(ctx, ref.Tenant, ref.ID)
	return known && !at.IsZero() && at.After(since.Add(-createdSinceSkew))
}

// lookup is one ZSCORE, bounded by timeout and the breaker: when id was
// created in tenant (zero if not within keep), and whether Redis answered.
func (r *recentCreations) lookup(ctx context.Context, tenant, id string) (at time.Time, known bool) {
	done, err := r.allow(ctx)
	if err != nil {
		return time.Time{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	score, err := r.rdb.ZScore(cctx, r.key(tenant), id).Result()
	done(err)
	if errors.Is(err, redis.Nil) {
		return time.Time{}, true
	}
	if err != nil {
		return time.Time{}, false
	}
	at = time.UnixMilli(int64(score))
	if at.Before(time.Now().Add(-r.keep)) {
		return time.Time{}, true
	}
	return at, true
}

// newPenetrationGuard builds the filter from the origin (a failure leaves
// it answering "maybe" until a scheduled rebuild succeeds), schedules the
// rebuilds and registers the metrics. rdb and sb may be nil.
func newPenetrationGuard(ctx context.Context, cfg Config, repo *product.SQLRepository, rdb redis.UniversalClient, sb driver.SharedBreaker, reg prometheus.Registerer, log *slog.Logger) (*penetrationGuard, error) {
	// The filter answers "maybe" once its source is older than two rebuild
	// periods (the schedule stalled); the recent set keeps creations a
	// minute longer than that, so every creation is covered by one or the
	// other (see penetrationGuard).
	maxAge := 2 * cfg.BloomRebuild
	f, err := bloomguard.New(bloomguard.Config{
		ExpectedItems:     uint(cfg.BloomExpected),
		FalsePositiveRate: cfg.BloomFPRate,
		MaxAge:            maxAge,
		Logger:            log,
	})
	if err != nil {
		return nil, err
	}
	g := &penetrationGuard{filter: f}
	if rdb != nil {
		g.recent = &recentCreations{rdb: rdb, prefix: cfg.RedisPrefix, keep: maxAge + time.Minute,
			timeout: cfg.RedisTimeout, breaker: sb}
	}
	stats := func(v func(bloomguard.Stats) float64) func() float64 {
		return func() float64 { return v(f.Stats()) }
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: BloomFillRatioMetric,
			Help: "Share of the Bloom filter's bits that are set.",
		}, stats(func(s bloomguard.Stats) float64 { return s.FillRatio })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: BloomFalsePositiveMetric,
			Help: "Estimated false-positive rate of the Bloom filter, from its fill ratio.",
		}, stats(func(s bloomguard.Stats) float64 { return s.EstimatedFalsePositiveRate })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: BloomRebuildSecondsMetric,
			Help: "How long the last successful rebuild of the Bloom filter took.",
		}, stats(func(s bloomguard.Stats) float64 { return s.RebuildDuration.Seconds() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "productd_bloom_items",
			Help: "(tenant, id) pairs in the Bloom filter, plus those added since its last rebuild.",
		}, stats(func(s bloomguard.Stats) float64 { return float64(s.Items) + float64(s.Added) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "productd_bloom_rebuilds_total",
			Help: "Successful rebuilds of the Bloom filter.",
		}, stats(func(s bloomguard.Stats) float64 { return float64(s.Rebuilds) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "productd_bloom_rebuild_failures_total",
			Help: "Failed rebuilds of the Bloom filter (the previous filter stayed).",
		}, stats(func(s bloomguard.Stats) float64 { return float64(s.RebuildFailures) })),
	)

	start := time.Now()
	if err := f.Rebuild(ctx, repo.EachID); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "bloom filter not built; every id may exist until a rebuild succeeds",
			slog.Any("error", err))
	} else {
		s := f.Stats()
		log.LogAttrs(ctx, slog.LevelInfo, "bloom filter built",
			slog.Uint64("ids", s.Items), slog.Uint64("bits", uint64(s.Bits)),
			slog.Float64("fp_estimate", s.EstimatedFalsePositiveRate), slog.Duration("took", time.Since(start)))
	}
	if err := f.RebuildEvery(context.WithoutCancel(ctx), cfg.BloomRebuild, repo.EachID); err != nil {
		f.Close()
		return nil, err
	}
	return g, nil
}

// cacheGuard is the Guard for the Cache: nil (no interface holding a nil
// pointer) without -bloom.
func (s *Server) cacheGuard() driver.Guard {
	if s.guard == nil {
		return nil
	}
	return s.guard
}

// startGuard builds the penetration guard when cfg.Bloom asks for it.
func (s *Server) startGuard(ctx context.Context, reg prometheus.Registerer) error {
	if !s.cfg.Bloom {
		return nil
	}
	var rdb redis.UniversalClient
	if s.rdb != nil {
		rdb = s.rdb
	}
	g, err := newPenetrationGuard(ctx, s.cfg, s.repo, rdb, s.breaker, reg, s.log)
	if err != nil {
		return err
	}
	s.guard = g
	return nil
}
