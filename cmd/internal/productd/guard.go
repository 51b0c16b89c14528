package productd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//
// The argument needs the recent set intact. A Redis restarted empty (or
// a replica that missed writes) loses it: the guard detects that through
// the set's epoch (see recentCreations), lets every id through until its
// filter has been rebuilt from the origin, and adds every product it loads
// to its filter, so an id it has served is never filtered afterwards. A
// Redis restarted from an older snapshot, or a replica promoted before it
// received the last writes, keeps the epoch but not the last records: the
// guard notices that through the server's identity (its INFO run_id,
// which every start and every promotion changes), checked every
// identityEvery, and treats it as a loss of the set.
// While Redis cannot answer at all, creations are refused (their record
// fails) and the filter decides alone: only creations committed on other
// instances since its last rebuild may be missed, and the first failure
// triggers an early rebuild that reads them (see docs/productd.md, the
// outage table: "Redis trouble, Bloom guard").
type penetrationGuard struct {
	filter *bloomguard.Filter
	recent *recentCreations // nil without Redis
	src    bloomguard.Source
	log    *slog.Logger

	// settle is how long after a detected loss of the recent set the
	// rebuild that restores trust must start (nanoseconds): a creation
	// whose record was lost commits at most createTimeout after it, so a
	// rebuild starting createTimeout after the detection reads it.
	settle atomic.Int64
	lossAt atomic.Int64 // Unix ns of the last detected loss

	lost, trouble chan struct{} // 1-buffered wake-ups of recover
	touchEvery    time.Duration // how often recover renews the epoch's TTL
	identityEvery time.Duration // how often recover checks the server's identity
	// identityChecks counts the identity checks recover has finished (a
	// test waits on it to know that one ran after a recovery).
	identityChecks atomic.Uint64
	ctx            context.Context
	cancel         context.CancelFunc
	done           chan struct{}
	closeOnce      sync.Once
}

// MayExist implements driver.Guard on productd's cache keys.
//
// An id the filter rules out is let through when the recent set has it,
// or when the set cannot be trusted (its loss was detected and the filter
// has not been rebuilt since). While Redis cannot answer (timeout, error,
// open breaker) the filter alone decides: see recentCreations.contains.
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

// onLoss is recentCreations.onLoss: wake recover to rebuild the filter.
func (g *penetrationGuard) onLoss() {
	g.lossAt.Store(time.Now().UnixNano())
	g.log.LogAttrs(context.Background(), slog.LevelWarn,
		"bloom guard: the recent-creations set in redis was lost (its epoch is gone or changed, or the server restarted or failed over); ids the filter rules out go to the origin until it is rebuilt")
	select {
	case g.lost <- struct{}{}:
	default:
	}
}

// onTrouble is recentCreations.onTrouble: wake recover for an early
// rebuild, which narrows what the filter alone may miss to creations that
// committed after it read the origin.
func (g *penetrationGuard) onTrouble() {
	select {
	case g.trouble <- struct{}{}:
	default:
	}
}

// recover runs until close: after a loss of the recent set, it waits
// settle, adopts the set's current epoch (creating one if there is none),
// rebuilds the filter from the origin and only then trusts the set again;
// after the start of Redis trouble, it rebuilds the filter early.
func (g *penetrationGuard) recover() {
	defer close(g.done)
	wait := func(d time.Duration) bool {
		if d <= 0 {
			return g.ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-g.ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	// The epoch key lives epochTTL past its last write: every running
	// instance keeps it alive, so only a Redis that lost it (or 24 hours
	// without any instance) makes it go.
	var touch, identity <-chan time.Time
	if g.recent != nil {
		t := time.NewTicker(g.touchEvery)
		defer t.Stop()
		touch = t.C
		i := time.NewTicker(g.identityEvery)
		defer i.Stop()
		identity = i.C
	}
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-touch:
			g.recent.touch(g.ctx)
		case <-identity:
			g.recent.checkIdentity(g.ctx)
			g.identityChecks.Add(1)
		case <-g.trouble:
			if err := g.filter.Rebuild(g.ctx, g.src); err != nil && g.ctx.Err() == nil {
				g.log.LogAttrs(g.ctx, slog.LevelWarn, "bloom guard: early rebuild on redis trouble failed", slog.Any("error", err))
			}
		case <-g.lost:
			if !wait(time.Until(time.Unix(0, g.lossAt.Load()).Add(time.Duration(g.settle.Load())))) {
				return
			}
			for {
				// The server's identity is read first: the filter
				// rebuilt below covers the sets on that server, so the
				// next identity check must not take the restart or
				// failover that caused this loss for a new one (a
				// second loss and rebuild, during which ids the filter
				// rules out go to the origin again). Unread, the last
				// one stays, which costs at most that second rebuild.
				id, _ := g.recent.serverID(g.ctx)
				epoch, err := g.recent.adopt(g.ctx)
				if err == nil {
					err = g.filter.Rebuild(g.ctx, g.src)
				}
				if err == nil {
					if id != "" {
						g.recent.runID = id
					}
					g.recent.trust(epoch)
					g.log.LogAttrs(g.ctx, slog.LevelInfo, "bloom guard: filter rebuilt after the loss of the recent-creations set; trusting it again")
					break
				}
				if g.ctx.Err() != nil {
					return
				}
				g.log.LogAttrs(g.ctx, slog.LevelWarn, "bloom guard: recovery from the loss of the recent-creations set failed; trying again",
					slog.Any("error", err))
				if !wait(time.Second) {
					return
				}
			}
		}
	}
}

// close stops the scheduled rebuilds and recover, and waits for them.
func (g *penetrationGuard) close() error {
	g.closeOnce.Do(func() {
		g.cancel()
		<-g.done
	})
	return g.filter.Close()
}

// servedRepository adds every product the origin returns to the filter:
// an id this instance has loaded is never filtered afterwards, whatever
// the recent set (lost, trimmed, on a replica that missed it) says.
type servedRepository struct {
	product.Repository
	filter *bloomguard.Filter
}

// Unwrap returns the wrapped Repository (product.OutboxOf finds the
// outbox through it).
func (r servedRepository) Unwrap() product.Repository { return r.Repository }

func (r servedRepository) Get(ctx context.Context, ref product.Ref) (product.Product, error) {
	p, err := r.Repository.Get(ctx, ref)
	if err == nil {
		r.filter.Add(ref.Tenant, ref.ID)
	}
	return p, err
}

func (r servedRepository) GetMany(ctx context.Context, sel product.Selection) (map[string]product.Product, error) {
	br, ok := r.Repository.(product.BatchRepository)
	if !ok {
		out := make(map[string]product.Product, len(sel.IDs))
		for _, id := range sel.IDs {
			p, err := r.Get(ctx, product.Ref{Tenant: sel.Tenant, ID: id, Locale: sel.Locale, Currency: sel.Currency})
			if errors.Is(err, product.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[id] = p
		}
		return out, nil
	}
	out, err := br.GetMany(ctx, sel)
	for id := range out {
		r.filter.Add(sel.Tenant, id)
	}
	return out, err
}

func (r servedRepository) Create(ctx context.Context, ref product.Ref, d product.Draft) (product.Product, error) {
	cr, ok := r.Repository.(product.Creator)
	if !ok {
		return product.Product{}, product.ErrCreateUnsupported
	}
	return cr.Create(ctx, ref, d)
}

func (r servedRepository) CreateWith(ctx context.Context, ref product.Ref, d product.Draft, o product.CreateOptions) (product.Product, error) {
	lc, ok := r.Repository.(product.LimitedCreator)
	if !ok {
		return product.Product{}, product.ErrCreateUnsupported
	}
	return lc.CreateWith(ctx, ref, d, o)
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

// creator is productd's create path: in one origin transaction (see
// product.SQLRepository.CreateWith), check the caps on what creates may
// add, announce to the guard, insert; then add to the filter again now
// that the row is committed (the rebuild after next trusts its source
// alone, so the last Add must follow the commit), and only then
// acknowledge. A create the caps refuse announces nothing: no Redis set
// is written for a tenant that never gets a row.
type creator struct {
	svc    *product.QueryService
	guard  *penetrationGuard // nil without -bloom
	limits product.CreateLimits
}

func (c creator) Create(ctx context.Context, ref product.Ref, d product.Draft) (product.Product, error) {
	if err := d.Validate(); err != nil {
		return product.Product{}, err
	}
	o := product.CreateOptions{Limits: c.limits}
	if c.guard != nil {
		o.Before = func(ctx context.Context) error { return c.guard.announce(ctx, ref) }
	}
	// The recent set covers the creation for a minute beyond the filters'
	// maximum age, counted from the announcement: the insert must commit
	// well within that minute. The transaction starts before the
	// announcement and is rolled back once this context ends, so the
	// commit comes at most createTimeout after the announcement.
	ictx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	out, err := c.svc.CreateWith(ictx, ref, d, o)
	if err != nil {
		return product.Product{}, err
	}
	if c.guard != nil {
		c.guard.filter.Add(ref.Tenant, ref.ID)
	}
	return out, nil
}

// recentCreations is a sorted set per tenant in Redis: product ids created
// in the last keep, scored by creation time (Unix ms). Entries older than
// keep are trimmed on every record and ignored on lookup.
//
// Beside the sets lives an epoch key, a random token written (if absent)
// in the transaction of every record. An instance trusts the sets only
// while the epoch it read before its filter's last rebuild after a loss
// (or at start) is the one Redis holds: a Redis restarted empty, flushed
// or replaced by a replica without the key answers another epoch or none,
// and a lookup that sees that makes the sets "unknown" (ids the filter
// rules out go to the origin) until the guard has rebuilt its filter.
//
// Every call is bounded by timeout (-redis-timeout) and goes through
// breaker, the Cache's shared-tier breaker: a sick Redis costs a lookup at
// most one timeout until the breaker opens, then nothing, and the guard's
// failures help open it.
type recentCreations struct {
	rdb     redis.UniversalClient
	cluster bool // rdb is a *redis.ClusterClient: the key names carry a hash tag (see base)
	prefix  string
	keep    time.Duration
	timeout time.Duration
	breaker driver.SharedBreaker // nil: every call goes to Redis

	trusted   atomic.Pointer[string] // the epoch the filter covers; nil: the sets are unknown
	runID     string                 // the server's INFO run_id last seen by checkIdentity ("" before); recover's goroutine only
	troubled  atomic.Bool            // the last call failed
	onLoss    func()                 // called when trusted goes nil (may be nil)
	onTrouble func()                 // called when troubled goes true (may be nil)
}

// identityEvery is how often the guard checks that the Redis holding
// its sets is still the same server (see recentCreations.checkIdentity):
// the longest a restart from an older snapshot goes unnoticed.
const identityEvery = time.Second

// epochTTL is the life of the epoch key after its last renewal (a record,
// a recovery, or every -bloom-rebuild by each running instance).
const epochTTL = 24 * time.Hour

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
	return r.prefix + r.base() + ":created:" + tenant
}

func (r *recentCreations) epochKey() string {
	return r.prefix + r.base() + ":epoch"
}

// base starts the names of the sets and the epoch key after the prefix:
// on a Redis Cluster the hash tag {bloom} puts them all in one slot, as
// record's transaction needs (go-redis refuses a cross-slot MULTI).
func (r *recentCreations) base() string {
	if r.cluster {
		return "{bloom}"
	}
	return "bloom"
}

func newEpoch() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// trust makes epoch the one the filter covers.
func (r *recentCreations) trust(epoch string) {
	r.trusted.Store(&epoch)
}

// check compares the epoch Redis answered ("" for none) with the trusted
// one and reports whether the sets can be trusted. The first mismatch
// drops the trust and calls onLoss.
func (r *recentCreations) check(epoch string) bool {
	t := r.trusted.Load()
	if t == nil {
		return false
	}
	if epoch != "" && *t == epoch {
		return true
	}
	r.lose(t)
	return false
}

// lose drops the trust in t, if it is still the trusted epoch, and calls
// onLoss.
func (r *recentCreations) lose(t *string) {
	if t != nil && r.trusted.CompareAndSwap(t, nil) && r.onLoss != nil {
		r.onLoss()
	}
}

// checkIdentity reads the INFO run_id of the server that holds the epoch
// key and drops the trust in the sets when it differs from the one seen
// before: a Redis restarted (from a snapshot that may predate the last
// records) or a replica promoted (which may have missed them) keeps the
// epoch, but perhaps not every creation recorded under it. A server that
// refuses INFO (an ACL without it) or does not answer leaves the last
// identity in place.
func (r *recentCreations) checkIdentity(ctx context.Context) {
	t := r.trusted.Load()
	id, err := r.serverID(ctx)
	if err != nil || id == "" {
		return
	}
	if r.runID != "" && id != r.runID {
		r.lose(t)
	}
	r.runID = id
}

// serverID returns the INFO run_id of the server holding the epoch key
// (on a Cluster, the master of its slot).
func (r *recentCreations) serverID(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var info string
	var err error
	if c, ok := r.rdb.(*redis.ClusterClient); ok {
		var node *redis.Client
		if node, err = c.MasterForKey(cctx, r.epochKey()); err == nil {
			info, err = node.Info(cctx, "server").Result()
		}
	} else {
		info, err = r.rdb.Info(cctx, "server").Result()
	}
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

// answered records whether Redis answered a call: the first failure after
// an answer calls onTrouble.
func (r *recentCreations) answered(ok bool) {
	if ok {
		r.troubled.Store(false)
	} else if r.troubled.CompareAndSwap(false, true) && r.onTrouble != nil {
		r.onTrouble()
	}
}

// record adds id to tenant's set, trims what is older than keep and lets
// the whole set expire keep after its last write; it writes the epoch key
// if absent in the same transaction (so a set never outlives its epoch
// unnoticed) and checks it.
// A failure, a timeout or an open breaker is an error matching
// product.ErrCacheUnavailable (the create is refused with 503 before its
// row is inserted); the caller's own context ending is its error.
func (r *recentCreations) record(ctx context.Context, tenant, id string) error {
	done, err := r.allow(ctx)
	if err != nil {
		r.answered(false)
		return fmt.Errorf("productd: record the creation in redis: %w: %w", product.ErrCacheUnavailable, err)
	}
	now := time.Now()
	k := r.key(tenant)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	pipe := r.rdb.TxPipeline()
	pipe.SetNX(cctx, r.epochKey(), newEpoch(), 0)
	pipe.PExpire(cctx, r.epochKey(), epochTTL)
	epoch := pipe.Get(cctx, r.epochKey())
	pipe.ZAdd(cctx, k, redis.Z{Score: float64(now.UnixMilli()), Member: id})
	pipe.ZRemRangeByScore(cctx, k, "-inf", "("+strconv.FormatInt(now.Add(-r.keep).UnixMilli(), 10))
	pipe.PExpire(cctx, k, r.keep)
	_, err = pipe.Exec(cctx)
	done(err)
	switch {
	case err == nil:
		r.answered(true)
		r.check(epoch.Val())
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	default:
		r.answered(false)
		return fmt.Errorf("productd: record the creation in redis: %w: %w", product.ErrCacheUnavailable, err)
	}
}

// adopt writes the epoch key if absent and returns the epoch Redis holds:
// the guard reads it before rebuilding the filter, and trusts it once the
// rebuild succeeded.
func (r *recentCreations) adopt(ctx context.Context) (string, error) {
	done, err := r.allow(ctx)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	pipe := r.rdb.TxPipeline()
	pipe.SetNX(cctx, r.epochKey(), newEpoch(), 0)
	pipe.PExpire(cctx, r.epochKey(), epochTTL)
	epoch := pipe.Get(cctx, r.epochKey())
	_, err = pipe.Exec(cctx)
	done(err)
	if err != nil {
		return "", fmt.Errorf("productd: read the recent-creations epoch: %w", err)
	}
	return epoch.Val(), nil
}

// touch renews the epoch key's TTL if it exists (a lost one stays lost,
// for lookups to notice).
func (r *recentCreations) touch(ctx context.Context) {
	done, err := r.allow(ctx)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	done(r.rdb.PExpire(cctx, r.epochKey(), epochTTL).Err())
}

// contains reports whether the guard should let an id its filter rules
// out through: true when id was created in tenant within keep, or when
// the sets are unknown (their loss was detected and the filter not yet
// rebuilt). When Redis cannot answer (a failure, a timeout, an open
// breaker) it answers false: the filter, built from the origin, decides
// alone (see penetrationGuard).
func (r *recentCreations) contains(ctx context.Context, tenant, id string) bool {
	at, known, trusted := r.lookup(ctx, tenant, id)
	if !known {
		return false
	}
	return !trusted || !at.IsZero()
}

// createdSinceSkew is how far another instance's clock, which stamped a
// creation, may run behind this one's, which stamped a cached "not found",
// for createdSince still to see the creation as the younger.
const createdSinceSkew = time.Second

// createdSince reports whether ref was created after since (less
// createdSinceSkew), false when Redis cannot tell: it is
// product.ServiceOptions.CreatedSince, asked on a cached "not found",
// which stays when in doubt (a Redis outage must not send every cached
// "not found" to the origin). While the sets are unknown (lost, filter
// not rebuilt yet) it answers true: the creation may have been lost.
func (r *recentCreations) createdSince(ctx context.Context, ref product.Ref, since time.Time) bool {
	at, known, trusted := r.lookup(ctx, ref.Tenant, ref.ID)
	if known && !trusted {
		return true
	}
	return known && !at.IsZero() && at.After(since.Add(-createdSinceSkew))
}

// lookup is one round trip (the epoch and a ZSCORE), bounded by timeout
// and the breaker: when id was created in tenant (zero if not within
// keep), whether Redis answered, and whether the sets can be trusted.
func (r *recentCreations) lookup(ctx context.Context, tenant, id string) (at time.Time, known, trusted bool) {
	done, err := r.allow(ctx)
	if err != nil {
		r.answered(false)
		return time.Time{}, false, false
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	pipe := r.rdb.Pipeline()
	epoch := pipe.Get(cctx, r.epochKey())
	score := pipe.ZScore(cctx, r.key(tenant), id)
	pipe.Exec(cctx)
	err = epoch.Err()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err == nil {
		err = score.Err()
	}
	done(err)
	if err != nil && !errors.Is(err, redis.Nil) {
		if ctx.Err() == nil {
			r.answered(false)
		}
		return time.Time{}, false, false
	}
	r.answered(true)
	trusted = r.check(epoch.Val())
	if errors.Is(err, redis.Nil) {
		return time.Time{}, true, trusted
	}
	at = time.UnixMilli(int64(score.Val()))
	if at.Before(time.Now().Add(-r.keep)) {
		return time.Time{}, true, trusted
	}
	return at, true, trusted
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
	g := &penetrationGuard{filter: f, src: repo.EachID, log: log,
		lost: make(chan struct{}, 1), trouble: make(chan struct{}, 1), done: make(chan struct{}),
		touchEvery: min(cfg.BloomRebuild, epochTTL/4), identityEvery: identityEvery}
	g.settle.Store(int64(createTimeout))
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if rdb != nil {
		_, cluster := rdb.(*redis.ClusterClient)
		g.recent = &recentCreations{rdb: rdb, cluster: cluster, prefix: cfg.RedisPrefix, keep: maxAge + time.Minute,
			timeout: cfg.RedisTimeout, breaker: sb, onLoss: g.onLoss, onTrouble: g.onTrouble}
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

	// The epoch is read before the filter is built: every creation
	// recorded under it after that is in the recent set, every one before
	// in the origin the build reads.
	var epoch string
	if g.recent != nil {
		// The identity first: a restart after it is noticed by the
		// first check, one before it is seen by the build below.
		g.recent.checkIdentity(ctx)
		var err error
		if epoch, err = g.recent.adopt(ctx); err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "bloom guard: recent-creations epoch not read; ids the filter rules out go to the origin once redis answers, until it is read and the filter rebuilt",
				slog.Any("error", err))
		}
	}
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
		g.cancel()
		f.Close()
		return nil, err
	}
	go g.recover()
	if g.recent != nil {
		if epoch != "" {
			g.recent.trust(epoch)
		} else {
			g.onLoss() // untrusted from the start: recover reads the epoch and rebuilds
		}
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
	// Every product the origin returns is added to the filter (see
	// servedRepository).
	s.counted.Repository = servedRepository{Repository: s.counted.Repository, filter: g.filter}
	s.guard = g
	return nil
}
