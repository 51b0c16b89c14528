package productd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/breaker"
	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/cmd/internal/httpapi"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/cmd/internal/ratelog"
	_ "github.com/flightcache/flightcache/cmd/internal/sqldrivers" // product.Open's drivers
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/promflight"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// OriginQueriesMetric is the Prometheus counter of origin lookups; the
// stampede demo and the end-to-end tests read it from /metrics.
const OriginQueriesMetric = "productd_origin_queries_total"

// InvalidationFailuresMetric counts cache invalidations (deletes, tag
// invalidations) after a committed PUT or reprice that failed or timed
// out.
const InvalidationFailuresMetric = "productd_invalidation_failures_total"

// OutboxRelayedMetric counts the invalidations the outbox relay made for
// PUTs that left them undone (a writer that crashed, Redis out).
const OutboxRelayedMetric = "productd_outbox_relayed_total"

// OutboxRelayFailuresMetric counts the outbox relay's failed reads of the
// outbox and failed invalidations of a record (which stays for the next
// round).
const OutboxRelayFailuresMetric = "productd_outbox_relay_failures_total"

// OriginRowsMetric is the Prometheus counter of product rows the origin
// lookups asked for: one per single lookup, one per id of a batch lookup.
const OriginRowsMetric = "productd_origin_rows_total"

// BusLastMessageAgeMetric is the Prometheus gauge of the seconds since the
// last message of any kind (heartbeats included) arrived on the
// invalidation bus, or since the bus started if none has yet. Exposed
// with -redis in flightcache mode only.
const BusLastMessageAgeMetric = "productd_bus_last_message_age_seconds"

// BusStateMetric is the Prometheus gauge of the invalidation bus's state
// as the cache sees it at the scrape: 1 down, 2 up (the encoding of
// promflight's flightcache_bus_state, which follows the changes and so
// reads 0 until the bus first came up). Exposed with -redis in
// flightcache mode only.
const BusStateMetric = "productd_bus_state"

// Server is a productd instance: the origin, the cache tiers, the service
// and its HTTP handler. Build it with New, then Serve; or just call Run.
type Server struct {
	cfg     Config
	log     *slog.Logger
	repo    *product.SQLRepository
	counted *product.CountingRepository
	local   *memstore.Store[product.Entry]
	rdb     redis.UniversalClient // nil without -redis; a *redis.ClusterClient on a Cluster
	redisAt *redisTarget          // what rdb was built from: nil without -redis
	store   *redisstore.Store     // nil without -redis
	breaker driver.SharedBreaker  // nil without -redis
	// bus is the invalidation bus: nil without -redis or in naive mode.
	// In cluster mode it is also the coordinator (coord).
	bus      *redislease.Coordinator
	busStart time.Time               // when bus was built
	coord    *redislease.Coordinator // nil unless cluster coalescing
	cache    *flightcache.Cache[product.Entry]
	svc      *product.QueryService
	guard    *penetrationGuard // nil without -bloom or in naive mode
	handler  http.Handler
	// relay is the outbox relay's options (flightcache mode).
	relay product.RelayOptions
	auth  *writeAuth // the write gate; Reload reloads its token file

	closeOnce sync.Once
	closeErr  error
}

// New connects to Redis when configured (refusing an unreachable one before
// touching the database), opens the origin (migrating and, with cfg.Seed,
// seeding it), and builds the cache and the HTTP handler. The caller must
// Serve or Close the Server.
func New(ctx context.Context, cfg Config, log *slog.Logger) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	// The write gate first: a token file that cannot be read refuses the
	// start before anything is opened.
	auth, err := newWriteAuth(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg, log: log, auth: auth}
	// The error returns below set s to nil: release what was opened through
	// a reference of our own.
	partial := s
	defer func() {
		if err != nil {
			partial.Close()
		}
	}()

	// Redis first: a -redis that is malformed or does not answer, or a
	// coordinator that cannot start on it, is refused before the database
	// is opened, migrated or seeded.
	var shared driver.SharedStore
	var coord driver.Coordinator
	var bus driver.Bus
	if cfg.Mode != product.ModeNaive && cfg.Redis != "" {
		shared, err = s.connectRedis(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.connectCoordinator(ctx); err != nil {
			return nil, err
		}
		bus = s.bus
		if cfg.Coalescing() == CoalesceCluster {
			s.coord = s.bus
			coord = s.coord
		}
	}

	s.repo, err = product.Open(ctx, cfg.DB, product.Options{
		OriginLatency: cfg.OriginLatency, MaxConns: cfg.DBMaxConns,
		WriteConns: cfg.EffectiveDBWriteConns(), WriteTimeout: cfg.WriteTimeout,
	})
	if err != nil {
		return nil, err
	}
	var seed *product.Catalog
	if cfg.Seed {
		seed = cfg.Catalog
		if seed == nil {
			c := product.DemoCatalog
			c.ProductsPerTenant = cfg.SeedProducts
			seed = &c
		}
	}
	start := time.Now()
	seeded, err := product.Migrate(ctx, s.repo, seed)
	if err != nil {
		return nil, fmt.Errorf("productd: origin %s: %w", s.repo.Name(), err)
	}
	if seeded {
		log.LogAttrs(ctx, slog.LevelInfo, "seeded the demo catalog",
			slog.Int("rows", seed.Rows()), slog.Duration("took", time.Since(start)))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	originQueries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: OriginQueriesMetric,
		Help: "Product lookups that reached the origin database.",
	})
	reg.MustRegister(originQueries)
	s.counted = product.Count(s.repo, originQueries.Inc)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: OriginRowsMetric,
		Help: "Product rows the origin lookups asked for (a batch lookup asks for several in one query).",
	}, func() float64 { return float64(s.counted.Rows()) }))

	// A coarse clock: hits read one atomic word instead of the real clock
	// (slow on virtual machines); entries may outlive their TTL by ~1ms.
	s.local, err = memstore.New(memstore.Options[product.Entry]{MaxEntries: cfg.LocalMaxEntries, ClockResolution: clock.DefaultResolution})
	if err != nil {
		return nil, err
	}
	invalidateFailed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: InvalidationFailuresMetric,
		Help: "Cache invalidations (deletes, tag invalidations) after a committed PUT or reprice that failed or timed out (the write still succeeded).",
	})
	reg.MustRegister(invalidateFailed)
	svcOpts := product.ServiceOptions{
		Mode: cfg.Mode, TTL: cfg.TTL, NegativeTTL: cfg.EffectiveNegativeTTL(), Jitter: cfg.Jitter,
		LoaderTimeout: cfg.LoaderTimeout, Logger: log, OnInvalidateFailed: invalidateFailed.Inc,
		OnTagInvalidation: tagInvalidations(reg),
	}
	if cfg.Mode == product.ModeNaive {
		svcOpts.Naive = s.local
	} else {
		if err := s.startGuard(ctx, reg); err != nil {
			return nil, err
		}
		if s.guard != nil && s.guard.recent != nil {
			// A cached "not found" of a product created since on another
			// instance: one ZSCORE per negative hit finds it.
			svcOpts.CreatedSince = s.guard.recent.createdSince
		}
		metrics, err := promflight.New(reg, promflight.WithOperation("product"))
		if err != nil {
			return nil, err
		}
		if s.bus != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: BusLastMessageAgeMetric,
				Help: "Seconds since the last message of any kind (heartbeats included) arrived on the invalidation bus, or since the bus started if none has.",
			}, func() float64 { return s.busQuiet().Seconds() }))
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: BusStateMetric,
				Help: "State of the invalidation bus at the scrape: 1 down (values in memory served for at most -bus-down-ttl), 2 up.",
			}, func() float64 { return float64(s.BusState()) }))
		}
		jitter := cfg.Jitter
		if jitter == 0 {
			jitter = flightcache.DisableJitter
		}
		s.cache, err = flightcache.New(flightcache.Options[product.Entry]{
			Name: "product", Local: s.local, Shared: shared, Coordinator: coord, CoalesceWait: cfg.EffectiveCoalesceWait(),
			Bus: bus, BusDownTTL: cfg.BusDownTTL,
			TTL: cfg.TTL, NegativeTTL: cfg.EffectiveNegativeTTL(), Jitter: jitter,
			// No entry is fresh longer than -cache-ttl, whatever Redis
			// holds (an instance with a longer -cache-ttl, a forgery):
			// the loader's SetTTL never asks for more. StaleFor applies
			// after it, as to every entry.
			MaxTTL:   cfg.TTL,
			StaleFor: cfg.StaleFor, SoftTimeout: cfg.SoftTimeout,
			EarlyRefresh: cfg.EarlyRefresh, LoaderTimeout: cfg.LoaderTimeout, FailureThrottle: cfg.FailureThrottle,
			SharedTimeout: cfg.RedisTimeout, SharedBreaker: s.breaker,
			MaxInFlight: cfg.MaxInFlight, MaxWaiters: cfg.MaxWaiters,
			Observer: product.WatchStale(metrics, staleWarner(log)), Logger: log,
			Guard: s.cacheGuard(),
		})
		if err != nil {
			return nil, err
		}
		svcOpts.Cache = s.cache
		relayed := prometheus.NewCounter(prometheus.CounterOpts{
			Name: OutboxRelayedMetric,
			Help: "Invalidations the outbox relay made for PUTs that left them undone (a writer that crashed, Redis out).",
		})
		relayFailed := prometheus.NewCounter(prometheus.CounterOpts{
			Name: OutboxRelayFailuresMetric,
			Help: "Failed reads of the outbox and failed invalidations of an outbox record by the relay (the record stays for the next round).",
		})
		reg.MustRegister(relayed, relayFailed)
		s.relay = product.RelayOptions{Every: cfg.OutboxInterval, Grace: cfg.OutboxGrace, OnRelayed: relayed.Inc, OnFailed: relayFailed.Inc}
	}
	s.svc, err = product.NewQueryService(s.counted, svcOpts)
	if err != nil {
		return nil, err
	}
	cacheName := "flightcache"
	if cfg.Mode == product.ModeNaive {
		cacheName = "naive"
	}
	limits := product.CreateLimits{MaxNewTenants: cfg.MaxTenants, MaxCreatesPerTenant: cfg.MaxCreatesPerTenant}
	api := httpapi.New(httpapi.Options{
		Service: s.svc, Creator: creator{svc: s.svc, guard: s.guard, limits: limits}, Repricer: newRepricer(reg, s.svc),
		AuthorizeWrite: auth.authorize,
		CacheName:      cacheName, Ready: s.ready,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), Logger: log,
	})
	s.handler = instrument(reg, log, api)
	return s, nil
}

// redisBreakerFailures is how many Redis calls in a row must fail or time
// out before the Redis breaker opens: four times the breaker's default.
// On a busy host a herd's calls queue for the client's connections, and a
// few of them in a row outlast -redis-timeout with Redis healthy; an open
// breaker then sends every instance to the origin on its own. With Redis
// out, a herd reaches this many failures within one -redis-timeout.
const redisBreakerFailures = 4 * breaker.DefaultConsecutiveFailures

func (s *Server) connectRedis(ctx context.Context) (driver.SharedStore, error) {
	t, err := s.cfg.redisTarget()
	if err != nil {
		return nil, err
	}
	installRedisLogger()
	if t.insecure {
		s.log.LogAttrs(ctx, slog.LevelWarn, "TLS certificate verification of Redis is OFF (skip_verify=true in -redis): "+
			"anyone on the network path can pose as Redis and read or forge every cached value; "+
			"remove skip_verify and give -redis-ca the CA that signed Redis' certificate",
			slog.String("redis", t.String()), slog.Bool("redis_tls_verify", false))
	}
	s.rdb, s.redisAt, err = dialRedis(ctx, t, s.cfg, s.log)
	if err != nil {
		return nil, err
	}
	b, err := breaker.New(breaker.Options{ConsecutiveFailures: redisBreakerFailures, OnStateChange: func(from, to driver.BreakerState) {
		lvl := slog.LevelWarn
		if to == driver.BreakerClosed {
			lvl = slog.LevelInfo
		}
		s.log.LogAttrs(context.Background(), lvl, "redis breaker changed state",
			slog.String("from", from.String()), slog.String("to", to.String()))
	}})
	if err != nil {
		return nil, err
	}
	s.breaker = b
	// HashTag in both coalescing modes, so that instances in either mode
	// share the values (a rolling switch of -coalesce keeps the cache),
	// and so that on a Redis Cluster a key's value and its lease keys
	// share a slot (redislease's scripts touch them together).
	// Entry keys: with them, an entry written to Redis by anything but an
	// instance holding one of the keys is a miss, never served.
	keys, err := s.cfg.EntryKeys()
	if err != nil {
		return nil, err
	}
	s.store, err = redisstore.New(s.rdb, redisstore.Options{Prefix: s.cfg.RedisPrefix, Timeout: s.cfg.RedisTimeout, HashTag: true, EntryKeys: keys})
	if err != nil {
		return nil, err
	}
	return s.store, nil
}

// connectCoordinator builds the redislease.Coordinator on the Redis of the
// shared tier, in both coalescing modes: it is always the invalidation bus
// (s.bus), and the cluster coordinator in cluster mode only (New sets
// s.coord). Redis was just PINGed; redislease.New PINGs again and refuses
// if it does not answer: cluster mode asked for (or implied by -redis) is
// never silently replaced by process-local coalescing, nor is a cache
// whose instances would not hear of each other's writes started.
func (s *Server) connectCoordinator(ctx context.Context) error {
	opts := redislease.Options{
		LeaseTTL: s.cfg.LeaseTTL, Timeout: s.cfg.RedisTimeout,
		HeartbeatInterval: s.cfg.BusHeartbeat, DownAfter: s.cfg.EffectiveBusDownAfter(),
		// Bulk invalidations must be replayable while the shared tier may
		// still hold entries they cover: -cache-ttl plus -stale-for.
		BulkRetention: min(max(redislease.DefaultBulkRetention, s.cfg.TTL+s.cfg.StaleFor+time.Hour), redislease.MaxBulkRetention),
	}
	// redislease.New PINGs once more, bounded by -redis-timeout: a PING
	// that timed out is tried again within the startup window, as in
	// connectRedis (on a host busy with two test suites it has timed out
	// right after connectRedis's PING answered). It starts nothing before
	// its PING, so a failed attempt leaves nothing behind.
	var c *redislease.Coordinator
	pctx, cancel := context.WithTimeout(ctx, startupWait)
	defer cancel()
	err := untilAnswer(pctx, func(ctx context.Context) error {
		var err error
		c, err = redislease.New(ctx, s.rdb, s.store, opts)
		return err
	})
	if err != nil {
		if s.cfg.Coalescing() == CoalesceCluster {
			return fmt.Errorf("productd: cluster coalescing (-coalesce cluster, the default with -redis) and invalidation bus: %w", err)
		}
		return fmt.Errorf("productd: invalidation bus (-redis): %w", err)
	}
	s.bus, s.busStart = c, time.Now()
	return nil
}

// busQuiet is how long the bus has gone without a message of any kind
// (heartbeats included): since the last one, or since the bus was built
// if none has arrived. The caller checks s.bus.
func (s *Server) busQuiet() time.Duration {
	last := s.bus.BusStats().LastMessage
	if last.IsZero() {
		last = s.busStart
	}
	return time.Since(last)
}

// redisLoggerOnce guards installRedisLogger: go-redis has one logger per
// process (redis.SetLogger), shared by every client, so it is installed once
// and never replaced by a later Server.
var redisLoggerOnce sync.Once

// installRedisLogger routes go-redis' own log lines (plain text on stderr by
// default, which breaks JSON logs) through slog.Default(), read at each
// line, as WARN records with msg "redis client", at most one per second
// (a Redis outage makes go-redis log per dial). The process picks where
// they go with slog.SetDefault: cmd/productd sets its logger there, so they
// are JSON like the rest with -log-format json. Several Servers in one
// process share the lines rather than the last one taking them all.
func installRedisLogger() {
	redisLoggerOnce.Do(func() {
		redis.SetLogger(redisLogger{lim: ratelog.New(slog.New(defaultHandler{}), time.Second)})
	})
}

// redisLogger is go-redis' internal logger, writing through slog.
type redisLogger struct{ lim *ratelog.Limiter }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.lim.Log(ctx, slog.LevelWarn, "redis client", slog.String("detail", fmt.Sprintf(format, v...)))
}

// defaultHandler is slog.Default()'s handler, looked up at every call so
// that a later slog.SetDefault takes effect.
type defaultHandler struct{}

func (defaultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return slog.Default().Handler().Enabled(ctx, l)
}

func (defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	return slog.Default().Handler().Handle(ctx, r)
}

func (defaultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return slog.Default().Handler().WithAttrs(as)
}

func (defaultHandler) WithGroup(name string) slog.Handler {
	return slog.Default().Handler().WithGroup(name)
}

// staleWarner logs the origin failures that a stale value hid from the
// client: the request succeeded, so nothing else would show them. At most
// one line per second (ratelog). Answers of the failure throttle are not
// logged: they repeat a failure already logged, and the origin was not
// asked (promflight counts them).
func staleWarner(log *slog.Logger) func(context.Context, error) {
	lim := ratelog.New(log, time.Second)
	return func(ctx context.Context, why error) {
		var te *flightcache.ThrottledError
		switch {
		case errors.As(why, &te):
			return
		case errors.Is(why, flightcache.ErrSoftTimeout):
			lim.Log(ctx, slog.LevelWarn, "origin slower than the soft timeout; served a stale value")
		default:
			lim.Log(ctx, slog.LevelWarn, "origin failed; served a stale value", slog.Any("error", why))
		}
	}
}

// instrument counts requests by route pattern and status, and writes an
// access log line per request at debug level. The labels and the log line
// name the route pattern, never the path: paths hold tenant and product
// IDs.
func instrument(reg prometheus.Registerer, log *slog.Logger, next http.Handler) http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "productd_http_requests_total",
		Help: "HTTP requests served, by route pattern and status code.",
	}, []string{"route", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "productd_http_request_duration_seconds",
		Help:    "HTTP request latency, by route pattern.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}, []string{"route"})
	reg.MustRegister(requests, duration)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "none"
		}
		took := time.Since(start)
		requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		duration.WithLabelValues(route).Observe(took.Seconds())
		if log.Enabled(r.Context(), slog.LevelDebug) {
			log.LogAttrs(r.Context(), slog.LevelDebug, "request",
				slog.String("method", r.Method), slog.String("route", route),
				slog.Int("status", sw.code), slog.Duration("took", took),
				slog.String("cache_status", sw.Header().Get("Cache-Status")))
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ready is /readyz. The instance can serve while the origin answers a
// query on the products table, or, with -stale-for (flightcache mode),
// while it answers from the cache: then a database that fails is reported
// (db: down) but keeps the instance ready, since the cache serves the
// values it holds stale for -stale-for and every instance shares the
// outage, so a load balancer that took them all out would turn stale
// answers into no answers. Without -stale-for a database that fails makes
// the instance unready, as nothing but fresh cached values could be
// served, for at most -cache-ttl. Redis is reported but
// never makes the instance unready, not even in cluster mode (which then
// degrades to process-local coalescing), since without it requests still go to
// the memory tier and the origin; a load balancer that dropped every
// instance when the shared Redis went down would turn a degraded cache
// into a full outage. The invalidation bus is reported the same way: while
// it is down, values in memory are served for at most -bus-down-ttl.
func (s *Server) ready(ctx context.Context) httpapi.Readiness {
	rd := httpapi.Readiness{Ready: true, Dependencies: map[string]string{"db": "up"}, Coalescing: s.Coalescing(), Bus: s.BusState().String()}
	if s.bus != nil {
		if last := s.bus.BusStats().LastMessage; !last.IsZero() {
			rd.BusLastMessageAge, rd.BusHeard = time.Since(last), true
		}
	}
	// The checks run side by side, each within its own deadline: a slow
	// database (a lock, a long migration) must not use up the time of the
	// Redis PING and get a healthy Redis reported down.
	var wg sync.WaitGroup
	var dbErr, redisErr error
	wg.Go(func() { dbErr = s.repo.CanServe(ctx) })
	if s.rdb != nil {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
			defer cancel()
			redisErr = s.rdb.Ping(pctx).Err()
		})
	}
	wg.Wait()
	if dbErr != nil {
		rd.Ready, rd.Dependencies["db"] = s.servesStale(), "down"
	}
	if s.rdb != nil {
		rd.Dependencies["redis"] = "up"
		if redisErr != nil {
			rd.Dependencies["redis"] = "down"
		}
		if s.breaker != nil {
			rd.Dependencies["redis_breaker"] = s.breaker.State().String()
		}
		if s.redisAt.tls {
			// An unverified TLS Redis (skip_verify=true) stays visible
			// after the start-up warning has scrolled away.
			rd.Dependencies["redis_tls"] = "verified"
			if s.redisAt.insecure {
				rd.Dependencies["redis_tls"] = "unverified"
			}
		}
	}
	return rd
}

// servesStale reports whether the cache keeps values past their TTL to
// stand in for a failed or slow origin: -stale-for in flightcache mode
// (the naive mode has no stale values).
func (s *Server) servesStale() bool { return s.cache != nil && s.cfg.StaleFor > 0 }

// Coalescing is the scope loads are coalesced in right now, as /readyz
// and the startup log show it: "cluster"; "local (degraded)" when cluster
// mode was asked for but Redis fails at run time (each new load retries
// the coordinator, so it comes back by itself); "local" when asked for
// (or without -redis); "none" in naive mode.
func (s *Server) Coalescing() string {
	switch {
	case s.cache == nil:
		return "none"
	case s.coord == nil:
		return CoalesceLocal
	case s.cache.Scope() == flightcache.ScopeCluster:
		return CoalesceCluster
	}
	return CoalesceLocal + " (degraded)"
}

// BusState is the state of the cache's invalidation bus: BusUp while
// other instances' invalidations arrive, BusDown while they may not (values
// in memory are then served for at most -bus-down-ttl), BusNone without
// -redis or in naive mode.
func (s *Server) BusState() driver.BusState {
	if s.cache == nil {
		return driver.BusNone
	}
	return s.cache.BusState()
}

// Handler is the server's HTTP handler, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// OriginQueries is the number of product lookups that reached the origin.
func (s *Server) OriginQueries() int64 { return s.counted.Queries() }

// OriginRows is the number of product rows the origin lookups asked for
// (OriginRowsMetric).
func (s *Server) OriginRows() int64 { return s.counted.Rows() }

// Tiers names the cache tiers in use, for logs.
func (s *Server) Tiers() string {
	switch {
	case s.cfg.Mode == product.ModeNaive:
		return "memory (uncoordinated)"
	case s.rdb != nil:
		return "memory+redis"
	default:
		return "memory"
	}
}

// Serve answers HTTP on ln until ctx is done, then shuts down gracefully:
// it stops accepting, waits up to cfg.ShutdownTimeout for requests in
// flight, closes the cache (stopping background refreshes), and closes the
// Redis and database connections. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// In cluster mode a request may wait for another instance's load,
	// then run its own. A write has -write-timeout for the database, then
	// publishes its invalidation (-redis-timeout) and deletes superseded
	// entries and its outbox record (1s each, at most).
	longestRequest := max(s.cfg.EffectiveCoalesceWait()+s.cfg.LoaderTimeout, s.cfg.WriteTimeout+s.cfg.RedisTimeout+2*time.Second)
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      longestRequest + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	scope := s.Coalescing()
	attrs := []slog.Attr{
		slog.String("addr", ln.Addr().String()),
		slog.String("mode", string(s.cfg.Mode)),
		slog.String("coalescing", scope),
		slog.String("tiers", s.Tiers()),
	}
	if s.redisAt != nil {
		attrs = append(attrs, slog.String("redis", s.redisAt.String()))
	}
	if s.bus != nil {
		attrs = append(attrs, slog.String("bus", "redis"),
			slog.Duration("bus_heartbeat", s.cfg.BusHeartbeat),
			slog.Duration("bus_down_after", s.cfg.EffectiveBusDownAfter()),
			slog.Duration("bus_down_ttl", s.cfg.BusDownTTL))
	} else {
		attrs = append(attrs, slog.String("bus", "none"))
	}
	attrs = append(attrs,
		slog.String("origin", string(s.repo.Dialect())),
		slog.String("db", s.repo.Name()),
		slog.Duration("ttl", s.cfg.TTL),
		slog.Duration("stale_for", s.cfg.StaleFor),
		slog.Duration("soft_timeout", s.cfg.SoftTimeout),
		slog.Bool("early_refresh", s.cfg.EarlyRefresh),
		slog.Duration("origin_latency", s.cfg.OriginLatency),
		slog.String("writes", s.cfg.Writes),
		slog.Int("max_tenants", s.cfg.MaxTenants),
		slog.Int("max_creates_per_tenant", s.cfg.MaxCreatesPerTenant))
	s.log.LogAttrs(ctx, slog.LevelInfo, "productd listening", attrs...)

	// The outbox relay (flightcache mode; it returns at once otherwise)
	// runs while the server does, and ends before Close.
	rctx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		s.svc.RelayOutbox(rctx, s.relay)
	}()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(jsonErrorListener{ln}) }()
	var serveErr error
	select {
	case <-ctx.Done():
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "shutting down: draining requests in flight",
			slog.Duration("timeout", s.cfg.ShutdownTimeout))
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
	if serveErr == nil {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	stopRelay()
	<-relayDone
	closeErr := s.Close()
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "productd stopped")
	return errors.Join(serveErr, shutdownErr, closeErr)
}

// Close releases the cache, the tiers and the connections. It is
// idempotent; Serve calls it.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.guard != nil {
			errs = append(errs, s.guard.close())
		}
		// The Cache first: it stops its bus subscription and its loads,
		// which use the Coordinator (bus and, in cluster mode, coord).
		if s.cache != nil {
			errs = append(errs, s.cache.Close())
		}
		if s.bus != nil {
			errs = append(errs, s.bus.Close())
		}
		if s.local != nil {
			s.local.Close()
		}
		if s.rdb != nil {
			errs = append(errs, s.rdb.Close())
		}
		if s.repo != nil {
			errs = append(errs, s.repo.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Reload re-reads what productd takes up without a restart, the write
// tokens of -write-token-file, and logs the outcome: the tokens accepted
// from now on, or why the file cannot be used (missing, malformed, open to
// other users), in which case the tokens in use stay. Nothing else changes:
// every other setting needs a restart. cmd/productd calls it on SIGHUP.
func (s *Server) Reload(ctx context.Context) error {
	n, err := s.auth.reload()
	switch {
	case err != nil:
		s.log.LogAttrs(ctx, slog.LevelError, "reload failed: the write tokens in use stay", slog.String("error", err.Error()))
	case n == 0:
		s.log.LogAttrs(ctx, slog.LevelInfo, "reload: nothing to reload (no -write-token-file)")
	default:
		s.log.LogAttrs(ctx, slog.LevelInfo, "reload: write tokens reloaded from -write-token-file", slog.Int("tokens", n))
	}
	return err
}

// Run is the whole service: New, listen on cfg.Addr, Serve until ctx is
// done. Each value received on reload (cmd/productd sends SIGHUP there)
// calls Reload; reload may be nil.
func Run(ctx context.Context, cfg Config, log *slog.Logger, reload <-chan os.Signal) error {
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("productd: listen: %w", err)
	}
	served := make(chan struct{})
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-reload:
				s.Reload(ctx)
			case <-served:
				return
			}
		}
	}()
	err = s.Serve(ctx, ln)
	close(served)
	<-reloaded
	return err
}

// untilAnswer calls ping, 100ms apart, while it times out and ctx lasts:
// a startup check that rides out a moment's stall of a dependency or of
// the host, and reports any other error at once.
// startupWait bounds how long productd waits at startup for a Redis that
// accepts connections but does not answer yet. It is generous: on a host
// busy with other work (measured: eight instances starting beside a test
// suite on two cores) a PING can time out again and again for over 5s, and
// refusing to start then would be wrong; a refused connection still fails
// at once.
const startupWait = 15 * time.Second

func untilAnswer(ctx context.Context, ping func(context.Context) error) error {
	for {
		err := ping(ctx)
		var ne net.Error
		if err == nil || ctx.Err() != nil || !(errors.As(err, &ne) && ne.Timeout()) {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}
