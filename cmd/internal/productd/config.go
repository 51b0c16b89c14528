// Package productd is the reference service: a product-detail HTTP API over
// an SQL origin with a flightcache in front. cmd/productd runs it;
// cmd/stampede starts it in-process. Run(ctx, cfg, log, reload) is the whole
// server; New and Serve split it for callers that bring their own listener.
package productd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/redislease"
)

// Config is everything productd can be told. Every field has a flag and a
// PRODUCTD_* environment variable (see ParseFlags); Default gives the
// values used when neither is set.
type Config struct {
	Addr       string // listen address
	DB         string // see product.AcceptedDSNForms
	DBMaxConns int    // origin connection pool size
	// DBWriteConns bounds the pooled connections that writes (PUT, POST,
	// the outbox relay) hold at once, so that reads keep the rest of the
	// pool whatever makes writes wait; 0 picks EffectiveDBWriteConns'
	// default, a quarter of DBMaxConns (at least 1).
	DBWriteConns int
	// WriteTimeout bounds each write's database work, its wait for one of
	// DBWriteConns included: past it a PUT or POST is answered 503
	// writes_busy (no slot came free) or 504 write_timeout.
	WriteTimeout time.Duration
	Seed         bool   // seed the demo catalog into an empty database
	SeedProducts int    // products per tenant in the seeded catalog
	Redis        string // URL of the shared tier (RedisURLForms); empty: memory only
	RedisPrefix  string // key prefix in Redis
	// RedisEntryKeyFile and RedisEntryKey authenticate the entries of the
	// shared tier (redisstore.Options.EntryKeys; see EntryKeys): a file of
	// hex keys, one a line, the first signing and every one verifying, or
	// one hex key given directly. At most one of them; both need Redis.
	// RedisEntryKey is a secret: it never appears in -h, logs or errors.
	RedisEntryKeyFile string
	RedisEntryKey     string
	// RedisTimeout bounds every Redis call of the request path (the cache's
	// SharedTimeout) and the readiness ping.
	RedisTimeout time.Duration
	// RedisCA, RedisCert and RedisKey are PEM files for a rediss:// Redis:
	// the CA bundle that verifies it (empty: the system's roots), and a
	// client certificate and its key (both or neither).
	RedisCA, RedisCert, RedisKey string
	// Coalesce is how far loads are coalesced: CoalesceCluster (one load
	// per key across every instance sharing the Redis) or CoalesceLocal
	// (one per key per process). Empty picks cluster with -redis, local
	// without; cluster without -redis is a configuration error.
	Coalesce string
	// LeaseTTL is the cluster lease's life without a heartbeat: a crashed
	// loader is replaced within about this long.
	LeaseTTL time.Duration
	// CoalesceWait bounds how long a request waits for another instance's
	// load; past it the request is served stale, or loads on its own
	// without caching the result. 0 picks EffectiveCoalesceWait's default,
	// LeaseTTL + LoaderTimeout: a crashed leader's lease expires within
	// LeaseTTL, and the instance that takes it over loads within
	// LoaderTimeout, so a waiting request gets that load's value instead
	// of querying the origin itself (capped at what flightcache accepts;
	// see maxCoalesceWait). An explicit value shorter than LeaseTTL
	// contradicts the lease and is refused (Validate).
	CoalesceWait  time.Duration
	OriginLatency time.Duration // artificial delay per origin lookup

	// BusDownTTL, BusHeartbeat and BusDownAfter tune the invalidation bus,
	// which every instance with -redis uses in flightcache mode, whatever
	// the coalescing (see docs/productd.md for the bounds they set).
	// BusDownTTL is how long a value in memory is served, counted from when
	// it entered memory, while the bus is down
	// (flightcache.Options.BusDownTTL).
	BusDownTTL time.Duration
	// BusHeartbeat is how often each instance sends itself a heartbeat
	// through Redis (redislease.Options.HeartbeatInterval).
	BusHeartbeat time.Duration
	// BusDownAfter is how long the bus may go without a heartbeat coming
	// back before it is down (redislease.Options.DownAfter); 0 picks
	// redislease's default: 1s, or 4 BusHeartbeats if that is longer.
	BusDownAfter time.Duration
	// OutboxInterval and OutboxGrace tune the outbox relay every instance
	// runs in flightcache mode (product.RelayOptions): how often it reads
	// the outbox, and how old a record must be before it redoes the
	// record's invalidation (the writer makes it at once and deletes the
	// record; a crashed writer, or a PUT made while Redis was out, leaves
	// it to the relays).
	OutboxInterval, OutboxGrace time.Duration

	Mode product.Mode // flightcache or naive
	TTL  time.Duration
	// NegativeTTL is how long a "not found" is cached; 0 picks
	// EffectiveNegativeTTL's default, DefaultNegativeTTL capped at TTL (as
	// flightcache.Options.NegativeTTL is), so that a short TTL needs no
	// -negative-ttl of its own. An explicit value above TTL is refused.
	NegativeTTL time.Duration
	Jitter      float64
	// StaleFor keeps values this long past their TTL, to be served when a
	// load fails or (with SoftTimeout) is slow. 0 turns it off.
	StaleFor time.Duration
	// SoftTimeout: a request for a product that has a stale value (see
	// StaleFor) waits this long for the origin, then gets the stale value
	// while the load goes on in the background and refreshes the entry
	// (flightcache.Options.SoftTimeout). 0 turns it off: such a request
	// waits for the load, up to LoaderTimeout. It needs StaleFor and must
	// be below LoaderTimeout (Validate).
	SoftTimeout time.Duration
	// FailureThrottle: after a failed origin load of a product, requests
	// for it within this window get the stale value (or the failure) at
	// once instead of asking the origin again. 0 turns it off.
	FailureThrottle time.Duration
	EarlyRefresh    bool
	LoaderTimeout   time.Duration
	MaxInFlight     int
	MaxWaiters      int
	LocalMaxEntries int

	// Bloom turns on the penetration guard (flightcache mode only): a
	// Bloom filter of the catalog's (tenant, id) pairs, built from the
	// origin at startup and every BloomRebuild, sized for BloomExpected
	// pairs at a false-positive rate of BloomFPRate.
	Bloom         bool
	BloomRebuild  time.Duration
	BloomExpected int
	BloomFPRate   float64

	// Writes, WriteToken, WriteTokenFile, MaxTenants and
	// MaxCreatesPerTenant say who may write and how much (see writeauth.go
	// and docs/productd.md, "Writes").
	//
	// Writes is WritesToken (the default: a PUT or POST must carry the
	// write token as "Authorization: Bearer <token>"), WritesOpen (anyone
	// may write; productd logs a warning at every start) or WritesDisabled
	// (every write is answered 403).
	Writes string
	// WriteToken is the bearer token of WritesToken. A secret: -h, errors
	// and logs never show it. Exclusive with WriteTokenFile.
	WriteToken string
	// WriteTokenFile names a file whose first line (trimmed) is the write
	// token, and a later line a second one accepted too (a rotation); New
	// reads it, and Server.Reload again. An empty first line, a third
	// token, or a file open to users other than its owner is refused.
	WriteTokenFile string
	// MaxTenants bounds the tenants that creates may bring into the
	// catalog (a tenant with no product when its first create came); past
	// it a create in yet another tenant is answered 403 tenant_limit.
	// Tenants that had products already (the seeded ones) do not count.
	// 0: unlimited.
	MaxTenants int
	// MaxCreatesPerTenant bounds the product rows creates may add to one
	// tenant (a row is one product in one locale and currency); past it a
	// create in that tenant is answered 403 create_limit. 0: unlimited.
	MaxCreatesPerTenant int

	ShutdownTimeout time.Duration
	LogLevel        string // debug, info, warn, error
	LogFormat       string // text or json

	// Catalog is what Seed seeds; nil means product.DemoCatalog with
	// SeedProducts products per tenant. It has no flag: tests and stampede
	// set it to seed other tenants or locales.
	Catalog *product.Catalog
}

// DefaultRedisTimeout is -redis-timeout's default: four times the
// library's DefaultSharedTimeout. On a host at load 10 (two cores, twenty
// runnable processes) a loopback Redis round trip has taken over 250ms:
// each such call counted as a failure, the breaker opened, a Claim that
// timed out sent its instance to load on its own, and cluster herds made
// 4 to 5 origin queries with no Redis fault. With Redis hung, a request
// pays this at most once per call until the breaker opens (see
// redisBreakerFailures).
const DefaultRedisTimeout = time.Second

// DefaultNegativeTTL is how long a "not found" is cached when
// -negative-ttl is not set, capped at -cache-ttl (EffectiveNegativeTTL).
const DefaultNegativeTTL = 30 * time.Second

// The coalescing scopes of Config.Coalesce.
const (
	CoalesceCluster = "cluster"
	CoalesceLocal   = "local"
)

// Default returns the configuration productd runs with when nothing is set.
func Default() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		DB:              "productd.db",
		DBMaxConns:      product.DefaultMaxConns,
		WriteTimeout:    product.DefaultWriteTimeout,
		Seed:            true,
		SeedProducts:    product.DemoCatalog.ProductsPerTenant,
		RedisPrefix:     "productd:",
		RedisTimeout:    DefaultRedisTimeout,
		LeaseTTL:        redislease.DefaultLeaseTTL,
		BusDownTTL:      flightcache.DefaultBusDownTTL,
		BusHeartbeat:    redislease.DefaultHeartbeatInterval,
		OutboxInterval:  time.Second,
		OutboxGrace:     2 * time.Second,
		FailureThrottle: 2 * time.Second,
		Mode:            product.ModeFlightcache,
		TTL:             5 * time.Minute,
		Jitter:          0.1,
		LoaderTimeout:   5 * time.Second,
		MaxInFlight:     10_000,
		MaxWaiters:      100_000,
		LocalMaxEntries: 100_000,
		ShutdownTimeout: 15 * time.Second,
		LogLevel:        "info",
		LogFormat:       "text",

		Bloom:         true,
		BloomRebuild:  10 * time.Minute,
		BloomExpected: 1_000_000,
		BloomFPRate:   0.01,

		Writes:              WritesToken,
		MaxTenants:          DefaultMaxTenants,
		MaxCreatesPerTenant: DefaultMaxCreatesPerTenant,
	}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("productd: "+format, a...) }
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		// Not quoted: a password set in the wrong variable must not show.
		return bad("-addr must be host:port or :port, e.g. 127.0.0.1:8080 or :8080")
	}
	switch {
	case c.DB == "":
		return bad("-db must not be empty")
	case c.DBMaxConns < 1:
		return bad("-db-max-conns must be at least 1")
	case c.DBWriteConns < 0 || c.DBWriteConns > max(1, c.DBMaxConns-1):
		return bad("-db-write-conns %d must be 0 (a quarter of -db-max-conns, at least 1) or between 1 and -db-max-conns - 1 (%d), "+
			"so that reads keep a connection of their own while writes wait", c.DBWriteConns, max(1, c.DBMaxConns-1))
	case c.WriteTimeout < time.Millisecond || c.WriteTimeout > time.Minute:
		return bad("-write-timeout must be between 1ms and 1m")
	case c.SeedProducts < 1 || c.SeedProducts > 99_999:
		return bad("-seed-products must be between 1 and 99999")
	case c.OriginLatency < 0:
		return bad("-origin-latency must not be negative")
	case c.TTL < flightcache.MinTTL || c.TTL > flightcache.MaxTTL:
		return bad("-cache-ttl must be between %v and %v", flightcache.MinTTL, flightcache.MaxTTL)
	case c.NegativeTTL < 0 || (c.NegativeTTL != 0 && c.NegativeTTL < flightcache.MinTTL):
		return bad("-negative-ttl must be 0 (the default: %v, capped at -cache-ttl) or between %v and -cache-ttl", DefaultNegativeTTL, flightcache.MinTTL)
	case c.NegativeTTL > c.TTL:
		return bad("-negative-ttl %v is longer than -cache-ttl %v: a \"not found\" would be cached longer than a product; "+
			"lower -negative-ttl, or leave it unset for %v capped at -cache-ttl", c.NegativeTTL, c.TTL, DefaultNegativeTTL)
	case c.Jitter < 0 || c.Jitter > 0.5:
		return bad("-cache-jitter must be in [0, 0.5]")
	case c.StaleFor < 0:
		return bad("-stale-for must not be negative")
	case c.SoftTimeout < 0:
		return bad("-soft-timeout must not be negative")
	case c.SoftTimeout > 0 && c.StaleFor == 0:
		return bad("-soft-timeout %v needs -stale-for: it serves a stale value when the origin is slower than it, "+
			"and without -stale-for no value is kept past its TTL; set -stale-for (say 1h), or leave -soft-timeout 0", c.SoftTimeout)
	case c.FailureThrottle < 0 || c.FailureThrottle > time.Minute:
		return bad("-failure-throttle must be between 0 and 1m")
	case c.RedisTimeout < time.Millisecond || c.RedisTimeout > 10*time.Second:
		return bad("-redis-timeout must be between 1ms and 10s")
	case c.LoaderTimeout < time.Millisecond || c.LoaderTimeout > 10*time.Minute:
		return bad("-loader-timeout must be between 1ms and 10m")
	case c.SoftTimeout > 0 && c.SoftTimeout >= c.LoaderTimeout:
		return bad("-soft-timeout %v must be below -loader-timeout %v: past -loader-timeout the load has failed, "+
			"and a stale value stands in for a failed load without any soft timeout", c.SoftTimeout, c.LoaderTimeout)
	case c.Coalesce != "" && c.Coalesce != CoalesceCluster && c.Coalesce != CoalesceLocal:
		return bad("-coalesce must be cluster or local")
	case c.Coalesce == CoalesceCluster && c.Redis == "":
		return bad("-coalesce cluster needs -redis: the instances coordinate through Redis (use -coalesce local, or set -redis)")
	case c.Coalesce == CoalesceCluster && c.Mode == product.ModeNaive:
		return bad("-coalesce cluster does not apply to -mode naive, which coalesces nothing")
	case c.LeaseTTL < 100*time.Millisecond || c.LeaseTTL > time.Minute:
		return bad("-lease-ttl must be between 100ms and 1m")
	case c.CoalesceWait < 0:
		return bad("-coalesce-wait must not be negative")
	case c.CoalesceWait > c.maxCoalesceWait():
		return bad("-coalesce-wait %v is longer than %s (%v)", c.CoalesceWait, maxCoalesceWaitFlags, c.maxCoalesceWait())
	case c.CoalesceWait != 0 && c.CoalesceWait < c.LeaseTTL:
		return bad("-coalesce-wait %v is shorter than -lease-ttl %v: a request would stop waiting for a crashed instance's load "+
			"before its lease expires and another instance can take it over, then query the origin itself without caching the result; "+
			"set -coalesce-wait to at least -lease-ttl, or leave it 0 for -lease-ttl + -loader-timeout", c.CoalesceWait, c.LeaseTTL)
	case c.BusDownTTL < time.Millisecond || c.BusDownTTL > c.TTL:
		return bad("-bus-down-ttl must be between 1ms and -cache-ttl")
	case c.BusHeartbeat < 10*time.Millisecond || c.BusHeartbeat > 10*time.Second:
		return bad("-bus-heartbeat must be between 10ms and 10s")
	case c.BusDownAfter != 0 && (c.BusDownAfter < 2*c.BusHeartbeat || c.BusDownAfter > time.Minute):
		return bad("-bus-down-after must be 0 (the default) or between twice -bus-heartbeat and 1m")
	case c.OutboxInterval < 10*time.Millisecond || c.OutboxInterval > time.Minute:
		return bad("-outbox-interval must be between 10ms and 1m")
	case c.OutboxGrace < 0 || c.OutboxGrace > 10*time.Minute:
		return bad("-outbox-grace must be between 0 and 10m")
	case c.MaxInFlight < 0 || c.MaxWaiters < 0:
		return bad("-max-in-flight and -max-waiters must not be negative")
	case c.LocalMaxEntries < 1:
		return bad("-local-max-entries must be at least 1")
	case c.BloomRebuild < time.Second:
		return bad("-bloom-rebuild must be at least 1s")
	case c.BloomExpected < 1:
		return bad("-bloom-expected must be at least 1")
	case !(c.BloomFPRate > 0 && c.BloomFPRate < 1):
		return bad("-bloom-fp-rate must be in (0, 1)")
	case c.ShutdownTimeout <= 0:
		return bad("-shutdown-timeout must be positive")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return bad("-log-format must be text or json")
	}
	if err := c.validateWrites(); err != nil {
		return err
	}
	if _, err := product.ParseDSN(c.DB); err != nil {
		return fmt.Errorf("productd: -db: %w", err)
	}
	if err := c.validateRedis(); err != nil {
		return err
	}
	if _, err := product.ParseMode(string(c.Mode)); err != nil {
		// Not ParseMode's error, which quotes the value.
		return fmt.Errorf("productd: -mode must be %s or %s", product.ModeFlightcache, product.ModeNaive)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if err := c.validateEntryKeys(); err != nil {
		return err
	}
	return nil
}

// Coalescing is the scope c asks for: CoalesceCluster or CoalesceLocal
// (Coalesce, or its default: cluster with -redis, local without), or
// "none" in naive mode.
func (c Config) Coalescing() string {
	switch {
	case c.Mode == product.ModeNaive:
		return "none"
	case c.Coalesce != "":
		return c.Coalesce
	case c.Redis != "":
		return CoalesceCluster
	}
	return CoalesceLocal
}

// EffectiveNegativeTTL is NegativeTTL, or the default it stands for when
// 0: DefaultNegativeTTL, capped at TTL.
func (c Config) EffectiveNegativeTTL() time.Duration {
	if c.NegativeTTL != 0 {
		return c.NegativeTTL
	}
	return min(DefaultNegativeTTL, c.TTL)
}

// EffectiveCoalesceWait is CoalesceWait, or the default it stands for
// when 0: LeaseTTL + LoaderTimeout, the longest a takeover can take (the
// dead leader's lease runs out, then the new leader loads), which is also
// flightcache's own default and bound for a Coordinator with that lease.
func (c Config) EffectiveCoalesceWait() time.Duration {
	if c.CoalesceWait != 0 {
		return c.CoalesceWait
	}
	return c.maxCoalesceWait()
}

// maxCoalesceWait is the longest CoalesceWait flightcache.Options accepts
// with a Coordinator whose lease lasts LeaseTTL, and maxCoalesceWaitFlags
// names it in flag terms.
func (c Config) maxCoalesceWait() time.Duration { return c.LeaseTTL + c.LoaderTimeout }

const maxCoalesceWaitFlags = "-lease-ttl + -loader-timeout"

// EffectiveDBWriteConns is DBWriteConns, or the default it stands for
// when 0: a quarter of DBMaxConns, at least 1.
func (c Config) EffectiveDBWriteConns() int {
	if c.DBWriteConns != 0 {
		return c.DBWriteConns
	}
	return product.DefaultWriteConns(c.DBMaxConns)
}

// EffectiveBusDownAfter is BusDownAfter, or the default it stands for
// when 0: the longest of redislease.DefaultDownAfter, 4 BusHeartbeats,
// and twice RedisTimeout. A heartbeat that Redis answers within
// RedisTimeout is not lost, so the bus must not go down sooner than
// that after one was sent; twice leaves room for a heartbeat a busy host
// sends late (each time the bus goes down and up again, every instance
// empties its memory tier, and reloads what it held).
func (c Config) EffectiveBusDownAfter() time.Duration {
	if c.BusDownAfter != 0 {
		return c.BusDownAfter
	}
	return max(redislease.DefaultDownAfter, 4*c.BusHeartbeat, 2*c.RedisTimeout)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("productd: -log-level must be debug, info, warn or error")
	}
	return l, nil
}

// NewLogger returns the slog logger c asks for, writing to w.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	lvl, _ := parseLevel(c.LogLevel)
	o := &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDurations}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// readableDurations writes durations as Go duration strings ("1.5s",
// "250ms"): slog's JSON handler would write integer nanoseconds, which no
// one reads at a glance.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// envPrefix starts every environment variable productd reads.
const envPrefix = "PRODUCTD_"

// ParseFlags reads the configuration from args (without the program name)
// over the environment (getenv, usually os.Getenv) over Default: a flag
// wins over its variable, which wins over the default. -h prints every
// flag with its variable and default to out and returns flag.ErrHelp.
func ParseFlags(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := Default()
	fs := flag.NewFlagSet("productd", flag.ContinueOnError)
	var envErrs []error
	// bind registers a flag whose default comes from its variable, and
	// names the variable in the usage text.
	bind := func(name, usage string, set func(fs *flag.FlagSet, env string, usage string)) {
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		set(fs, env, usage+" (env "+env+")")
	}
	// Every value, from a flag or a variable, is parsed by functions whose
	// errors name the flag or the variable but never quote the value: a
	// value given to the wrong flag or variable may be a password.
	str := func(p *string, name, usage string) {
		bind(name, usage, func(fs *flag.FlagSet, env, usage string) {
			if v := getenv(env); v != "" {
				*p = v
			}
			fs.Var((*stringValue)(p), name, usage)
		})
	}
	var flagErrs []error
	// parsed registers a number, duration or boolean flag.
	parsed := func(name, usage string, v interface {
		flag.Value
		parseEnv(string) error
	}) {
		bind(name, usage, func(fs *flag.FlagSet, env, usage string) {
			if s := getenv(env); s != "" {
				if err := v.parseEnv(s); err != nil {
					envErrs = append(envErrs, fmt.Errorf("productd: %s: %w", env, err))
				}
			}
			fs.Var(v, name, usage)
		})
	}
	dur := func(p *time.Duration, name, usage string) {
		parsed(name, usage, &parsedValue[time.Duration]{p: p, name: name, kind: "duration", parse: parseDuration, errs: &flagErrs})
	}
	num := func(p *int, name, usage string) {
		parsed(name, usage, &parsedValue[int]{p: p, name: name, kind: "int", parse: parseInt, errs: &flagErrs})
	}
	boolean := func(p *bool, name, usage string) {
		parsed(name, usage, &parsedValue[bool]{p: p, name: name, parse: parseBool, errs: &flagErrs})
	}
	float := func(p *float64, name, usage string) {
		parsed(name, usage, &parsedValue[float64]{p: p, name: name, kind: "float", parse: parseFloat, errs: &flagErrs})
	}
	// secret registers a string flag whose value may hold a password:
	// the usage text (and so -h and every flag error) shows its default
	// redacted.
	secret := func(p *string, name, usage string) {
		bind(name, usage, func(fs *flag.FlagSet, env, usage string) {
			if v := getenv(env); v != "" {
				*p = v
			}
			fs.Var((*secretValue)(p), name, usage)
		})
	}
	// hidden registers a string flag holding a secret that is not a URL
	// (a token, a hex key), which no pattern could redact: the usage text,
	// and so -h, shows any default, even one from the environment, as
	// xxxxx, and its Set never fails, so flag's errors never quote it.
	hidden := func(p *string, name, usage string) {
		bind(name, usage, func(fs *flag.FlagSet, env, usage string) {
			if v := getenv(env); v != "" {
				*p = v
			}
			fs.Var((*hiddenValue)(p), name, usage)
		})
	}
	mode := string(c.Mode)

	str(&c.Addr, "addr", "HTTP listen address; the default listens on loopback only, :8080 listens on every interface")
	secret(&c.DB, "db", "origin database (`dsn`): "+product.AcceptedDSNForms+" (a SQLite file is created and seeded if missing)")
	num(&c.DBMaxConns, "db-max-conns", "origin connection pool size")
	num(&c.DBWriteConns, "db-write-conns", "pooled connections that writes (PUT, POST, the outbox relay) may hold at once, the rest staying the reads' (0: a quarter of -db-max-conns, at least 1; otherwise 1 to -db-max-conns - 1)")
	dur(&c.WriteTimeout, "write-timeout", "bound of each write's database work, its wait for a write connection included (1ms to 1m); past it a PUT or POST gets 503 writes_busy or 504 write_timeout")
	boolean(&c.Seed, "seed", "seed the demo catalog (3 tenants x -seed-products products x 3 locales x 3 currencies) on first start")
	num(&c.SeedProducts, "seed-products", "products per tenant in the seeded demo catalog (1 to 99999)")
	// -redis prints through redactRedisURL, which also hides
	// sentinel_password and the like.
	bind("redis", "`url` of the shared cache tier: "+RedisURLForms+"; empty keeps the cache in memory only", func(fs *flag.FlagSet, env, usage string) {
		if v := getenv(env); v != "" {
			c.Redis = v
		}
		fs.Var((*redisURLValue)(&c.Redis), "redis", usage)
	})
	str(&c.RedisCA, "redis-ca", "with a rediss:// -redis: PEM `file` of the CA certificates that verify Redis (empty: the system's roots)")
	str(&c.RedisCert, "redis-cert", "with a rediss:// -redis: PEM `file` of a client certificate to present (with -redis-key)")
	str(&c.RedisKey, "redis-key", "with a rediss:// -redis: PEM `file` of the client certificate's private key (with -redis-cert)")
	str(&c.RedisPrefix, "redis-prefix", "prefix of productd's keys in Redis")
	str(&c.RedisEntryKeyFile, "redis-entry-key-file", "with -redis: `file` of entry keys, one hex key (at least 32 hex digits, e.g. openssl rand -hex 32) a line; the first signs every entry written to Redis, an entry is served only if one of them verifies it (rotate by putting the new key first)")
	hidden(&c.RedisEntryKey, "redis-entry-key", "with -redis: one hex entry key, instead of -redis-entry-key-file (a secret: never shown)")
	dur(&c.RedisTimeout, "redis-timeout", "bound of each Redis call on the request path (1ms to 10s); a hung Redis costs a request at most this per call")
	str(&c.Coalesce, "coalesce", "how far loads are coalesced: cluster (one origin load per key across every instance sharing -redis; the default with -redis) or local (one per key per process; the default without -redis, and the only way to get it with -redis)")
	dur(&c.LeaseTTL, "lease-ttl", "cluster mode: life of a key's load lease without a heartbeat (100ms to 1m; extended every third of it while the load runs); a crashed loader is replaced within about this long")
	dur(&c.CoalesceWait, "coalesce-wait", "cluster mode: how long a request waits for another instance's load before it serves a stale value, or queries the origin itself without caching the result; at least -lease-ttl, so that a crashed instance's lease can run out and another instance take it over (0: -lease-ttl + -loader-timeout, which also covers the new leader's load)")
	dur(&c.BusDownTTL, "bus-down-ttl", "with -redis: while the invalidation bus is down, how long a value stays servable from memory after it entered it (1ms to -cache-ttl); another instance's PUT then shows here within about this long")
	dur(&c.BusHeartbeat, "bus-heartbeat", "with -redis: how often each instance sends itself a heartbeat through the invalidation bus (10ms to 10s)")
	dur(&c.BusDownAfter, "bus-down-after", "with -redis: how long the invalidation bus may go without a heartbeat coming back before it counts as down (0: the longest of 1s, 4 x -bus-heartbeat and 2 x -redis-timeout; otherwise twice -bus-heartbeat to 1m)")
	dur(&c.OutboxInterval, "outbox-interval", "flightcache mode: how often the outbox relay reads the invalidations that PUTs left undone (a writer that crashed, or Redis out), 10ms to 1m")
	dur(&c.OutboxGrace, "outbox-grace", "flightcache mode: how old an outbox record must be before the relay redoes its invalidation (0 to 10m); the writer makes it at once, so a shorter grace only makes it twice")
	dur(&c.OriginLatency, "origin-latency", "artificial delay added to each origin lookup (demos, tests), e.g. 200ms")
	str(&mode, "mode", "read path: flightcache (coalesced) or naive (uncoordinated cache-aside, to show the herd)")
	dur(&c.TTL, "cache-ttl", "how long a product stays fresh in the cache (1s to 24h)")
	dur(&c.NegativeTTL, "negative-ttl", "how long a \"not found\" is cached (0: 30s, capped at -cache-ttl; otherwise 1s to -cache-ttl)")
	float(&c.Jitter, "cache-jitter", "fraction by which each TTL is randomly shortened, in [0, 0.5]")
	dur(&c.StaleFor, "stale-for", "serve values up to this long past their TTL when the origin fails, or is slower than -soft-timeout (0: off)")
	dur(&c.SoftTimeout, "soft-timeout", "with -stale-for: how long a request for a product that has a stale value waits for the origin, counted from the start of the product's load (a request that joins a load past it gets the stale value at once), before it gets that value (Cache-Status detail=soft-timeout), the load going on in the background to refresh it; below -loader-timeout (0: off, requests wait for the load up to -loader-timeout)")
	dur(&c.FailureThrottle, "failure-throttle", "after a failed origin load of a product, serve its stale value (or the failure) at once for this long instead of asking the origin again (0: off, at most 1m)")
	boolean(&c.EarlyRefresh, "early-refresh", "refresh hot entries in the background before they expire (XFetch)")
	dur(&c.LoaderTimeout, "loader-timeout", "hard timeout of one origin load; beyond it requests get 504")
	num(&c.MaxInFlight, "max-in-flight", "products loading at once before new misses get 503 (0: unlimited)")
	num(&c.MaxWaiters, "max-waiters", "requests waiting on one load before more get 503 (0: unlimited)")
	num(&c.LocalMaxEntries, "local-max-entries", "bound of the in-memory cache tier, in entries")
	boolean(&c.Bloom, "bloom", "turn away product ids that cannot exist with a Bloom filter of the catalog, before the cache tiers and the origin")
	dur(&c.BloomRebuild, "bloom-rebuild", "how often the Bloom filter is rebuilt from the origin")
	num(&c.BloomExpected, "bloom-expected", "number of (tenant, id) pairs the Bloom filter is sized for")
	float(&c.BloomFPRate, "bloom-fp-rate", "target false-positive rate of the Bloom filter, in (0, 1)")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "how long a graceful shutdown waits for requests in flight")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "text or json")

	// Writes: who may PUT and POST, and how much creates may add.
	str(&c.Writes, "writes", "who may write (PUT, POST): token (requests need -write-token as \"Authorization: Bearer <token>\"), disabled (every write is answered 403), or open (anyone may write; logs a warning at every start)")
	hidden(&c.WriteToken, "write-token", "bearer `token` that writes need with -writes token (at least 16 printable characters, no spaces; never printed); prefer -write-token-file or the variable, which stay out of the process list")
	str(&c.WriteTokenFile, "write-token-file", "file whose first line is the write token (instead of -write-token); a second token on a later line is accepted too, for a rotation, and SIGHUP reloads the file; it must be readable by its owner only (chmod 600)")
	num(&c.MaxTenants, "max-tenants", "tenants that creates may add to the catalog, beyond those that have products already; past it a create in a new tenant gets 403 (0: unlimited)")
	num(&c.MaxCreatesPerTenant, "max-creates-per-tenant", "product rows (one per locale and currency) that creates may add to one tenant; past it a create there gets 403 (0: unlimited)")

	if err := errors.Join(envErrs...); err != nil {
		return c, err
	}
	// flag prints nothing itself: its messages quote what they could not
	// parse, which may be a secret. ParseFlags prints -h and says what is
	// wrong in its own words.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(fs, out)
		return c, err
	} else if err != nil {
		return c, flagError(err)
	}
	if err := errors.Join(flagErrs...); err != nil {
		return c, err
	}
	if fs.NArg() > 0 && emptyHidden(fs) {
		// A -write-token= followed by a space: the stray argument is the
		// token itself, which no message may show.
		return c, errors.New("productd: unexpected argument after an empty -write-token= (is its value separated from its = by a space?)")
	}
	if fs.NArg() > 0 {
		// A stray argument is often a flag's value cut off by a space
		// (-db= 'postgres://user:password@…', or a password with a space
		// left unquoted), and may hold a secret: a URL is shown redacted,
		// anything else only by its position.
		pos := len(args) - fs.NArg() + 1
		if strings.Contains(fs.Arg(0), "://") {
			return c, fmt.Errorf("productd: unexpected argument %d, %q (is a flag's value separated from its = by a space?)", pos, redactArg(fs.Arg(0)))
		}
		return c, fmt.Errorf("productd: unexpected argument %d (not shown, in case it is a credential; is a flag's value separated from its = by a space, or a value with a space not quoted?)", pos)
	}
	c.Mode = product.Mode(mode)
	return c, c.Validate()
}

// printUsage writes -h: the flags with their variables and defaults, as
// flag.PrintDefaults would, with the type names of productd's own values.
func printUsage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprintf(out, "productd: the flightcache reference product-detail service.\n\n"+
		"Usage: productd [flags]\n\nEvery flag can also be set by the environment variable shown; a flag wins.\n\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		_, isParsed := f.Value.(interface{ parseEnv(string) error })
		if k, ok := f.Value.(interface{ kindName() string }); ok && name == "value" {
			name = k.kindName()
		} else if name == "value" {
			name = "string"
		}
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch {
		case isParsed && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s":
			line += fmt.Sprintf(" (default %v)", f.DefValue)
		case !isParsed && f.DefValue != "":
			line += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintln(out, line)
	})
}

// flagNameRE matches what may be shown of an unknown flag's name: a
// mistyped flag, not a value that lost its flag.
var flagNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// flagError says in productd's words what flag.Parse refused, quoting no
// value: an unknown flag's name only when it looks like one.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if !flagNameRE.MatchString(strings.TrimPrefix(name, "-")) {
			return errors.New("productd: an argument begins with '-' but is no flag productd has (not shown, in case it is a credential); productd -h lists every flag")
		}
		return fmt.Errorf("productd: unknown flag -%s; productd -h lists every flag", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok && flagNameRE.MatchString(name) {
		return fmt.Errorf("productd: flag -%s needs a value", name)
	}
	return errors.New("productd: a malformed flag (not shown, in case it is a credential); write -name value or -name=value; productd -h lists every flag")
}

// parsedValue is the flag.Value of a number, duration or boolean flag.
// flag quotes the value in its error when a Set fails, and a value given
// to the wrong flag may be a password: so Set never fails, but keeps an
// error that names the flag, never the value, which ParseFlags returns
// after flag.Parse.
type parsedValue[T any] struct {
	p     *T
	name  string
	kind  string // the type shown by -h; "" for a boolean
	parse func(string) (T, error)
	errs  *[]error
}

func (v *parsedValue[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}

func (v *parsedValue[T]) Set(s string) error {
	if err := v.parseEnv(s); err != nil {
		*v.errs = append(*v.errs, fmt.Errorf("productd: -%s: %w", v.name, err))
	}
	return nil
}

// parseEnv sets the value from s, a variable's value; its error does not
// quote s.
func (v *parsedValue[T]) parseEnv(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *parsedValue[T]) IsBoolFlag() bool { return v.kind == "" }

func (v *parsedValue[T]) kindName() string { return v.kind }

// The parsers of parsedValue: their errors say what was expected, never
// what was given.
func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not a whole number (e.g. 20; the value is not shown, in case it is a credential)")
	}
	return n, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration (e.g. 500ms, 30s or 5m; the value is not shown, in case it is a credential)")
	}
	return d, nil
}

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("not true or false (the value is not shown, in case it is a credential)")
	}
	return b, nil
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("not a number (e.g. 0.1; the value is not shown, in case it is a credential)")
	}
	return f, nil
}

// stringValue is a string flag.Value that prints through redactArg: -h
// shows a default that came from the environment, and a password set in
// the wrong variable must not show there.
type stringValue string

func (v *stringValue) String() string {
	if v == nil {
		return ""
	}
	return redactArg(string(*v))
}

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

// secretValue is a string flag.Value that prints redacted: flag's usage
// text shows a flag's default through String.
type secretValue string

func (v *secretValue) String() string {
	if v == nil {
		return ""
	}
	return product.Redact(string(*v))
}

func (v *secretValue) Set(s string) error { *v = secretValue(s); return nil }

// hiddenValue is a string flag.Value that never prints its value: flag's
// usage text shows a flag's default through String.
type hiddenValue string

func (v *hiddenValue) String() string {
	if v == nil || *v == "" {
		return ""
	}
	return "xxxxx"
}

func (v *hiddenValue) Set(s string) error { *v = hiddenValue(s); return nil }

// emptyHidden reports whether a hidden flag was given an empty value on
// the command line.
func emptyHidden(fs *flag.FlagSet) bool {
	empty := false
	fs.Visit(func(f *flag.Flag) {
		if v, ok := f.Value.(*hiddenValue); ok && *v == "" {
			empty = true
		}
	})
	return empty
}

// FromEnvironment is ParseFlags(os.Args[1:], os.Getenv, os.Stderr).
func FromEnvironment() (Config, error) {
	return ParseFlags(os.Args[1:], os.Getenv, os.Stderr)
}
